"""--packing full-sentences | doc-sentences through prep: exact rows of a tiny corpus, the report's counts, inspect's
lines, the Beam stage on 600 synthetic documents of two sources, and byte-identical shards for one worker and two."""

from __future__ import annotations

import glob
import json
import os
from collections import Counter

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline

from pipelines import prep
from pipelines.documents import keys
from pipelines.documents.records import TokenizedDoc
from pipelines.errors import PrepError
from pipelines.outputs.attempts import commit
from pipelines.stages.make_packed_rows import MakePackedRows, document_separator
from pipelines.stages.write_shards import WriteShards
from schemas import Manifest
from schemas.pairs import PACKED_ROWS, PACKINGS
from tests.helpers import digest_tree, learned_vocab_dir, run_cli

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers)

ZEN = [  # four documents of PEP 20's lines
    "Beautiful is better than ugly. Explicit is better than implicit. Simple is better than complex.",
    "Complex is better than complicated. Flat is better than nested.",
    "There should be one-- and preferably only one --obvious way to do it. Now is better than never.",
    "Readability counts. Errors should never pass silently.",
]


def shard_rows(pairs: str) -> list[dict]:
    manifest, rows = Manifest.read(pairs), []
    for shard in manifest.shards:
        with pa.ipc.open_file(manifest.resolve(shard.path)) as reader:
            rows += [{**row, "split": shard.split} for row in reader.read_all().to_pylist()]
    return rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """prep of ZEN, both packings, at --max-seq-len 16 (14 ids a row), --seed 34 (whose order of the four documents
    brings out both separator cases); every word is one token of the vocabulary."""
    root = tmp_path_factory.mktemp("zen")
    (root / "zen.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in ZEN))
    vocab = learned_vocab_dir(root / "vocab", ZEN)
    outs = {}
    for packing in ("full-sentences", "doc-sentences", "nsp"):
        out = str(root / packing)
        report = prep.run(["--input", f"zen={root}/zen.jsonl", "--output", out, "--vocab", vocab, "--max-seq-len", "16",
                           "--validation-fraction", "0", "--packing", packing, "--seed", "34"])
        tokens = (root / packing / "vocab" / "vocab.txt").read_text().splitlines()
        rows = [(" ".join(tokens[i] for i in row.get("tokens", [])), row["num_tokens"], row["doc_id"])
                for row in shard_rows(os.path.join(out, "pairs"))]
        outs[packing] = report, rows, out
    return outs


def zen_index(out: str) -> dict[str, int]:
    """{doc_id: index in ZEN} of a prep output, from its clean/ documents."""
    import pyarrow.parquet as pq

    docs = [row for path in glob.glob(os.path.join(out, "clean", "*.parquet")) for row in pq.read_table(path).to_pylist()]
    return {row["doc_id"]: ZEN.index(" ".join(row["sentences"])) for row in docs}


def zen_order(out: str) -> list[int]:
    """ZEN's documents (by index) in their packing order: by key64(seed 34, "bucket", doc_id), as make_packed_rows.py says."""
    index = zen_index(out)
    return [index[doc_id] for doc_id in sorted(index, key=lambda d: keys.key64(34, "bucket", d))]


def test_full_sentences_rows_hold_whole_sentences_across_documents_with_sep_between(tiny):
    _, rows, out = tiny["full-sentences"]
    assert zen_order(out) == [2, 3, 0, 1]  # the seeded order of these ids; the rows below follow it
    assert sorted((text, n) for text, n, _ in rows) == sorted([
        # document 2's first sentence is 18 ids: cut into 14 and 4, and the 4 are joined by its next sentence;
        ("there should be one - - and preferably only one - - obvious way", 16),
        # then a separator and document 3's first sentence fill the row exactly (4 + 6 + 1 + 3 = 14),
        ("to do it . now is better than never . [SEP] readability counts .", 16),
        # 3's second sentence starts a row, without a separator, and 0's first follows it after one (6 + 1 + 6);
        ("errors should never pass silently . [SEP] beautiful is better than ugly .", 15),
        # 0's next two sentences; then 1's first would need 12 + 1 + 6 > 14: a new row, with no separator
        ("explicit is better than implicit . simple is better than complex .", 14),
        ("complex is better than complicated . flat is better than nested .", 14),
    ])
    index = zen_index(out)  # a row's doc_id is the document it starts in
    assert {text.split()[0]: index[doc_id] for text, _, doc_id in rows} == {"there": 2, "to": 2, "errors": 3, "explicit": 0, "complex": 1}


def test_doc_sentences_rows_never_cross_a_document(tiny):
    _, rows, _ = tiny["doc-sentences"]
    assert sorted((text, n) for text, n, _ in rows) == sorted([
        ("beautiful is better than ugly . explicit is better than implicit .", 14),
        ("simple is better than complex .", 8),
        ("complex is better than complicated . flat is better than nested .", 14),
        ("there should be one - - and preferably only one - - obvious way", 16),
        ("to do it . now is better than never .", 12),
        ("readability counts . errors should never pass silently .", 11),
    ])


def test_the_report_counts_the_rows_and_their_padding(tiny):
    full, _, _ = tiny["full-sentences"]
    assert full["pairs"] == {"train": {
        "docs": 4, "sentences": 9, "rows": 5, "shards": 1, "document_separators": 2, "long_sentences": 1,
        "long_sentence_pieces": 2, "row_tokens": 16 + 16 + 15 + 14 + 14, "tokens_per_row": 15.0, "padding_fraction": 0.0625}}
    assert full["packing"] == {"mode": "full-sentences", "row_format": "packed_rows", "format_version": 4,
                               "separator": {"token": "[SEP]", "id": 3}}
    doc, _, _ = tiny["doc-sentences"]
    assert doc["pairs"]["train"]["row_tokens"] == 75 and doc["pairs"]["train"]["padding_fraction"] == round(1 - 75 / 96, 5)
    assert "document_separators" not in doc["pairs"]["train"] and "separator" not in doc["packing"]


@pytest.mark.parametrize("packing", ["full-sentences", "doc-sentences", "nsp"])
def test_the_padding_and_tokens_a_row_are_the_shards_for_every_packing(tiny, packing):
    report, rows, out = tiny[packing]
    lengths = [n for _, n, _ in rows]
    train = report["pairs"]["train"]
    assert train["rows"] == len(lengths) > 0 and train["row_tokens"] == sum(lengths)
    assert train["tokens_per_row"] == round(sum(lengths) / len(lengths), 3)
    assert train["padding_fraction"] == round(sum((16 - n) / 16 for n in lengths) / len(lengths), 5)
    label = "pairs:   train" if packing == "nsp" else "rows:    train"
    line = next(line for line in prep.summarize(report, out).splitlines() if line.startswith(label))
    assert line.endswith(f"{train['tokens_per_row']:.1f} tokens a row, padding {train['padding_fraction']:.3f}")


def test_inspect_shows_the_format_and_the_padding(tiny):
    pairs = os.path.join(tiny["full-sentences"][2], "pairs")
    result = run_cli("inspect", pairs)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "format    packed_rows v4 (--packing full-sentences, documents separated by [SEP]=3)" in lines
    assert "train      1 shards, 5 rows, 75 tokens (mean 15.0 a row), padding 0.062" in lines
    assert lines[-1] == "checksums all shards verified"


def test_dupe_factor_is_refused_for_packed_rows(tmp_path):
    result = run_cli("prep", "--input", str(tmp_path / "x.jsonl"), "--output", str(tmp_path / "o"), "--packing", "doc-sentences",
                     "--dupe-factor", "2")
    assert result.returncode == 2 and result.stderr.splitlines() == [
        "clozeforge prep: error: --dupe-factor is for --packing nsp (whose cuts are random); --packing doc-sentences packs "
        "a document one way, so its copies would be the same rows"]


def test_the_separator_is_the_sep_token_of_any_tokenizer_directory(tmp_path):
    """A RoBERTa directory as transformers writes it: tokenizer.json + tokenizer_config.json, </s> the separator."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import RobertaTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(ZEN, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]))
    bpe.save(str(tmp_path / "tokenizer.json"))
    RobertaTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json")).save_pretrained(str(tmp_path / "roberta"))
    assert document_separator(str(tmp_path / "roberta")) == {"token": "</s>", "id": 2}
    config = json.loads((tmp_path / "roberta" / "tokenizer_config.json").read_text())
    del config["sep_token"]
    (tmp_path / "roberta" / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(PrepError) as e:
        document_separator(str(tmp_path / "roberta"))
    assert str(e.value) == (f"{tmp_path}/roberta/tokenizer_config.json: names no sep_token, which --packing full-sentences "
                            "puts between documents")


SOURCES, N_DOCS, BUCKET_DOCS, SEP_ID = ("books", "web"), 600, 100, 3


def synthetic_docs() -> list[TokenizedDoc]:
    """Documents of 1-9 sentences of 1-70 ids (a row holds 62); id = 1000 + d * 1000 + s * 80 + t (never SEP_ID)."""
    rng = np.random.default_rng(1)
    return [TokenizedDoc(source=SOURCES[d % 2], path="f.jsonl", doc_id=f"doc{d:04d}", sentences=tuple(
        tuple(1000 + d * 1000 + s * 80 + t for t in range(int(rng.integers(1, 71)))) for s in range(int(rng.integers(1, 10)))))
        for d in range(N_DOCS)]


@pytest.fixture(scope="module", params=["full-sentences", "doc-sentences"])
def staged(request, tmp_path_factory):
    """MakePackedRows + WriteShards on synthetic_docs(), with a real vocabulary directory for the separator."""
    root = tmp_path_factory.mktemp(request.param)
    directory = learned_vocab_dir(root / "vocab", ZEN)
    vocab = {"size": 1 << 20, "sha256": "v", "directory": directory}  # ids up to ~6e5: uint32 columns
    p = test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"]), blocking=False)
    made = p | beam.Create(synthetic_docs()) | MakePackedRows(
        PACKINGS[request.param], max_seq_len=64, bucket_docs=BUCKET_DOCS, validation_fraction=0.1, seed=5,
        vocab=p | "Vocab" >> beam.Create([vocab]))
    shards = made["pairs"] | WriteShards(str(root / "pairs"), rows_per_shard=500, batch_rows=64,
                                         vocab=p | "V" >> beam.Create([vocab]), row_format=PACKED_ROWS)
    _ = shards | "Commit" >> beam.Map(lambda shard: commit(shard[1]))  # Finalize's part: the staged files into place
    p.run().wait_until_finish()
    tables = [pa.ipc.open_file(path).read_all() for path in sorted(glob.glob(str(root / "pairs" / "*.arrow")))]
    split_of = {path: os.path.basename(path).split("-")[0] for path in glob.glob(str(root / "pairs" / "*.arrow"))}
    rows = [row for table in tables for row in table.to_pylist()]
    splits = {}
    for path, split in split_of.items():
        for doc_id in pa.ipc.open_file(path).read_all().column("doc_id").to_pylist():
            splits[doc_id] = split
    return request.param, rows, splits


def test_the_stage_keeps_every_id_once_and_each_row_to_one_source(staged):
    _, rows, _ = staged
    ids = Counter(t for row in rows for t in row["tokens"] if t != SEP_ID)
    assert ids == Counter(t for doc in synthetic_docs() for s in doc.sentences for t in s)
    for row in rows:
        documents = {(t - 1000) // 1000 for t in row["tokens"] if t != SEP_ID}
        assert {SOURCES[d % 2] for d in documents} == {row["source"]} and 0 < len(row["tokens"]) <= 62
        assert row["num_tokens"] == len(row["tokens"]) + 2


def test_a_separator_joins_a_document_to_the_next_of_its_split_source_and_bucket_in_the_seeded_order(staged):
    from pipelines.stages.make_nsp_pairs import split_of

    mode, rows, splits = staged
    assert all(split_of(doc_id, 5, 0.1) == split for doc_id, split in splits.items())  # NSP's split, as the docstring says
    assert set(splits.values()) == {"train", "validation"}
    train = sorted((d for d in synthetic_docs() if split_of(d.doc_id, 5, 0.1) == "train"), key=lambda d: keys.key64(5, "bucket", d.doc_id))
    buckets = -(-len(train) // BUCKET_DOCS)
    following = {}
    for source in SOURCES:
        ordered = [d for d in train if d.source == source]
        for a, b in zip(ordered, ordered[1:]):
            if keys.bucket(keys.key64(5, "bucket", a.doc_id), buckets) == keys.bucket(keys.key64(5, "bucket", b.doc_id), buckets):
                following[(int(a.doc_id[3:]))] = int(b.doc_id[3:])
    joins = 0
    for row in rows:
        if splits[row["doc_id"]] != "train":
            continue
        tokens = row["tokens"]
        for i, t in enumerate(tokens):
            if t == SEP_ID:
                joins += 1
                assert following[(tokens[i - 1] - 1000) // 1000] == (tokens[i + 1] - 1000) // 1000
    assert (joins > 0) if mode == "full-sentences" else (joins == 0)


@pytest.fixture(scope="module")
def worker_runs(corpus_dir, tmp_path_factory):
    """prep of the docstring corpus with each packing, on one worker and on two worker processes; and
    full-sentences with Beam's GroupByKey as its shuffle (--shuffle runner, as on Dataflow)."""
    outs = {}
    common = ["--input", f"docs={corpus_dir}/part-*.jsonl", "--vocab-size", "800", "--validation-fraction", "0.1",
              "--rows-per-shard", "300", "--batch-rows", "50", "--bucket-docs", "40"]
    for packing in ("full-sentences", "doc-sentences"):
        for workers in (1, 2):
            out = str(tmp_path_factory.mktemp(f"{packing}-w{workers}"))
            extra = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"] if workers == 2 else []
            prep.run([*common, "--packing", packing, "--output", out, *extra])
            outs[packing, workers] = out
    outs["full-sentences", "runner"] = str(tmp_path_factory.mktemp("full-sentences-runner"))
    prep.run([*common, "--packing", "full-sentences", "--output", outs["full-sentences", "runner"], "--shuffle", "runner"])
    return outs


@pytest.mark.parametrize("packing", ["full-sentences", "doc-sentences"])
def test_one_worker_and_two_give_identical_bytes(worker_runs, packing):
    one, two = digest_tree(worker_runs[packing, 1]), digest_tree(worker_runs[packing, 2])
    assert len([k for k in one if k.startswith("pairs/") and k.endswith(".arrow")]) > 2
    assert one == two
    if packing == "full-sentences":
        assert digest_tree(worker_runs[packing, "runner"]) == one


@pytest.mark.parametrize("packing", ["full-sentences", "doc-sentences"])
def test_the_rows_hold_the_corpus_tokens_each_once(worker_runs, packing):
    """Σ over rows of each id (separators aside) = vocab/token_counts.txt, Tokenize's count of every id of the corpus."""
    out = worker_runs[packing, 1]
    manifest = Manifest.read(os.path.join(out, "pairs"))
    counts = np.zeros(manifest.vocab["size"], dtype=np.int64)
    separators = 0
    for row in shard_rows(os.path.join(out, "pairs")):
        np.add.at(counts, row["tokens"], 1)
        separators += row["tokens"].count(manifest.separator_id) if manifest.separator_id is not None else 0
        assert row["num_tokens"] == len(row["tokens"]) + 2 <= manifest.max_seq_len
    if manifest.separator_id is not None:
        counts[manifest.separator_id] -= separators
    assert counts.tolist() == manifest.read_token_counts()
    report = json.loads(open(os.path.join(out, "report.json")).read())
    assert separators == sum(stats.get("document_separators", 0) for stats in report["pairs"].values())
    assert (separators > 0) == (packing == "full-sentences")


def test_each_row_records_where_its_later_documents_start(tiny):
    """Pair format 4: `doc_starts` is the offset just after each separator in the row; none in doc-sentences rows."""
    for packing in ("full-sentences", "doc-sentences"):
        out = tiny[packing][2]
        tokens = open(os.path.join(out, "vocab", "vocab.txt")).read().splitlines()
        for row in shard_rows(os.path.join(out, "pairs")):
            after_separators = [i + 1 for i, t in enumerate(row["tokens"]) if tokens[t] == "[SEP]"]
            assert row["doc_starts"] == after_separators
    assert sum(len(row["doc_starts"]) for row in shard_rows(os.path.join(tiny["full-sentences"][2], "pairs"))) == 2
