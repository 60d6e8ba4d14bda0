"""SourceStream: ShardStream's layout over the rows of one named input (`--input NAME=...`) of a prep run.

Prep shuffles rows of all named inputs into the same shards and records only rows per source per *shard*,
so a "rows of source X" component first scans the `source` column of the split (only that column is read;
shards holding X alone or no X are skipped) to count X's rows per record batch. Its layout is ShardStream's
over those counts, and each block is cut down to X's rows when read, so X's rows are read exactly once per
component epoch with full batches; the cost is reading the other sources' rows of the same blocks, and the
scan at start-up.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import ContractError, Manifest
from trainer.data.layout import Block
from trainer.data.reader import ShardReader, open_shard
from trainer.data.stream import ShardStream


def source_block_rows(manifest: Manifest, split: str, source: str, blocks: Sequence[Block], cache_dir: str | None = None) -> list[int]:
    """Rows of `source` in each block of the split (reads only the `source` column, and only of mixed shards)."""
    counts, shards = [], manifest.split_shards(split)
    by_shard: dict[int, list[Block]] = {}
    for b in blocks:
        by_shard.setdefault(b.shard, []).append(b)
    for s, shard_blocks in by_shard.items():
        info, found = shards[s], []
        want = info.source_rows.get(source, 0)
        if want in (0, info.rows):  # no row of X, or nothing but X: the manifest already says
            found = [b.rows if want else 0 for b in shard_blocks]
        else:
            with open_shard(manifest.resolve(info.path), cache_dir) as f:
                schema = pa.ipc.open_file(f).schema
                options = pa.ipc.IpcReadOptions(included_fields=[schema.get_field_index("source")])
                reader = pa.ipc.open_file(f, options=options)
                for b in shard_blocks:
                    found.append(pc.sum(pc.equal(reader.get_batch(b.index).column(0), source)).as_py() or 0)
        if sum(found) != want:
            raise ContractError(f"{manifest.resolve(info.path)}: {sum(found)} rows of source {source!r}, the manifest says {want}")
        counts += found
    return counts


class _SourceReader:
    """A ShardReader whose record batches come back cut down to one source's rows (the last few kept: batches share blocks)."""

    def __init__(self, inner: ShardReader, source: str, full: dict[tuple[int, int], Block]):
        self.inner, self.source, self.full, self.decoded_capacity = inner, source, full, inner.decoded_capacity
        self.recent: OrderedDict[tuple[int, int], pa.RecordBatch] = OrderedDict()

    def hold(self, shards: Sequence[int]) -> None:
        self.inner.hold(shards)

    def batch(self, shard: int, index: int, rows: int) -> pa.RecordBatch:
        key = (shard, index)
        if key not in self.recent:
            self.inner.decoded_capacity = self.decoded_capacity
            whole = self.inner.batch(shard, index, self.full[key].rows)
            keep = np.flatnonzero(pc.equal(whole.column("source"), self.source).to_numpy(zero_copy_only=False))
            if len(keep) != rows:
                raise ContractError(f"record batch {key}: {len(keep)} rows of source {self.source!r}, the scan counted {rows}")
            self.recent[key] = whole.take(pa.array(keep))
            while len(self.recent) > self.decoded_capacity:
                self.recent.popitem(last=False)
        return self.recent[key]

    def close(self) -> None:
        self.inner.close()


class SourceStream(ShardStream):
    """ShardStream's layout over the rows of one named input of a prep run (see the module docstring)."""

    def __init__(self, manifest: Manifest, *, source: str, **kwargs: Any):
        super().__init__(manifest, **kwargs)
        self.source = source
        self.full_blocks = {(b.shard, b.index): b for b in self.blocks}
        counts = source_block_rows(manifest, self.split, source, self.blocks, self.cache_dir)
        self.blocks = [Block(b.shard, b.index, n) for b, n in zip(self.blocks, counts) if n]
        if not sum(counts):
            raise ContractError(f"{manifest.url}: no {self.split} rows of source {source!r} (sources: {manifest.sources})")
        self.count_rows(sum(counts))

    def open_reader(self) -> _SourceReader:
        return _SourceReader(super().open_reader(), self.source, self.full_blocks)

    def __iter__(self):
        raise TypeError("a SourceStream is read through MixtureStream (a one-component mixture will do)")


