"""Multilingual prep (issue 44): language identification and per-language accounting, the vocabulary's figures per
language, the scripts table and the accent-stripping warning, on this machine's translated man pages and catalogs."""

from __future__ import annotations

import json
import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.documents.languages import (
    IDENTIFIED,
    Identifier,
    LanguageConfig,
    check_code,
)
from pipelines.documents.scripts import accent_warning, script_counts, scripts_report
from pipelines.errors import PrepError
from pipelines.stages.count_scripts import check
from tests.helpers import run_cli
from tests.pipelines.multilingual import documents, write_corpus


def _report_of(texts):
    counts = sum((script_counts(t) for t in texts), start=script_counts(""))
    return scripts_report(counts.items())


def test_accent_stripping_deletes_devanagari_and_thai_letters_and_no_latin_ones():
    counts = script_counts("तेज़ भूरी लोमड़ी")  # े, ़ (twice: ज़ and ड़ decompose to a letter and the nukta), ू
    assert counts == {("Devanagari", "chars"): 14, ("Devanagari", "marks_lost"): 4}
    assert script_counts("กินข้าว") == {("Thai", "chars"): 7, ("Thai", "marks_lost"): 2}  # ิ and ้
    assert script_counts("مَرْحَبًا") == {("Arabic", "chars"): 9, ("Arabic", "marks_lost"): 4}  # the harakat
    assert script_counts("が") == {("Hiragana", "chars"): 2, ("Hiragana", "marks_lost"): 1}  # the voiced-sound mark is kana's
    latin = ["café naïve Ångström façade", *documents("fr"), *documents("de"), *documents("pl")]
    table = _report_of(latin)
    assert set(table) >= {"Latin"} and all(row["marks_lost"] == 0 for row in table.values())
    assert accent_warning(table) is None and check(sorted(_counts(latin)), strips_accents=True, strict=True)["warning"] is None
    mixed = [*latin, *documents("hi"), *documents("th")]
    table = _report_of(mixed)
    warning = accent_warning(table)
    assert warning.startswith("uncased normalisation strips accents, which would delete letters (vowel signs, other "
                              "combining marks) of Thai (") and "Devanagari (" in warning and warning.endswith("; pass --cased to keep them")
    assert "Latin" not in warning and not table["Thai"]["spaces"] and table["Devanagari"]["spaces"]
    assert check(sorted(_counts(mixed)), strips_accents=False, strict=True)["warning"] is None  # --cased
    with pytest.raises(PrepError, match="^--strict: uncased normalisation strips accents"):
        check(sorted(_counts(mixed)), strips_accents=True, strict=True)


def _reference_script_counts(text):
    """script_counts as first written: every character of the NFD text looked at in Python (the reference the bulk
    ASCII counting must equal)."""
    import unicodedata

    from pipelines.documents.scripts import char_class

    counts, base = Counter(), None
    for ch in unicodedata.normalize("NFD", text):
        if ch.isascii():
            if ch.isalpha():
                counts["Latin", "chars"] += 1
                base = "Latin"
            continue
        script, lost = char_class(ch)
        if script is None:
            continue
        if lost:
            script = base or script
        else:
            base = script
        counts[script, "chars"] += 1
        counts[script, "marks_lost"] += lost
    return +counts


def test_script_counts_equal_the_per_character_reference_on_real_text():
    from pipelines.stages.count_scripts import CountScriptsFn
    from tests.pipelines.mixed_text import mixed_texts

    texts = [*mixed_texts(), *(d for lang in ("hi", "th", "ar", "fr", "ja") for d in documents(lang)),
             "e\u0301", "\u0301abc", "ab\u0915\u093f cd\u0301 \u093f", "x\u3099 \u304b\u3099z"]
    assert sum(not t.isascii() for t in texts) > 50 and sum(t.isascii() for t in texts) > 3
    for text in texts:
        assert script_counts(text) == _reference_script_counts(text), text[:60]
    # The stage's per-document sum: one bulk count for an ASCII document, the sentences' counts otherwise.
    fn = CountScriptsFn()
    fn.start_bundle()
    docs = [type("Doc", (), {"sentences": tuple(texts[i : i + 3])})() for i in range(0, len(texts), 3)]
    for doc in docs:
        fn.process(doc)
    assert +fn.counts == sum((_reference_script_counts(t) for t in texts), Counter())


