"""The prep pipeline on Beam's runners: stage behaviour (TestPipeline + assert_that), exact counters,
and byte-identical output for one worker and two worker processes."""

from __future__ import annotations

import hashlib
import json
import os

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import prep
from pipelines.deduplicate import Deduplicate
from pipelines.errors import PrepError
from pipelines.read_corpus import ReadCorpus
from pipelines.readers import ReadConfig
from pipelines.records import Doc


def doc(doc_id: str, *sentences: str, path: str = "f.jsonl") -> Doc:
    return Doc(source="s", path=path, doc_id=doc_id, sentences=tuple(sentences))


def test_exact_dedup_keeps_the_smallest_id():
    with test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        docs = p | beam.Create([doc("b", "Same text here."), doc("a", "Same  text here."), doc("c", "Other text.")])
        out = docs | Deduplicate("exact")
        assert_that(out["docs"] | beam.Map(lambda d: d.doc_id), equal_to(["a", "c"]), label="Kept")
        assert_that(out["drops"] | beam.Map(lambda d: d.reason), equal_to(["duplicate_exact"]), label="Dropped")


def test_near_dedup_drops_the_larger_id_of_a_near_copy():
    import numpy as np

    rng = np.random.default_rng(0)
    words = [f"w{int(i)}" for i in rng.integers(0, 5000, size=120)]
    edited = list(words)
    edited[60] = "changed"  # one word of 120: 5-gram Jaccard ~0.92
    other = [f"w{int(i)}" for i in rng.integers(0, 5000, size=120)]
    with test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        docs = p | beam.Create([doc("b", " ".join(edited)), doc("a", " ".join(words)), doc("c", " ".join(other))])
        out = docs | Deduplicate("near")
        assert_that(out["docs"] | beam.Map(lambda d: d.doc_id), equal_to(["a", "c"]), label="Kept")
        assert_that(out["drops"] | beam.Map(lambda d: d.reason), equal_to(["duplicate_near"]), label="Dropped")


def test_read_corpus_counts_every_record(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n{"text": 5}\n{"text": "two"}\n')
    options = PipelineOptions(["--runner=FnApiRunner"])
    p = test_pipeline.TestPipeline(options=options)
    read = p | ReadCorpus([("web", str(tmp_path / "*.jsonl"))], ReadConfig())
    assert_that(read["docs"] | beam.Map(lambda d: d.text), equal_to(["one", "two"]), label="Docs")
    assert_that(read["drops"] | beam.Map(lambda d: (d.reason, d.line)), equal_to([("non_string_text", 2)]), label="Drops")
    result = p.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(MetricsFilter().with_namespace("clozeforge"))["counters"]}
    assert counters["records_read"] == 3 and counters["files_read"] == 1


def test_a_glob_that_matches_nothing_names_the_flag(tmp_path):
    with pytest.raises(PrepError, match=r"--input web=.*nothing\*\.jsonl: no file matches"):
        ReadCorpus([("web", str(tmp_path / "nothing*.jsonl"))], ReadConfig())


def digest_tree(root: str) -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name == "report.json":
                continue
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def two_runs(corpus_dir, tmp_path_factory):
    outs = {}
    common = ["--input", f"docs={corpus_dir}/part-*.jsonl", "--vocab-size", "800", "--validation-fraction", "0.1",
              "--rows-per-shard", "300", "--batch-rows", "50", "--bucket-docs", "40"]
    for workers in (1, 2):
        out = str(tmp_path_factory.mktemp(f"w{workers}"))
        extra = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"] if workers == 2 else []
        prep.run([*common, "--output", out, *extra])
        outs[workers] = out
    return outs


def test_one_worker_and_two_give_identical_bytes(two_runs):
    one, two = digest_tree(two_runs[1]), digest_tree(two_runs[2])
    assert any(k.startswith("pairs/") and k.endswith(".arrow") for k in one)
    assert any(k.startswith("clean/") for k in one) and "vocab/vocab.txt" in one
    assert one == two


def test_validation_and_train_share_no_document(two_runs):
    from schemas import Manifest

    manifest = Manifest.read(os.path.join(two_runs[1], "pairs"))
    docs = {}
    for split in ("train", "validation"):
        ids = set()
        for shard in manifest.split_shards(split):
            with pa.ipc.open_file(manifest.resolve(shard.path)) as reader:
                ids |= set(reader.read_all().column("doc_id").to_pylist())
        docs[split] = ids
    assert docs["train"] and docs["validation"]
    assert not docs["train"] & docs["validation"]


def test_report_matches_the_shards(two_runs):
    from schemas import Manifest

    with open(os.path.join(two_runs[1], "report.json")) as f:
        report = json.load(f)
    manifest = Manifest.read(os.path.join(two_runs[1], "pairs"))
    assert report["unbalanced"] == []
    for split, rows in manifest.splits.items():
        stats = report["pairs"][split]
        assert stats["rows"] == rows == stats["random_next"] + stats["true_next"]
    for shard in manifest.shards:
        with pa.ipc.open_file(manifest.resolve(shard.path)) as reader:
            assert reader.read_all().num_rows == shard.rows


def test_strict_mode_is_one_line_naming_file_and_line(corpus_dir, tmp_path):
    from tests.conftest import run_cli

    result = run_cli("prep", "--input", f"{corpus_dir}/*.jsonl", "--output", str(tmp_path / "out"), "--strict")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("clozeforge prep: error: ") and "broken.jsonl:1: bad json" in lines[-1]


@pytest.mark.parametrize("flags, message", [
    (["--max-seq-len", "5"], "--max-seq-len must be in [16, 65535], got 5"),
    (["--validation-fraction", "1.5"], "--validation-fraction must be in [0, 1)"),
])
def test_bad_flags_are_one_line(corpus_dir, tmp_path, flags, message):
    from tests.conftest import run_cli

    result = run_cli("prep", "--input", f"{corpus_dir}/part-0.jsonl", "--output", str(tmp_path / "o"), *flags)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]


def test_bytes_per_shard_sizes_shards_by_tokens(corpus_dir, tmp_path):
    from schemas import Manifest

    out = str(tmp_path / "bytes")
    prep.run(["--input", f"{corpus_dir}/part-0.jsonl", "--output", out, "--vocab-size", "500",
              "--validation-fraction", "0", "--bytes-per-shard", "20000"])
    manifest = Manifest.read(os.path.join(out, "pairs"))
    tokens = 0
    for shard in manifest.shards:
        with pa.ipc.open_file(manifest.resolve(shard.path)) as reader:
            tokens += sum(reader.read_all().column("num_tokens").to_pylist()) - 3 * shard.rows
    expected = -(-tokens * 2 // 20000)  # uint16 ids
    assert len(manifest.shards) == expected > 1


def test_a_corpus_with_nothing_left_says_so(tmp_path):
    from tests.conftest import run_cli

    (tmp_path / "x.jsonl").write_text('{"text": null}\n{"bad\n')
    result = run_cli("prep", "--input", str(tmp_path / "x.jsonl"), "--output", str(tmp_path / "out"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "no document survived reading and cleaning" in result.stderr.strip().splitlines()[-1]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["total"] == {"read": 2, "kept": 0, "dropped": {"bad_json": 1, "null_text": 1}, "events": {}}
