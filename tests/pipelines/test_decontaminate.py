"""prep --decontaminate: evaluation n-grams (pipelines/documents/decontaminate.py), the Beam stage's drops and
counter, and a prep run that removes a planted copy of a test paragraph and counts it."""

from __future__ import annotations

import gzip
import json
import pathlib

import pyarrow.parquet as pq
import pytest

from pipelines.documents import decontaminate as dc
from pipelines.errors import PrepError
from tests.helpers import run_cli

PARAGRAPH = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a region in "
             "France. They were descended from Norse raiders and pirates from Denmark, Iceland and Norway.")


def test_words_ignore_case_and_punctuation():
    assert dc.normalized_words("The  Normans' name: NORMANDY, «a region»!") == ["the", "normans", "name", "normandy", "a", "region"]


def test_a_document_sharing_13_words_is_found_and_12_are_not():
    index = dc.NgramIndex.of_texts([PARAGRAPH])
    words = dc.normalized_words(PARAGRAPH)
    thirteen = " ".join(words[5:18]).upper()  # case and punctuation do not hide a copy
    assert index.shared_ngram(f"Some text first. {thirteen}, and more after.") == " ".join(words[5:18])
    assert index.shared_ngram("Some text first. " + " ".join(words[5:17]) + " and then something else") is None
    assert index.shared_ngram("short") is None and len(index) == len(words) - 12
    assert dc.NgramIndex.of_texts(["too short to count"]).shared_ngram("too short to count") is None


def test_evaluation_texts_by_format(tmp_path):
    squad = {"data": [{"title": "Normans", "paragraphs": [{"context": PARAGRAPH, "qas": [{"question": "Who?", "answers": []}]}]}]}
    assert PARAGRAPH in list(dc.evaluation_texts("dev-v2.0.json", json.dumps(squad).encode()))
    tsv = "index\tsentence1\tsentence2\tlabel\n0\t" + PARAGRAPH + "\tOther.\tentailment\n"
    assert PARAGRAPH in list(dc.evaluation_texts("RTE/dev.tsv", tsv.encode()))
    conll = "-DOCSTART- -X- -X- O\n\n" + "".join(f"{w} NN I-NP O\n" for w in PARAGRAPH.split()) + "\n"
    assert list(dc.evaluation_texts("eng.testb", conll.encode())) == [PARAGRAPH]
    lines = json.dumps({"text": PARAGRAPH, "label": 1}) + "\n"
    assert PARAGRAPH in list(dc.evaluation_texts("test.jsonl.gz", gzip.compress(lines.encode())))


def test_files_are_matched_hashed_and_checked(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text("a\t" + PARAGRAPH + "\n")
    (found,) = dc.match_files([str(tmp_path / "*.tsv")])
    assert found.url == str(path) and len(found.sha256) == 64 and found.long_texts == 1  # "a" is too short
    (tmp_path / "bad.json").write_text('{"data": [')
    with pytest.raises(PrepError, match=r"--decontaminate: .*bad.json: cannot read its text \(JSONDecodeError"):
        dc.match_files([str(tmp_path / "bad.json")])
    assert dc.load_index([found]).shared_ngram(PARAGRAPH) is not None
    with pytest.raises(PrepError, match=r"--decontaminate .*nothing\*\.json: matches no file"):
        dc.match_files([str(tmp_path / "nothing*.json")])
    path.write_text("changed")
    with pytest.raises(PrepError, match="changed while prep ran"):
        dc.load_index([found])


@pytest.mark.integration  # a Beam pipeline: seconds
def test_the_stage_drops_and_counts_contaminated_documents():
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing import test_pipeline
    from apache_beam.testing.util import assert_that, equal_to

    from pipelines.documents.records import Doc
    from pipelines.stages.accounting import count_drops
    from pipelines.stages.decontaminate import Decontaminate

    with pytest.MonkeyPatch.context() as mp:
        index = dc.NgramIndex.of_texts([PARAGRAPH])
        mp.setattr("pipelines.stages.decontaminate.load_index", lambda files: index)
        p = test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
        docs = p | beam.Create([Doc("s", "a.jsonl", "1", ("Intro.", PARAGRAPH.lower())), Doc("s", "a.jsonl", "2", ("Clean text.",))])
        out = docs | Decontaminate([dc.EvalFile("dev.tsv", "0" * 64)])
        assert_that(out["docs"] | beam.Map(lambda d: d.doc_id), equal_to(["2"]), label="Kept")
        _ = out["drops"] | count_drops("Test")
        result = p.run()
        result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(MetricsFilter().with_namespace("clozeforge"))["counters"]}
    assert counters["dropped_contaminated"] == 1


@pytest.mark.integration
def test_prep_removes_a_planted_test_paragraph_and_counts_it(corpus_dir, tmp_path):
    dev = tmp_path / "eval" / "dev-v1.1.json"
    dev.parent.mkdir()
    dev.write_text(json.dumps({"data": [{"title": "Normans", "paragraphs": [{"context": PARAGRAPH, "qas": []}]}]}))
    planted = tmp_path / "planted.jsonl"
    copy = "A blog post quoting an encyclopedia. " + PARAGRAPH.upper().replace(",", " ;") + " That is all for today."
    other = "A different document about rivers and mountains, written for this test, long enough to pass the filters."
    planted.write_text(json.dumps({"text": copy}) + "\n" + json.dumps({"text": other}) + "\n")
    out = tmp_path / "out"
    result = run_cli("prep", "--input", f"docs={corpus_dir}/part-*.jsonl", "--input", f"planted={planted}",
                     "--decontaminate", str(tmp_path / "eval" / "*.json"), "--output", str(out), "--vocab-size", "800",
                     "--validation-fraction", "0.1", "--rows-per-shard", "400")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["total"]["dropped"].get("contaminated") == 1 and report["unbalanced"] == []
    assert report["files"][str(planted)]["dropped"] == {"contaminated": 1}
    assert report["files"][str(planted)]["kept"] == 1
    assert all("contaminated" not in f["dropped"] for path, f in report["files"].items() if path != str(planted))
    t = report["total"]
    assert t["read"] == t["kept"] + sum(t["dropped"].values())
    assert report["decontamination"]["ngram"] == 13
    assert [(f["url"], f["long_texts"]) for f in report["decontamination"]["files"]] == [(str(dev), 1)]
    import hashlib

    assert report["decontamination"]["files"][0]["sha256"] == hashlib.sha256(dev.read_bytes()).hexdigest()
    manifest = json.loads((out / "pairs" / "manifest.json").read_text())
    assert manifest["config"]["decontamination"] == report["decontamination"]  # the run and its export can see it
    texts = [" ".join(s) for f in sorted(pathlib.Path(out, "clean").glob("*.parquet"))
             for s in pq.read_table(f).column("sentences").to_pylist()]
    assert any("rivers and mountains" in t for t in texts)
    assert not any("NORMANS" in t.upper() and "DENMARK" in t.upper() for t in texts)


@pytest.mark.integration
def test_prep_help_documents_the_flag():
    result = run_cli("prep", "--help")
    assert result.returncode == 0 and "--decontaminate GLOB" in result.stdout and "13-word n-gram" in result.stdout
