"""--shuffle: Beam's GroupByKey (every runner but the local ones) and run files (the local runners) give
byte-identical prep outputs, ties included; `auto` picks by --runner."""

from __future__ import annotations

import functools
import random

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that

from pipelines.shuffle import GroupIntoRanges, Scratch, shuffle_via_runner


@pytest.mark.parametrize(("runner", "expected"), [
    ("DataflowRunner", True), ("FlinkRunner", True), ("SparkRunner", True), ("TestDataflowRunner", True),
    ("PortableRunner", True), ("apache_beam.runners.portability.portable_runner.PortableRunner", True),
    ("FnApiRunner", False), ("DirectRunner", False), ("BundleBasedDirectRunner", False), ("SwitchingDirectRunner", False),
    ("PrismRunner", False), (None, False),
])
def test_auto_uses_run_files_only_on_the_local_runners(runner, expected):
    """Fault 1: `auto` went by the runner's name (dataflow, flink, spark), so PortableRunner in front of a Flink or
    Spark job server got run files, which are removed once read: a recomputed stage (Spark's FetchFailed, Flink's
    region failover) then looked for a file that was gone."""
    options = PipelineOptions([f"--runner={runner}"] if runner else [])
    assert shuffle_via_runner("auto", options) is expected
    assert shuffle_via_runner("files", options) is False and shuffle_via_runner("runner", options) is True


@pytest.mark.parametrize(("argv", "kind", "outlives"), [
    (["--runner=DataflowRunner"], "Dataflow", True),
    (["--runner=FlinkRunner", "--flink_master=flink-jobmanager:8081"], "Flink", True),
    (["--runner=FlinkRunner"], "Flink", False),  # [auto]: Flink itself runs in the job server under the launcher
    (["--runner=SparkRunner", "--spark_master_url=spark://spark-master:7077"], "Spark", True),
    (["--runner=SparkRunner"], "Spark", False),  # local[4]
    (["--runner=PortableRunner", "--job_endpoint=localhost:8099"], "portable", True),
    (["--runner=PortableRunner", "--job_endpoint=embed"], "portable", False),
    (["--runner=FnApiRunner"], "local", False), (["--runner=BundleBasedDirectRunner"], "local", False),
])
def test_a_job_is_recorded_where_it_outlives_its_launcher(argv, kind, outlives):
    from pipelines import runners

    options = PipelineOptions(argv)
    assert runners.kind_of(options).name == kind and runners.outlives_launcher(options) is outlives
    record = {"runner": argv[0].split("=")[1], "id": "j1", **runners.kind_of(options).place(options)}
    assert (runners.cancel_hint(record) != "") is (kind != "local")


TIED = [("s", pos, f"value {i}".encode() * (i % 3 + 1), 1) for i, pos in enumerate([7 << 60] * 6 + [1 << 62] * 3 + [3 << 61])]
"""Records of one stream (stream, pos, value, size), nine of them on two positions: ties for the pair shuffle."""


COLLECTED: dict[str, list] = {}


def _collect(key: str, got) -> None:  # a module function: the step finds it by name, in this process
    COLLECTED[key] = sorted(got)


def ranges_of(records: list, via_runner: bool, directory: str) -> list:
    """GroupIntoRanges' output (two ranges) for `records` arriving in their order; one run file a record."""
    with test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        ranges = (p | beam.Create(records, reshuffle=False)
                  | GroupIntoRanges(Scratch(directory, spill_bytes=1, via_runner=via_runner), lambda stream, rows, size: 2))
        assert_that(ranges, functools.partial(_collect, directory))
    return COLLECTED.pop(directory)


@pytest.mark.parametrize("via_runner", [False, True], ids=["files", "runner"])
def test_tied_positions_come_out_in_one_order_whatever_order_they_arrive_in(tmp_path, via_runner):
    """Fault 2: equal positions kept the order they arrived in: GroupByKey's (runner mode), or the order of the
    spilled runs' list (files mode), which differ between attempts of a stage, so two attempts of a shard writer
    wrote different bytes. Now ties go by their encoded bytes, the same in both modes."""
    orders = [TIED, TIED[::-1], random.Random(1).sample(TIED, len(TIED))]
    results = [ranges_of(order, via_runner, str(tmp_path / f"{i}")) for i, order in enumerate(orders)]
    assert [work for work, _ in results[0]] == [("s", 0, 2), ("s", 1, 2)]
    assert results[1] == results[0] and results[2] == results[0]
    assert results[0] == ranges_of(TIED, not via_runner, str(tmp_path / "other-mode"))


@pytest.mark.integration
def test_group_by_key_and_run_files_give_identical_outputs(corpus_dir, tmp_path):
    from pipelines import prep
    from tests.helpers import digest_tree

    common = ["--input", f"docs={corpus_dir}/*.jsonl", "--vocab-size", "800", "--validation-fraction", "0.1",
              "--rows-per-shard", "300", "--batch-rows", "50", "--bucket-docs", "40", "--dedup", "near"]
    reports = {}
    for mode in ("files", "runner"):
        reports[mode] = prep.run([*common, "--output", str(tmp_path / mode), "--shuffle", mode])
    digests = {mode: digest_tree(str(tmp_path / mode)) for mode in reports}
    assert any(k.startswith("pairs/") and k.endswith(".arrow") for k in digests["files"])
    assert digests["files"] == digests["runner"]
    drop_config = lambda report: {k: v for k, v in report.items() if k != "config"}
    assert drop_config(reports["files"]) == drop_config(reports["runner"])
    assert reports["files"]["total"]["dropped"]  # the corpus has bad records: drops went through both paths
