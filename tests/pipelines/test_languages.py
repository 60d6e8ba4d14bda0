"""Multilingual prep (issue 44): language identification and per-language accounting, the vocabulary's figures per
language, the scripts table and the accent-stripping warning, on this machine's translated man pages and catalogs."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.documents.languages import Identifier, LanguageConfig, check_code
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


def _counts(texts):
    total = script_counts("")
    for t in texts:
        total.update(script_counts(t))
    return total.items()


def test_language_codes_and_flags():
    for code in ("en", "pt_BR", "zh_TW", "sr@latin", "ast", "und", "zh-Hant"):
        assert check_code(code, "--keep-language") == code
    for code in ("xx", "english", "EN", "e"):
        with pytest.raises(PrepError, match=f"^--keep-language: unknown language code '{code}'"):
            check_code(code, "--keep-language")
    with pytest.raises(PrepError, match="--keep-language needs --identify-languages"):
        LanguageConfig(keep_languages=("fr",))
    with pytest.raises(PrepError, match=r"--language-min-prob must be in \[0, 1\], got 1.5"):
        LanguageConfig(identify_languages=True, language_min_prob=1.5)


def test_the_identifier_names_the_languages_of_this_machines_text():
    identifier = Identifier(min_prob=0.5)
    for language, expected in (("de", "de"), ("fr", "fr"), ("ru", "ru"), ("ja", "ja"), ("zh_CN", "zh"), ("th", "th"), ("ar", "ar")):
        found = [identifier.identify(d)[0] for d in documents(language)]
        assert found.count(expected) >= 0.7 * len(found), (language, found)
    assert identifier.identify("1234 5678 !!!") == ("und", 0.0)


@pytest.fixture(scope="module")
def multilingual_run(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("multilingual")
    docs = write_corpus(corpus)
    out = tmp_path_factory.mktemp("out")
    result = run_cli("prep", "--input", f"man={corpus}/*.jsonl", "--output", str(out), "--identify-languages",
                     "--vocab-size", "3000", "--max-seq-len", "512", "--packing", "doc-sentences",
                     "--validation-fraction", "0.2", "--progress", "never")
    assert result.returncode == 0, result.stderr
    with open(out / "report.json") as f:
        return docs, str(out), json.load(f), result.stdout


@pytest.mark.integration
def test_every_document_is_accounted_for_per_language(multilingual_run):
    docs, out, report, stdout = multilingual_run
    languages = report["languages"]
    assert sum(entry["read"] for entry in languages.values()) == report["total"]["read"] == sum(docs.values())
    assert sum(entry["kept"] for entry in languages.values()) == report["total"]["kept"]
    for code, entry in languages.items():
        assert entry["read"] == entry["kept"] + sum(entry["dropped"].values()), code
    assert report["unbalanced"] == []
    assert {"de", "fr", "ru", "ja", "zh", "pl", "es", "it", "uk", "hi", "th", "ar"} <= set(languages)  # ar: right to left
    assert languages["ja"]["read"] >= 8 and languages["th"]["read"] >= 30
    # the vocabulary's figures on each language's held-out documents
    figures = {code: entry["vocab"] for code, entry in languages.items() if entry["vocab"]}
    assert len(figures) >= 8
    for code, row in figures.items():
        assert row["pieces_per_word"] == round(row["pieces"] / row["words"], 4) and 0 < row["pieces_per_word"] < 8, code
        assert row["unknown"] <= row["pieces"]
    # the rows are the languages' (a row's source is its language), and the scripts table counts the unspaced ones
    manifest = json.load(open(os.path.join(out, "pairs", "manifest.json")))
    assert set(manifest["sources"]) <= set(languages)
    assert report["scripts"]["Thai"]["spaces"] is False and report["scripts"]["Han"]["chars"] > 0
    warning = [w for w in report["warnings"] if w.startswith("uncased normalisation")]
    assert len(warning) == 1 and "Thai (" in warning[0] and "Devanagari (" in warning[0] and "Latin" not in warning[0]
    assert f"WARNING: {warning[0]}" in stdout.splitlines()


@pytest.mark.integration
def test_autotokenizer_gives_the_shards_ids_in_every_script(multilingual_run):
    from transformers import AutoTokenizer

    _, out, report, _ = multilingual_run
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(out, "vocab"))
    clean = pa.concat_tables(pq.read_table(os.path.join(out, "clean", name)) for name in sorted(os.listdir(os.path.join(out, "clean"))))
    docs = {row["doc_id"]: row for row in clean.to_pylist()}
    scripts_seen, rows = set(), 0
    for name in sorted(os.listdir(os.path.join(out, "pairs"))):
        if not name.endswith(".arrow"):
            continue
        with pa.memory_map(os.path.join(out, "pairs", name)) as source:
            table = pa.ipc.open_file(source).read_all()
        for row in table.to_pylist():
            doc = docs[row["doc_id"]]
            expected = [i for s in doc["sentences"] for i in tokenizer(s, add_special_tokens=False)["input_ids"]]
            assert row["tokens"] == expected[:len(row["tokens"])], doc["language"]
            scripts_seen |= {s for (s, _) in script_counts(" ".join(doc["sentences"]))}
            rows += 1
    assert rows and {"Latin", "Cyrillic", "Han", "Thai", "Devanagari", "Arabic", "Hiragana"} <= scripts_seen


@pytest.mark.integration
def test_strict_refuses_to_strip_letters_in_one_line_and_keeps_latin_text(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(corpus, ("hi", "th"))
    result = run_cli("prep", "--input", f"{corpus}/*.jsonl", "--output", str(tmp_path / "out"), "--strict",
                     "--vocab-size", "500", "--progress", "never")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("clozeforge prep: error: --strict: uncased normalisation strips accents")
    assert "pass --cased" in result.stderr and not os.path.exists(tmp_path / "out" / "report.json")
    latin = tmp_path / "latin"
    latin.mkdir()
    write_corpus(latin, ("fr", "de", "pl"))
    result = run_cli("prep", "--input", f"{latin}/*.jsonl", "--output", str(tmp_path / "latin-out"), "--strict",
                     "--vocab-size", "500", "--progress", "never")
    assert result.returncode == 0, result.stderr
    report = json.load(open(tmp_path / "latin-out" / "report.json"))
    assert not any(w.startswith("uncased") for w in report["warnings"]) and "languages" not in report
    assert report["scripts"]["Latin"]["marks_lost"] == 0
