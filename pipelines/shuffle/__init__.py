"""Prep's shuffles: through sorted run files on the output's storage on the local runners (whose GroupByKey
is held in memory), through the runner's own GroupByKey everywhere else (README.md: why, costs).

    runs.py        run files (no Beam): sorted, zstd blocks, read back by position range
    transforms.py  GroupByKeyViaFiles and GroupIntoRanges, the Beam transforms built on them (or on GroupByKey)
"""

from pipelines.shuffle.transforms import (
    GroupByKeyViaFiles,
    GroupIntoRanges,
    Scratch,
    scratch_or_local,
)


def shuffle_via_runner(mode: str, options) -> bool:
    """--shuffle MODE with the pipeline's options → whether the shuffles use Beam's GroupByKey. `auto` does on every
    runner that is not a local one (pipelines/runners.py): Dataflow, and PortableRunner, FlinkRunner or SparkRunner,
    which recompute a lost stage and would then look for run files already removed."""
    if mode != "auto":
        return mode == "runner"
    from pipelines.runners import kind_of

    return not kind_of(options).local


__all__ = ["GroupByKeyViaFiles", "GroupIntoRanges", "Scratch", "scratch_or_local", "shuffle_via_runner"]
