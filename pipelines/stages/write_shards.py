"""WriteShards (with the global shuffle): pair rows → Arrow IPC shards (zstd), staged for pairs/, + their ShardInfo.

In:  rows placed by MakeNspPairs or MakePackedRows: (split, shuffle_key, row tuple in the columns' order of the
     row format, schemas/pairs.py, ids stored).
Every row carries a seeded 64-bit shuffle key. The number of shards per split is ceil(rows /
rows_per_shard), or ceil(token bytes / bytes_per_shard) with --bytes-per-shard (uncompressed ids, 2 or 4
bytes each), known only once the rows are counted: the rows wait in sorted run files for it
(pipelines/shuffle: GroupIntoRanges), not in memory. A row goes to shard floor(key * n / 2^64), and
inside a shard rows are sorted by key (equal keys by their bytes). That is a global uniform shuffle whose
result is the same for any runner, worker count, bundle split or attempt. Every shard index is written, also
one that drew no row, so `-of-N` names never lie.
Out: (ShardInfo, Staged) per shard. Each attempt writes its own file under the scratch directory's staged/
(pipelines/outputs/attempts.py); Finalize renames the committed attempt's file to pairs/<name>, so the
ShardInfo's size and sha256 are those of the file that ends up there.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Iterable

import apache_beam as beam

from pipelines.outputs.attempts import open_attempt
from pipelines.outputs.shards import shard_count, shard_name, write_pairs
from pipelines.shuffle import GroupIntoRanges, Scratch, scratch_or_local
from schemas import ShardInfo
from schemas.pairs import NSP_PAIRS, RowFormat


def write_shard(work: tuple[str, int, int], rows: Iterable[tuple], vocab: dict, *, directory: str, staging: str,
                batch_rows: int, row_format: RowFormat = NSP_PAIRS):
    """GroupIntoRanges' consumer: one pairs shard, streamed from its rows in shuffle-key order into this attempt's
    file → (its ShardInfo, the Staged file)."""
    split, index, count = work
    name = shard_name(split, index, count)
    with open_attempt(staging, posixpath.join(directory, name)) as sink:
        written, sources = write_pairs(sink, rows, vocab["size"], batch_rows, row_format)
    staged = sink.staged()
    yield (ShardInfo(path=name, split=split, rows=written, bytes=staged.bytes, sha256=staged.sha256, source_rows=sources),
           staged)


class WriteShards(beam.PTransform):
    """Placed pair rows (split, shuffle_key, row, tokens) → (ShardInfo, Staged) per shard (GlobalShuffle included)."""

    def __init__(self, directory: str, *, rows_per_shard: int, batch_rows: int, vocab, bytes_per_shard: int | None = None,
                 scratch: Scratch | None = None, row_format: RowFormat = NSP_PAIRS):
        super().__init__()
        self.directory = directory
        self.rows_per_shard = rows_per_shard
        self.bytes_per_shard = bytes_per_shard
        self.batch_rows = batch_rows
        self.vocab = vocab  # singleton PCollection of the vocabulary summary
        self.scratch = scratch_or_local(scratch)  # the run files, and staged/ for the attempts' shard files
        self.row_format = row_format  # the rows' format (schemas/pairs.py): NSP pairs or packed rows

    def expand(self, rows):
        per_rows, per_bytes = self.rows_per_shard, self.bytes_per_shard

        def shards(split, rows, tokens, vocab):
            return shard_count(rows, tokens, vocab["size"], rows_per_shard=per_rows, bytes_per_shard=per_bytes)

        consume = functools.partial(write_shard, directory=self.directory, batch_rows=self.batch_rows,
                                    staging=posixpath.join(self.scratch.directory, "staged"), row_format=self.row_format)
        return (
            rows
            | "GlobalShuffle" >> GroupIntoRanges(self.scratch, shards, beam.pvalue.AsSingleton(self.vocab), consume=consume)
        )
