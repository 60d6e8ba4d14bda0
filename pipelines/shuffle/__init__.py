"""Prep's shuffles: through sorted run files on the output's storage on the local runners (whose GroupByKey
is held in memory), through the runner's own GroupByKey where that is disk-backed (README.md: why, costs).

    runs.py        run files (no Beam): sorted, zstd blocks, read back by position range
    transforms.py  GroupByKeyViaFiles and GroupIntoRanges, the Beam transforms built on them (or on GroupByKey)
"""

from pipelines.shuffle.transforms import GroupByKeyViaFiles, GroupIntoRanges, Scratch, scratch_or_local

DISK_BACKED_RUNNERS = ("dataflow", "flink", "spark")
"""Runners (by name, any case, prefix or suffix: DataflowRunner, FlinkRunner, SparkRunner, TestDataflowRunner)
whose shuffle spills to disk or to a shuffle service, so that Beam's GroupByKey does not grow a worker's memory."""


def shuffle_via_runner(mode: str, options) -> bool:
    """--shuffle MODE with the pipeline's options → whether the shuffles use Beam's GroupByKey."""
    if mode != "auto":
        return mode == "runner"
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner
    name = (runner if isinstance(runner, str) else type(runner).__name__ if runner else "").lower()
    return any(kind in name for kind in DISK_BACKED_RUNNERS)


__all__ = ["DISK_BACKED_RUNNERS", "GroupByKeyViaFiles", "GroupIntoRanges", "Scratch", "scratch_or_local", "shuffle_via_runner"]
