"""The prep pipeline on Beam's runners: stage behaviour (TestPipeline + assert_that), exact counters,
and byte-identical output for one worker and two worker processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import prep
from pipelines.documents.readers import ReadConfig
from pipelines.documents.records import Doc
from pipelines.errors import PrepError
from pipelines.stages.deduplicate import Deduplicate
from pipelines.stages.read_corpus import ReadCorpus
from tests.helpers import digest_tree

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)


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
    for out in two_runs.values():  # the shuffles' run files and their directory are gone
        assert not [name for name in os.listdir(out) if name.startswith(".tmp")]


def test_the_same_corpus_elsewhere_gives_identical_bytes(corpus_dir, tmp_path):
    """Document ids come from the input's name and the path under its folder, not from where the folder lies:
    the validation split, the buckets and the pairs stay put when a corpus is copied (to a bucket, to CI)."""
    outs = []
    for folder in (tmp_path / "here", tmp_path / "somewhere" / "else"):
        folder.mkdir(parents=True)
        for name in ("part-0.jsonl", "part-1.jsonl"):
            (folder / name).write_bytes((Path(corpus_dir) / name).read_bytes())
        out = str(tmp_path / f"out-{len(outs)}")
        prep.run(["--input", f"docs={folder}/part-*.jsonl", "--output", out, "--vocab-size", "500",
                  "--validation-fraction", "0.1"])
        # clean/ records each document's path and the manifest the input globs: those differ, as they should
        outs.append({k: v for k, v in digest_tree(out).items() if k.endswith(".arrow") or k.startswith("vocab/")})
    assert any(k.startswith("pairs/validation-") for k in outs[0])
    assert outs[0] == outs[1]


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
    from tests.helpers import run_cli

    result = run_cli("prep", "--input", f"{corpus_dir}/*.jsonl", "--output", str(tmp_path / "out"), "--strict")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("clozeforge prep: error: ") and "broken.jsonl:1: bad json" in lines[-1]


@pytest.mark.parametrize("flags, message", [
    (["--max-seq-len", "5"], "--max-seq-len must be in [16, 65535], got 5"),
    (["--validation-fraction", "1.5"], "--validation-fraction must be in [0, 1)"),
    (["--near-threshold", "1.5"], "--near-threshold must be in (0, 1], got 1.5"),
    (["--max-record-bytes", "0"], "--max-record-bytes must be a positive number of bytes, got 0"),
])
def test_bad_flags_are_one_line(corpus_dir, tmp_path, flags, message):
    from tests.helpers import run_cli

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
    from tests.helpers import run_cli

    (tmp_path / "x.jsonl").write_text('{"text": null}\n{"bad\n')
    result = run_cli("prep", "--input", str(tmp_path / "x.jsonl"), "--output", str(tmp_path / "out"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "no document survived reading and cleaning" in result.stderr.strip().splitlines()[-1]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["total"] == {"read": 2, "kept": 0, "dropped": {"bad_json": 1, "null_text": 1}, "events": {}}


def test_an_unnamed_input_is_quoted_as_typed(tmp_path):
    pattern = str(tmp_path / "nothing*.jsonl")
    with pytest.raises(PrepError) as err:
        ReadCorpus([("input0", pattern)], ReadConfig())
    assert str(err.value) == f"--input {pattern}: no file matches"


@pytest.mark.parametrize("threshold, kept", [(0.8, ["a", "c"]), (0.99, ["a", "b", "c"])])
def test_near_threshold_decides_what_is_a_near_duplicate(threshold, kept):
    import numpy as np

    rng = np.random.default_rng(0)
    words = [f"w{int(i)}" for i in rng.integers(0, 5000, size=120)]
    edited = list(words)
    edited[60] = "changed"  # Jaccard 111/121 = 0.92; an estimate >= 0.99 needs <= 1 of 112 hashes to differ (p ~ 0.001)
    other = [f"w{int(i)}" for i in rng.integers(0, 5000, size=120)]
    with test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        docs = p | beam.Create([doc("b", " ".join(edited)), doc("a", " ".join(words)), doc("c", " ".join(other))])
        out = docs | Deduplicate("near", threshold=threshold)
        assert_that(out["docs"] | beam.Map(lambda d: d.doc_id), equal_to(kept), label="Kept")


@pytest.mark.parametrize("mode", ["multi_processing", "multi_threading"])
def test_strict_mode_is_one_line_with_several_workers(corpus_dir, tmp_path, mode):
    from tests.helpers import run_cli

    result = run_cli("prep", "--input", f"{corpus_dir}/broken.jsonl", "--output", str(tmp_path / "out"), "--strict",
                     "--direct_num_workers", "2", "--direct_running_mode", mode)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"clozeforge prep: error: {corpus_dir}/broken.jsonl:1: bad json ('{{\"text\": \"unterminated')"
    ]


def test_an_unwritable_output_fails_before_reading(corpus_dir, tmp_path):
    from tests.helpers import run_cli

    (tmp_path / "afile").write_text("x")  # a directory under a file: not writable even for root
    out = tmp_path / "afile" / "out"
    # --strict on a broken file: had reading started, its bad json would have stopped the run first.
    result = run_cli("prep", "--input", f"{corpus_dir}/broken.jsonl", "--output", str(out), "--strict")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"clozeforge prep: error: --output {out}: cannot write there (NotADirectoryError: [Errno 20] Not a directory: '{out}')"
    ]


def test_summary_lists_events_when_there_are_any():
    report = {"total": {"read": 3, "kept": 2, "dropped": {"bad_json": 1}, "events": {}}, "vocab": {"size": 100},
              "pairs": {}, "unbalanced": []}
    assert "events" not in prep.summarize(report, "/o")
    report["total"]["events"] = {"invalid_utf8_replaced": 1, "truncated_stream": 2}
    assert "events:  truncated_stream 2, invalid_utf8_replaced 1" in prep.summarize(report, "/o").splitlines()


def synthetic_doc(rng, language: str, sentences: int = 12) -> str:
    """Sentences of made-up six-letter words held together by one language's stop words."""
    def word() -> str:
        return "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))

    template = {"en": "The {} of the {} is {} and it was in the {}.", "de": "Der {} und die {} ist nicht mit dem {} auf der {}."}
    return " ".join(template[language].format(word(), word(), word(), word()) for _ in range(sentences))


