"""WriteParallel: cleaned translation pairs → deduplicated, as Parquet shards of the PARALLEL_PAIR schema staged
for parallel/ (prep --parallel).

Exact duplicates (the same direction and normalised sides: catalogs repeat "Cancel" in every package) are grouped
through run files (pipelines/shuffle, as Deduplicate groups documents); the pair read first (smallest file, then
line) is kept, the others are `duplicate_pair` drops. The kept pairs go into shards in a seeded order
(GroupIntoRanges, as WriteCleanDocs), each attempt's file staged for Finalize to commit.

Outputs: `pairs` (the kept Pairs, for the tallies), `drops` (Drop), `staged` (Staged, one per shard).
"""

from __future__ import annotations

import functools
import hashlib
import posixpath
from collections.abc import Iterable, Iterator
import typing

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.documents import keys
from pipelines.documents.parallel import Pair, pair_key
from pipelines.documents.records import Drop
from pipelines.outputs.attempts import Staged, open_attempt
from pipelines.outputs.shards import shard_count_by_rows, shard_name
from pipelines.shuffle import (
    GroupByKeyViaFiles,
    GroupIntoRanges,
    Scratch,
    scratch_or_local,
)
from schemas.parallel import parallel_pair_schema

ROW_GROUP = 5000


def _keep_first(element):
    _, pairs = element
    pairs = sorted(pairs, key=lambda p: (p.path, p.line))
    yield pairs[0]
    for dup in pairs[1:]:
        yield beam.pvalue.TaggedOutput("drops", Drop(dup.path, "duplicate_pair", dup.line, dup.source[:80], dup.languages))


def write_pairs(sink, pairs: Iterable[Pair]) -> None:
    """`pairs` to `sink` as a Parquet file of the PARALLEL_PAIR schema, a row group at a time."""
    schema = parallel_pair_schema()
    with pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema, compression="zstd") as writer:
        chunk: list[Pair] = []
        for pair in [*pairs, None]:
            if pair is not None:
                chunk.append(pair)
            if chunk and (pair is None or len(chunk) == ROW_GROUP):
                writer.write_table(pa.table({name: [getattr(p, name) for p in chunk] for name in schema.names}, schema=schema))
                chunk = []


def _write_shard(work: tuple[str, int, int], pairs: Iterable[Pair], *, directory: str, staging: str) -> Iterator[Staged]:
    _, index, count = work
    with open_attempt(staging, posixpath.join(directory, shard_name("pairs", index, count, "parquet"))) as sink:
        write_pairs(sink, pairs)
    yield sink.staged()


class WriteParallel(beam.PTransform):
    """Pair → {"pairs", "drops", "staged"} (see the module docstring)."""

    def __init__(self, directory: str, *, seed: int, pairs_per_shard: int = 200_000, scratch: Scratch | None = None):
        super().__init__()
        self.directory, self.seed, self.pairs_per_shard = directory, seed, pairs_per_shard
        self.scratch = scratch_or_local(scratch)

    def expand(self, pairs):
        seed, per_shard = self.seed, self.pairs_per_shard
        deduped = (
            pairs
            | "KeyByPair" >> beam.Map(lambda p: (hashlib.sha1(pair_key(p).encode()).hexdigest(), p)).with_output_types(tuple[str, typing.Any])
            | "GroupByPair" >> GroupByKeyViaFiles(self.scratch.sub("dedup"))
            | "KeepFirst" >> beam.FlatMap(_keep_first).with_outputs("drops", main="pairs")
        )
        staged = (
            deduped.pairs
            | "PlacePairs" >> beam.Map(lambda p: ("parallel", keys.key64(seed, "parallel", pair_key(p)), p, 0))
            | "WriteShards" >> GroupIntoRanges(
                self.scratch.sub("shards"),
                lambda _, n, __: shard_count_by_rows(n, per_shard),
                consume=functools.partial(_write_shard, directory=self.directory,
                                          staging=posixpath.join(self.scratch.directory, "staged")),
            )
        )
        return {"pairs": deduped.pairs, "drops": deduped.drops, "staged": staged}
