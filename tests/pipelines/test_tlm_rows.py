"""prep --packing tlm (issue 44): XLM's translation pairs as rows, from this machine's gettext catalogs. The rows are
exactly the kept --parallel pairs, each side the ids AutoTokenizer gives for parallel/'s text, truncated as BERT's
truncate_seq_pair (made deterministic); their languages, the manifest's packing.languages, the split, the accounting,
the same bytes on two workers, and the user errors in one line."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from pipelines.documents.catalogs import read_mo
from pipelines.documents.normalize import NormalizeConfig
from pipelines.documents.parallel import catalog_pairs, clean_pair, pair_key, tsv_pairs
from pipelines.documents.records import Pair
from pipelines.documents.tlm import pair_unit, tlm_row, truncate_pair

LOCALE = "/usr/share/locale"
CATALOGS = [f"{LOCALE}/{lang}/LC_MESSAGES/{name}.mo" for lang, name in
            (("de", "libidn2"), ("fr", "libidn2"), ("de", "iso_639-5"))]  # 7-8 KB each: ~190 pairs kept
MAX_SEQ_LEN = 24  # a budget of 21 ids: ISO 639-5's family names fit, libidn2's messages are cut


def bert_truncate(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """google-research/bert's truncate_seq_pair, the side to cut chosen as there, always from the end (its coin gone)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    return a, b


def test_truncation_is_berts_loop_without_its_coin():
    for la in range(13):
        for lb in range(13):
            for budget in range(2, 16):
                a, b = list(range(la)), list(range(100, 100 + lb))
                assert truncate_pair(a, b, budget) == bert_truncate(a, b, budget), (la, lb, budget)
    assert truncate_pair([1, 2, 3, 4, 5], [6, 7], 4) == ([1, 2], [6, 7])  # the longer side loses its end first
    assert truncate_pair([1, 2, 3], [4, 5, 6], 4) == ([1, 2], [4, 5])  # then turn about, b first on a tie
    assert truncate_pair([1, 2, 3], [4, 5, 6], 5) == ([1, 2, 3], [4, 5])


def test_a_pairs_row_its_cut_and_its_drop():
    pair = Pair("en", "pt_BR", "Cancel", "Cancelar", "/x/pt_BR/apt.mo", 7)
    row = tlm_row(pair, [1, 2, 3], [4, 5, 6, 7, 8], 5)
    assert (row.tokens_a, row.tokens_b, row.language_a, row.language_b, row.source, row.doc_id, row.cut, row.num_tokens) == (
        [1, 2, 3], [4, 5], "en", "pt_BR", "en-pt_BR", "/x/pt_BR/apt.mo:7", 3, 8)
    assert tlm_row(pair, [1], [], 5) == tlm_row(pair, [], [1], 5) == "no_tokens"
    moved = Pair("en", "pt_BR", "Cancel", "Cancelar", "/elsewhere/apt.mo", 99)  # its split and place go with its text
    assert pair_unit(pair) == pair_unit(moved) == pair_key(pair)


