"""--shuffle: Beam's GroupByKey (for runners whose shuffle is disk-backed) and run files (the local runners)
give byte-identical prep outputs; `auto` picks by --runner."""

from __future__ import annotations

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.shuffle import shuffle_via_runner


@pytest.mark.parametrize(("runner", "expected"), [
    ("DataflowRunner", True), ("FlinkRunner", True), ("SparkRunner", True), ("TestDataflowRunner", True),
    ("FnApiRunner", False), ("DirectRunner", False), ("PrismRunner", False), (None, False),
])
def test_auto_uses_the_runner_shuffle_only_where_it_is_disk_backed(runner, expected):
    options = PipelineOptions([f"--runner={runner}"] if runner else [])
    assert shuffle_via_runner("auto", options) is expected
    assert shuffle_via_runner("files", options) is False and shuffle_via_runner("runner", options) is True


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