def _counts(texts):
    total = script_counts("")
    for t in texts:
        total.update(script_counts(t))
    return total.items()


def test_language_codes_and_flags():
    for code in ("en", "pt_BR", "zh_TW", "sr@latin", "ast", "und", "zh-Hant"):
        assert check_code(code, "--parallel") == code
    for code in ("xx", "english", "EN", "e"):
        with pytest.raises(PrepError, match=f"^--parallel: unknown language code '{code}'"):
            check_code(code, "--parallel")
    with pytest.raises(PrepError, match="--keep-language needs --identify-languages"):
        LanguageConfig(keep_languages=("fr",))
    assert LanguageConfig(identify_languages=True, keep_languages=("fr", "zh", "und", "yue")).keep_languages[-1] == "yue"
    for code in ("pt_BR", "xx", "FR"):  # the identifier names no regions
        with pytest.raises(PrepError, match=f"^--keep-language: the identifier cannot name '{code}'"):
            LanguageConfig(identify_languages=True, keep_languages=(code,))
    with pytest.raises(PrepError, match=r"--language-min-prob must be in \[0, 1\], got 1.5"):
        LanguageConfig(identify_languages=True, language_min_prob=1.5)


def test_the_identified_codes_are_the_installed_models():
    identifier = Identifier(min_prob=0.5)
    assert set(identifier.model.nb_classes) == IDENTIFIED


def test_the_identifier_names_the_languages_of_this_machines_text():
    identifier = Identifier(min_prob=0.5)
    for language, expected in (("de", "de"), ("fr", "fr"), ("ru", "ru"), ("ja", "ja"), ("zh_CN", "zh"), ("th", "th"), ("ar", "ar")):
        found = [identifier.identify(d)[0] for d in documents(language)]
        assert found.count(expected) >= 0.7 * len(found), (language, found)
    assert identifier.identify("1234 5678 !!!") == ("und", 0.0)
    assert Identifier(min_prob=1.0).identify(documents("fr")[0])[0] == "und"  # nothing is that sure


def _shards(out):
    """{split: [rows]} of pairs/ (in the manifest's shard order)."""
    manifest = json.load(open(os.path.join(out, "pairs", "manifest.json")))
    rows = {}
    for shard in manifest["shards"]:
        with pa.memory_map(os.path.join(out, "pairs", shard["path"])) as source:
            rows.setdefault(shard["split"], []).extend(pa.ipc.open_file(source).read_all().to_pylist())
    return manifest, rows


def _clean_docs(out):
    names = sorted(os.listdir(os.path.join(out, "clean")))
    return pa.concat_tables(pq.read_table(os.path.join(out, "clean", n)) for n in names).to_pylist()


REPEATED = ("fr", "ru", "ja", "th")


@pytest.fixture(scope="module")
def multilingual_run(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("multilingual")
    docs = write_corpus(corpus)
    # drops to account for per language: a repeat of a document in four languages (duplicate_exact, under the
    # document's language) and a line that is not JSON (bad_json: read and dropped before identification, under und)
    repeats = [documents(language)[1] for language in REPEATED]
    (corpus / "repeats.jsonl").write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in repeats) + "{not json\n")
    out = tmp_path_factory.mktemp("out")
    result = run_cli("prep", "--input", f"man={corpus}/*.jsonl", "--output", str(out), "--identify-languages",
                     "--vocab-size", "3000", "--max-seq-len", "512", "--packing", "doc-sentences",
                     "--validation-fraction", "0.2", "--progress", "never", "--runner", "FnApiRunner")
    assert result.returncode == 0, result.stderr
    with open(out / "report.json") as f:
        return docs, str(out), json.load(f), result.stdout


