"""Prep's shuffles through sorted run files on the output's storage, instead of the runner's memory.

    runs.py        run files (no Beam): sorted, zstd blocks, read back by position range
    transforms.py  GroupByKeyViaFiles and GroupIntoRanges, the Beam transforms built on them
"""

from pipelines.shuffle.transforms import GroupByKeyViaFiles, GroupIntoRanges, Scratch, scratch_or_local

__all__ = ["GroupByKeyViaFiles", "GroupIntoRanges", "Scratch", "scratch_or_local"]