def test_counters_equal_the_report(tmp_path):
    """Every dropped_<reason>, records_kept, records_read and event_<kind> counter equals report.json's total."""
    import random

    from pipelines import config as prep_config

    rng = random.Random(3)
    english = [synthetic_doc(rng, "en") for _ in range(40)]
    near_copy = english[1].replace(english[1].split()[20], "changed", 1)  # one word of 156: Jaccard ~0.94
    records = [{"text": t} for t in english] + [{"text": synthetic_doc(rng, "de")} for _ in range(2)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (tmp_path / "b.jsonl").write_bytes(b"\n".join([
        json.dumps({"text": english[0]}).encode(),  # duplicate_exact
        json.dumps({"text": near_copy}).encode(),  # kept: --near-threshold 0.99 is stricter than its ~0.94
        b'{"text": "broken',  # bad_json
        b'{"text": null}',  # null_text
        b'{"text": "Too short."}',  # too_short (bert preset: 20 characters)
        json.dumps({"text": synthetic_doc(rng, "en") + " Caf"}).encode()[:-2] + b'\xe9."}',  # kept, invalid_utf8_replaced
    ]) + b"\n")
    args, _ = prep.parser().parse_known_args([
        "--input", f"{tmp_path}/*.jsonl", "--output", str(tmp_path / "out"), "--dedup", "near", "--near-threshold",
        "0.99", "--language", "en", "--vocab-size", "200", "--validation-fraction", "0", "--bucket-docs", "10",
        "--invalid-utf8", "replace"])
    p = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
    prep.build(p, prep_config.from_args(args))
    result = p.run()
    result.wait_until_finish()
    counters = {}
    for c in result.metrics().query(MetricsFilter().with_namespace("clozeforge"))["counters"]:
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + c.committed
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    total = report["total"]
    assert total == {"read": 48, "kept": 42, "events": {"invalid_utf8_replaced": 1},
                     "dropped": {"bad_json": 1, "duplicate_exact": 1, "language": 2, "null_text": 1, "too_short": 1}}
    assert report["config"]["near_threshold"] == 0.99 and report["config"]["language"] == "en"
    assert {k[len("dropped_"):]: v for k, v in counters.items() if k.startswith("dropped_")} == total["dropped"]
    assert {k[len("event_"):]: v for k, v in counters.items() if k.startswith("event_")} == total["events"]
    assert counters["records_kept"] == total["kept"] and counters["records_read"] == total["read"]


def test_a_small_corpus_gets_a_validation_split_that_measures_something_and_a_warning(corpus_dir, tmp_path):
    """part-0 holds a few dozen documents: 1% of them would be no document or one (no random-next partner)."""
    from tests.helpers import run_cli

    out = tmp_path / "small"
    result = run_cli("prep", "--input", f"{corpus_dir}/part-0.jsonl", "--output", str(out), "--vocab-size", "500")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    held = report["pairs"]["validation"]
    docs = report["total"]["kept"]
    # ~20% of the documents, not 1% (each document is held out by a seeded coin: 4 standard deviations)
    assert held["docs"] >= 2 and abs(held["docs"] - 0.2 * docs) <= 4 * (docs * 0.2 * 0.8) ** 0.5
    for split, stats in report["pairs"].items():  # a coin per pair: 4 standard errors
        rows = stats["random_next"] + stats["true_next"]
        assert stats.get("no_random_partner", 0) == 0 and abs(stats["random_next"] / rows - 0.5) <= 2 / rows**0.5, split
    assert any(w.startswith(f"validation split: {held['docs']} documents, fewer than --validation-min-docs 100")
               for w in report["warnings"])
    assert [line for line in result.stdout.splitlines() if line.startswith("WARNING: ")] == [
        f"WARNING: {w}" for w in report["warnings"]]


def _peak_rss_mb(argv: list[str]) -> float:
    """Run `argv` (the CLI) to its end; the peak RSS of that process tree, from os.wait4."""
    import subprocess
    import sys

    from tests.helpers import ROOT

    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    child = subprocess.Popen([sys.executable, "-m", "clozeforge", *argv], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1  # nothing to train on: every record is too short
    return usage.ru_maxrss / 1024


def test_memory_is_flat_in_the_number_of_records(tmp_path):
    """1,000,000 tiny records (every one dropped as too_short) peak within 30% of 100,000: nothing is held per
    record (each drop was an element that Beam's runner held between stages: 964 MB against 390 MB for 250k)."""
    peaks = {}
    for records in (100_000, 1_000_000):
        corpus = tmp_path / f"tiny-{records}.jsonl"
        with open(corpus, "w") as f:
            f.writelines(f'{{"text": "tiny {i}"}}\n' for i in range(records))
        out = tmp_path / f"out-{records}"
        peaks[records] = _peak_rss_mb(["prep", "--input", str(corpus), "--output", str(out)])
        report = json.loads((out / "report.json").read_text())
        assert report["total"] == {"read": records, "kept": 0, "dropped": {"too_short": records}, "events": {}}
    assert peaks[1_000_000] <= 1.3 * peaks[100_000], peaks


def test_progress_lines_end_with_the_run_totals(corpus_dir, tmp_path):
    from pipelines.outputs.progress import describe
    from tests.helpers import run_cli

    out = tmp_path / "progress"
    result = run_cli("prep", "--input", f"{corpus_dir}/part-0.jsonl", "--output", str(out), "--vocab-size", "500",
                     "--progress", "always")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    lines = [line for line in result.stderr.splitlines() if line.startswith("prep: ")]
    pairs = sum(stats["rows"] for stats in report["pairs"].values())
    assert lines and lines[-1].startswith(f"prep: read {report['total']['read']:,} records, ")
    assert lines[-1].endswith(f" | kept {report['total']['kept']:,} docs | pairs {pairs:,}") and "ETA" not in lines[-1]
    size = os.path.getsize(f"{corpus_dir}/part-0.jsonl")
    half_way = describe({"read": [10, size // 2]}, elapsed=2.0, input_bytes=size)
    assert f"of {size / 1e6:,.1f} MB" in half_way and "ETA 2s" in half_way