@pytest.mark.integration
def test_every_document_is_accounted_for_per_language(multilingual_run):
    docs, out, report, stdout = multilingual_run
    languages = report["languages"]
    # read per language: exactly what the identifier says of each document read
    identifier = Identifier(min_prob=0.5)
    texts = [d for language in docs for d in documents(language)]
    expected = Counter(identifier.identify(d)[0] for d in texts)
    repeated = Counter(identifier.identify(documents(language)[1])[0] for language in REPEATED)
    expected.update(repeated)
    expected["und"] += 1  # the line that is not JSON
    assert {code: entry["read"] for code, entry in languages.items()} == dict(expected)
    assert sum(expected.values()) == report["total"]["read"] == sum(docs.values()) + len(REPEATED) + 1
    # kept per language: the clean shards' documents of that language, counted where they are written
    assert {code: entry["kept"] for code, entry in languages.items() if entry["kept"]} == dict(
        Counter(d["language"] for d in _clean_docs(out)))
    dropped = Counter()
    for code, entry in languages.items():
        assert entry["read"] == entry["kept"] + sum(entry["dropped"].values()), code
        dropped.update(entry["dropped"])
    assert dropped == report["total"]["dropped"]  # every drop, under a language
    assert {code: entry["dropped"].get("duplicate_exact", 0) for code, entry in languages.items() if code != "und"} == {
        code: repeated[code] for code in languages if code != "und"}
    assert languages["und"]["dropped"]["bad_json"] == 1
    assert report["unbalanced"] == []
    assert {"de", "fr", "ru", "ja", "zh", "pl", "es", "it", "uk", "hi", "th", "ar"} <= set(languages)  # ar: right to left
    # the rows are the languages' (a row's source is its language), and the scripts table counts the unspaced ones
    manifest, _ = _shards(out)
    assert set(manifest["sources"]) == {code for code, entry in languages.items() if entry["kept"]}
    recounted = Counter()
    for doc in _clean_docs(out):
        for sentence in doc["sentences"]:
            recounted.update(script_counts(sentence))
    assert report["scripts"] == scripts_report(recounted.items())
    assert report["scripts"]["Thai"]["spaces"] is False and report["scripts"]["Han"]["chars"] > 0
    warning = [w for w in report["warnings"] if w.startswith("uncased normalisation")]
    assert len(warning) == 1 and "Thai (" in warning[0] and "Devanagari (" in warning[0] and "Latin" not in warning[0]
    assert f"WARNING: {warning[0]}" in stdout.splitlines()


@pytest.mark.integration
def test_autotokenizer_gives_the_shards_ids_and_the_vocabulary_figures_in_every_script(multilingual_run):
    from transformers import AutoTokenizer

    from pipelines.filters import word_count

    _, out, report, _ = multilingual_run
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(out, "vocab"))
    docs = {row["doc_id"]: row for row in _clean_docs(out)}
    _, splits = _shards(out)
    scripts_seen, held_out = set(), {}
    for split, rows in splits.items():
        by_doc = {}
        for row in rows:
            by_doc.setdefault(row["doc_id"], []).extend(row["tokens"])
        for doc_id, tokens in by_doc.items():
            doc = docs[doc_id]
            assert tokens == [i for s in doc["sentences"] for i in tokenizer(s, add_special_tokens=False)["input_ids"]]
            scripts_seen |= {s for (s, _) in script_counts(" ".join(doc["sentences"]))}
            if split == "validation":
                held_out[doc_id] = doc
    assert {"Latin", "Cyrillic", "Han", "Thai", "Devanagari", "Arabic", "Hiragana"} <= scripts_seen
    # each language's figures: its held-out documents' words, pieces and [UNK]s, recounted with transformers
    unk = tokenizer.unk_token_id
    expected = {}
    for doc in held_out.values():
        row = expected.setdefault(doc["language"], Counter())
        row["held_out_docs"] += 1
        for sentence in doc["sentences"]:
            ids = tokenizer(sentence, add_special_tokens=False)["input_ids"]
            row["words"] += word_count(sentence)
            row["pieces"] += len(ids)
            row["unknown"] += ids.count(unk)
    figures = {code: entry["vocab"] for code, entry in report["languages"].items() if entry["vocab"]}
    assert set(figures) == set(expected) and len(figures) >= 8
    for code, row in figures.items():
        assert {k: row[k] for k in ("held_out_docs", "words", "pieces", "unknown")} == expected[code], code
        assert row["pieces_per_word"] == round(row["pieces"] / row["words"], 4)
        assert row["unknown_rate"] == round(row["unknown"] / row["pieces"], 6)