@pytest.mark.parametrize("argv, message", [
    (["--input", "x.txt", "--packing", "tlm"], "--packing tlm makes its rows from translation pairs: give --parallel"),
    (["--parallel", CATALOGS[0], "--packing", "tlm"], "--packing tlm needs a vocabulary for its --parallel pairs: --vocab DIR"),
    (["--parallel", CATALOGS[0]], "--input is required"),
])
def test_a_tlm_run_without_pairs_or_a_vocabulary_is_one_line(argv, message, tmp_path, capsys):
    from pipelines import prep

    assert prep.main([*argv, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"clozeforge prep: error: {message}"), err
    assert not (tmp_path / "out").exists()


def _kept_pairs(files: list[str], tsv: str) -> list[Pair]:
    """What prep --parallel keeps, by the record logic: cleaned, the first read (file, line) of each duplicate."""
    records = []
    for path in files:
        with open(path, "rb") as f:
            records += catalog_pairs(f.read(), path)
    records += tsv_pairs(open(tsv, encoding="utf-8").read(), tsv, ("en", "hi"), strict=False)
    kept: dict[str, Pair] = {}
    for record in records:
        record = clean_pair(record, NormalizeConfig()) if isinstance(record, Pair) else record
        if isinstance(record, Pair):
            first = kept.setdefault(pair_key(record), record)
            kept[pair_key(record)] = min(first, record, key=lambda p: (p.path, p.line))
    return list(kept.values())


def _rows(pairs_dir) -> list[dict]:
    import pyarrow as pa

    from schemas.pairs import validate_pairs_schema

    rows = []
    for name in sorted(n for n in os.listdir(pairs_dir) if n.endswith(".arrow")):
        table = pa.ipc.open_file(str(pairs_dir / name)).read_all()
        validate_pairs_schema(table.schema, name, "tlm_pairs")
        rows += [{**r, "split": name.split("-")[0]} for r in table.to_pylist()]
    return rows


@pytest.mark.integration
def test_prep_packing_tlm_rows_are_the_kept_pairs_as_autotokenizer_encodes_them(tmp_path, capsys):
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from pipelines import prep
    from pipelines.stages.make_nsp_pairs import split_of, validation_share
    from schemas.manifest import Manifest
    from tests.helpers import run_cli
    from tests.pipelines.multilingual import documents

    docs = documents("de") + documents("fr")
    corpus = tmp_path / "mono.jsonl"  # the documents only learn the (uncased) vocabulary
    corpus.write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs))
    with open(f"{LOCALE}/hi/LC_MESSAGES/Linux-PAM.mo", "rb") as f:
        hindi = next(e for e in read_mo(f.read(), "hi").entries if e.msgid == "Password: ")
    tsv = tmp_path / "en-hi.tsv"  # a real pair, and one whose Hindi side is vowel signs only: accent stripping leaves no id
    tsv.write_text(f"{hindi.msgid}\t{hindi.msgstr}\nYes\t\u0947\u0902\n")
    parallel = [a for c in [*CATALOGS, f"en-hi={tsv}"] for a in ("--parallel", c)]
    out = tmp_path / "a"
    assert prep.main(["--input", str(corpus), "--output", str(out), "--vocab-size", "400", "--packing", "tlm",
                      "--max-seq-len", str(MAX_SEQ_LEN), "--progress", "never", *parallel]) == 0
    summary = capsys.readouterr().out
    assert "rows:    translation pairs (--packing tlm) in de, en, fr, hi; the documents went to clean/ and the vocabulary" in summary
    report = json.load(open(out / "report.json"))
    assert report["unbalanced"] == [] and report["total"]["read"] == len(docs)  # the documents are still accounted for
    assert sorted(n for n in os.listdir(out) if not n.startswith(".")) == ["clean", "pairs", "parallel", "report.json", "vocab"]

    kept = _kept_pairs(CATALOGS, str(tsv))
    texts = {f"{r['path']}:{r['line']}": (r["source"], r["target"]) for name in sorted(os.listdir(out / "parallel"))
             for r in pq.read_table(out / "parallel" / name).to_pylist()}
    assert report["parallel"]["total"]["kept"] == len(texts) == len(kept) > 150
    assert set(texts) == {f"{p.path}:{p.line}" for p in kept}

    tokenizer = AutoTokenizer.from_pretrained(str(out / "vocab"))
    ids = {doc_id: [tokenizer(text, add_special_tokens=False)["input_ids"] for text in pair] for doc_id, pair in texts.items()}
    empty = {doc_id for doc_id, (a, b) in ids.items() if not a or not b}
    assert empty == {f"{tsv}:2"}
    rows = _rows(out / "pairs")
    assert len(rows) == len(kept) - len(empty) and {r["doc_id"] for r in rows} == set(texts) - empty
    budget = MAX_SEQ_LEN - 3
    for row in rows:
        a, b = bert_truncate(*ids[row["doc_id"]], budget)
        assert (row["tokens_a"], row["tokens_b"], row["num_tokens"]) == (a, b, len(a) + len(b) + 3), row
        language = "hi" if row["doc_id"].startswith(str(tsv)) else row["doc_id"].split("/")[4]
        assert (row["language_a"], row["language_b"], row["source"]) == ("en", language, f"en-{language}")
    long = [d for d in set(texts) - empty if len(ids[d][0]) + len(ids[d][1]) > budget]
    assert 0 < len(long) < len(rows)  # some are cut, some fit
    stats = report["pairs"]
    assert sum(s.get("truncated_pairs", 0) for s in stats.values()) == len(long)
    assert sum(s.get("truncated_ids", 0) for s in stats.values()) == sum(len(ids[d][0]) + len(ids[d][1]) - budget for d in long)
    assert sum(s.get("no_tokens", 0) for s in stats.values()) == 1
    assert {split: s["translation_pairs"] for split, s in stats.items()} == Counter(
        split_of(pair_key(p), 12345, validation_share(0.01, 100, len(kept))) for p in kept)
    by_id = {f"{p.path}:{p.line}": p for p in kept}
    assert all(r["split"] == split_of(pair_key(by_id[r["doc_id"]]), 12345, validation_share(0.01, 100, len(kept))) for r in rows)
    assert {r["split"] for r in rows} == {"train", "validation"}

    manifest = Manifest.read(str(out / "pairs"))  # schemas.manifest's reader checks the packing record
    assert manifest.packing == {"mode": "tlm", "row_format": "tlm_pairs", "format_version": 3, "languages": ["de", "en", "fr", "hi"]}
    assert manifest.sources == dict(Counter(r["source"] for r in rows)) and manifest.row_format.kind == "tlm_pairs"
    counts = [int(line) for line in open(out / "vocab" / "token_counts.txt")]  # the rows' ids, what TLM trains on
    assert len(counts) == manifest.vocab["size"] and sum(counts) == sum(len(r["tokens_a"]) + len(r["tokens_b"]) for r in rows)

    # the usual XLM flow: the earlier run's vocabulary, no documents, two worker processes: the same shard bytes
    again = tmp_path / "b"
    result = run_cli("prep", "--vocab", str(out / "vocab"), "--output", str(again), "--packing", "tlm", "--max-seq-len",
                     str(MAX_SEQ_LEN), "--progress", "never", *parallel, "--direct_num_workers", "2",
                     "--direct_running_mode", "multi_processing")
    assert result.returncode == 0, result.stderr
    shards = sorted(n for n in os.listdir(out / "pairs") if n.endswith(".arrow"))
    assert shards == sorted(n for n in os.listdir(again / "pairs") if n.endswith(".arrow"))
    assert {n: (out / "pairs" / n).read_bytes() for n in shards} == {n: (again / "pairs" / n).read_bytes() for n in shards}
    assert Manifest.read(str(again / "pairs")).shards == manifest.shards
    second = json.load(open(again / "report.json"))
    assert second["total"]["read"] == 0 and second["pairs"] == report["pairs"] and not (again / "clean").exists()

    # rows of one language are no translation pairs: one line, before anything is committed
    same = tmp_path / "en-en.tsv"
    same.write_text(f"{hindi.msgid}\tPassphrase:\n")  # a paraphrase, not a translation
    assert prep.main(["--vocab", str(out / "vocab"), "--output", str(tmp_path / "c"), "--packing", "tlm", "--progress",
                      "never", "--parallel", f"en-en={same}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(
        "clozeforge prep: error: --packing tlm: the rows hold only en, and translation pairs need two: 1 of 1"), err
    assert not os.path.exists(tmp_path / "c" / "pairs" / "manifest.json")