@pytest.mark.integration
def test_keep_language_drops_the_others_under_their_language_and_cased_keeps_the_letters(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    docs = write_corpus(corpus, ("fr", "de", "th"))
    result = run_cli("prep", "--input", f"{corpus}/*.jsonl", "--output", str(tmp_path / "out"), "--identify-languages",
                     "--keep-language", "fr", "--keep-language", "th", "--cased", "--strict", "--vocab-size", "500",
                     "--packing", "doc-sentences", "--progress", "never", "--runner", "FnApiRunner")
    assert result.returncode == 0, result.stderr
    report = json.load(open(tmp_path / "out" / "report.json"))
    identifier = Identifier(min_prob=0.5)
    found = Counter(identifier.identify(d)[0] for language in docs for d in documents(language))
    languages = report["languages"]
    assert {code: entry["read"] for code, entry in languages.items()} == dict(found) and found["de"] > 0
    for code, entry in languages.items():
        if code in ("fr", "th"):
            assert "language_not_kept" not in entry["dropped"] and entry["kept"] > 0, code
        else:
            assert entry["kept"] == 0 and entry["dropped"] == {"language_not_kept": found[code]}, code
    assert report["total"]["dropped"]["language_not_kept"] == sum(n for c, n in found.items() if c not in ("fr", "th"))
    assert report["unbalanced"] == [] and set(json.load(open(tmp_path / "out" / "pairs" / "manifest.json"))["sources"]) == {"fr", "th"}
    # --cased: Thai's vowel signs are kept, so no warning, not even under --strict
    assert report["scripts"]["Thai"]["marks_lost"] > 0 and not [w for w in report["warnings"] if w.startswith("uncased")]
@pytest.mark.integration
def test_strict_refuses_to_strip_letters_in_one_line_and_keeps_latin_text(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(corpus, ("hi", "th"))
    result = run_cli("prep", "--input", f"{corpus}/*.jsonl", "--output", str(tmp_path / "out"), "--strict",
                     "--vocab-size", "500", "--progress", "never", "--runner", "FnApiRunner")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("clozeforge prep: error: --strict: uncased normalisation strips accents")
    assert "pass --cased" in result.stderr and not os.path.exists(tmp_path / "out" / "report.json")
    latin = tmp_path / "latin"
    latin.mkdir()
    write_corpus(latin, ("fr", "de", "pl"))
    result = run_cli("prep", "--input", f"{latin}/*.jsonl", "--output", str(tmp_path / "latin-out"), "--strict",
                     "--vocab-size", "500", "--progress", "never", "--runner", "FnApiRunner")
    assert result.returncode == 0, result.stderr
    report = json.load(open(tmp_path / "latin-out" / "report.json"))
    assert not any(w.startswith("uncased") for w in report["warnings"]) and "languages" not in report
    assert report["scripts"]["Latin"]["marks_lost"] == 0
