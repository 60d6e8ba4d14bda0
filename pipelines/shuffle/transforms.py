"""GroupByKeyViaFiles and GroupIntoRanges: prep's shuffles, with the data in run files (pipelines/shuffle/runs.py).

GroupByKeyViaFiles: (key, value) → (key, [values]), as beam.GroupByKey (values in no particular order); the
                    keys' hashes cut into ceil(records / rows_per_partition) ranges, one reader each.
GroupIntoRanges:    (stream, pos, value, size) → ((stream, index, count), [values in pos order, equal positions in
                    the order of the values' encoded bytes]) for every
                    index of range(count), empty ones included, where `count` comes from the stream's
                    totals: ranges(stream, rows, sum of sizes, *side inputs). A value lands in range
                    keys.bucket(pos, count), so a uniform 64-bit pos gives a uniform random split, and the
                    count can depend on how much data there is without anything waiting in memory for it.
                    With `consume`, a range's values are streamed to consume((stream, index, count),
                    values, *side inputs) instead, which yields the outputs: a shard writer holds one batch,
                    and no range becomes one Beam element (Beam estimates an element's size by encoding
                    it, pickling every record of a list of records). With `tags`, consume may also yield
                    TaggedOutput(tag, x), and the transform returns {"main": outputs, tag: x's, ...}.
                    NOTE: positions run up to 2**64, past Beam's int coder (signed 64-bit): a step that makes
                    them must not be typed as producing ints (Beam infers Any from most Maps; else say
                    .with_output_types(typing.Any)).

With Scratch.via_runner both are Beam's GroupByKey instead (for Dataflow, Flink, Spark; README.md), with
the same outputs. Otherwise both are _SpilledRanges: spill the input to sorted runs (SpillFn, memory: `spill_bytes` a bundle), pass only
the RunInfos through Beam (a side input), read each range back from every run (one block per run in
memory), and remove the runs once every reader is done. Outputs do not depend on bundles, attempts or workers:
readers merge by (pos, key, payload), _GroupedRanges sorts by (pos, encoded value) the same way, and every
consumer here sorts a group before using it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import posixpath
import tempfile
import typing
from collections.abc import Callable

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipelines.documents import keys
from pipelines.shuffle import payload, runs

SPILL_BYTES = 64 << 20
"""Records a spilling bundle buffers before it writes a run (the writer's share of prep's memory)."""
ROWS_PER_PARTITION = 20_000
"""Records per GroupByKeyViaFiles reader: the parallelism of a grouped stage (ceil(rows / this) readers), not
its memory, since readers stream."""


@dataclasses.dataclass(frozen=True)
class Scratch:
    """Where a shuffle's run files go (prep: under --output) and how much a spilling bundle buffers."""

    directory: str
    spill_bytes: int = SPILL_BYTES
    via_runner: bool = False
    """Shuffle through the runner's own GroupByKey instead of run files (--shuffle; pipelines/shuffle/README.md)."""

    def sub(self, name: str) -> Scratch:
        return dataclasses.replace(self, directory=posixpath.join(self.directory, name))


def scratch_or_local(scratch: Scratch | None) -> Scratch:
    """The given Scratch, else one in a new local temporary directory (single-machine runs and tests only)."""
    return scratch or Scratch(tempfile.mkdtemp(prefix="clozeforge-shuffle-"))


class SpillFn(beam.DoFn):
    """(stream, pos, key bytes, value, size), or with keyed=False (stream, pos, value, size) and key b"", → RunInfo
    per run written (at `spill_bytes` and at bundle end)."""

    def __init__(self, directory: str, spill_bytes: int, keyed: bool = True):
        self.directory = directory
        self.spill_bytes = spill_bytes
        self.keyed = keyed

    def start_bundle(self):
        self.writers: dict[str, runs.RunWriter] = {}
        self.buffered = 0  # bytes held by all the bundle's writers: the cap is for the bundle, all streams

    def process(self, element):
        if self.keyed:
            stream, pos, key, value, size = element
        else:
            (stream, pos, value, size), key = element, b""
        writer = self.writers.get(stream)
        if writer is None:
            writer = self.writers[stream] = runs.RunWriter(self.directory, stream)
        before = writer.bytes
        writer.add(pos, key, payload.encode(value), size)
        self.buffered += writer.bytes - before
        if self.buffered >= self.spill_bytes:
            yield from self.finish_bundle()

    def finish_bundle(self):
        self.buffered = 0
        for writer in self.writers.values():
            info = writer.flush()
            if info is not None:
                yield GlobalWindows.windowed_value(info)


class _ReadRangeFn(beam.DoFn):
    """(stream, index, count) → consume((stream, index, count), its records (pos, key, payload) in order, *sides)."""

    def __init__(self, consume: Callable):
        self.consume = consume

    def process(self, work: tuple[str, int, int], spilled: list[runs.RunInfo], *sides):
        stream, index, count = work
        lo, hi = runs.range_bounds(index, count)
        yield from self.consume(work, runs.merge_range([r for r in spilled if r.stream == stream], lo, hi), *sides)
        yield beam.pvalue.TaggedOutput("done", work)


Work = tuple[str, int, int]
"""A range of a stream's records: (stream, index, count)."""
StreamTotal = tuple[str, tuple[int, int]]
"""(stream, (rows, size)): what a stream's range count is computed from."""


def _sum_pairs(pairs) -> tuple[int, int]:
    rows = size = 0
    for r, s in pairs:
        rows, size = rows + r, size + s
    return rows, size


class _SpilledRanges(beam.PTransform):
    """(stream, pos, key bytes, value, size) → whatever consume(work, records, *side_inputs) yields for every
    work = (stream, index, count), count = ranges(stream, rows, size, *side_inputs): the core of both
    transforms below. The runs are removed once every range has been read."""

    def __init__(self, scratch: Scratch, ranges: Callable[..., int], consume: Callable, side_inputs=(), keyed: bool = True,
                 tags: tuple[str, ...] = ()):
        super().__init__()
        self.scratch, self.ranges, self.consume, self.side_inputs = scratch, ranges, consume, side_inputs
        self.keyed = keyed  # False: the records are (stream, pos, value, size), all with key b""
        self.tags = tags  # further outputs of consume: the result is then {"main": ..., tag: ...}

    def expand(self, records):
        ranges = self.ranges

        def per_stream(kv, *sides):
            stream, (rows, size) = kv
            count = ranges(stream, rows, size, *sides)
            return [(stream, index, count) for index in range(count)]

        spilled = records | "Spill" >> beam.ParDo(SpillFn(self.scratch.directory, self.scratch.spill_bytes, self.keyed))
        read = (
            spilled
            | "RunTotals" >> beam.Map(lambda run: (run.stream, (run.rows, run.size))).with_output_types(StreamTotal)
            | "StreamTotals" >> beam.CombinePerKey(_sum_pairs)
            | "Ranges" >> beam.FlatMap(per_stream, *self.side_inputs)
            | "Spread" >> beam.Reshuffle()
            | "Read" >> beam.ParDo(_ReadRangeFn(self.consume), beam.pvalue.AsList(spilled), *self.side_inputs)
            .with_outputs("done", *self.tags, main="out")
        )
        _ = (
            records.pipeline
            | "CleanupTrigger" >> beam.Create([None])
            | "Cleanup" >> beam.Map(lambda _, done, spilled: runs.remove(spilled), beam.pvalue.AsList(own_step(read.done, "Done")),
                                    beam.pvalue.AsList(spilled))
        )
        out = own_step(read.out, "Out")
        return {"main": out, **{tag: read[tag] for tag in self.tags}} if self.tags else out


def own_step(outputs, label: str):
    """One output of a multi-output ParDo, passed through a step of its own, for a side input to read.

    NOTE: Beam's BundleBasedDirectRunner (the local runner that retries failed bundles) fills a side input read
    from one output of a multi-output ParDo with the elements of all its outputs, or of none: its
    EvaluationContext._update_side_inputs_container looks at the first output bundle's PCollection only
    (Beam 2.77). Finalize then saw no shard (files mode) and swept the shards away. A single-output step in
    between gives the side input that output alone; it costs a call per element, fused into the step before."""
    return outputs | label >> beam.Map(lambda x: x)


def _in_order(placed) -> list:
    """(pos, value) pairs → the values in pos order, equal positions in the order of their encoded bytes: the order
    the run files give (runs.merge_range), whatever order GroupByKey delivered them in.

    NOTE: positions are 64-bit hashes, so ties are rare (a collision, or one document id read twice), but GroupByKey's
    order differs between attempts of a stage: a shard written from a tie in arrival order was not the same bytes
    twice, and an attempt that renamed last left a shard whose sha256 was not the manifest's."""
    ordered = sorted(placed, key=lambda pv: pv[0])
    values = []
    for _, tied in itertools.groupby(ordered, key=lambda pv: pv[0]):
        group = [value for _, value in tied]
        if len(group) > 1:
            group.sort(key=payload.encode)
        values.extend(group)
    return values


def _with_pos(element):
    key, value = element
    key_bytes = payload.encode(key)
    pos = int.from_bytes(hashlib.blake2b(key_bytes, digest_size=8).digest(), "big")
    return "", pos, key_bytes, value, 0


def _groups(_work, records):
    for (_, key), group in itertools.groupby(records, key=lambda r: (r[0], r[1])):
        yield payload.decode(key), [payload.decode(value) for _, _, value in group]


class GroupByKeyViaFiles(beam.PTransform):
    """(key, value) → (key, [values]); keys are str, bytes, int or tuples of them (pipelines/shuffle/payload.py).
    Through the runner's GroupByKey, the input's type must name the key's (its coder must be deterministic)."""

    def __init__(self, scratch: Scratch | None = None, *, rows_per_partition: int = ROWS_PER_PARTITION):
        super().__init__()
        self.scratch = scratch_or_local(scratch)
        self.rows_per_partition = rows_per_partition

    def expand(self, pairs):
        if self.scratch.via_runner:
            return pairs | "GroupByKey" >> beam.GroupByKey() | "Lists" >> beam.MapTuple(lambda key, values: (key, list(values)))
        per_partition = self.rows_per_partition
        return (
            pairs
            | "KeyPositions" >> beam.Map(_with_pos)
            | "Partitions" >> _SpilledRanges(self.scratch, lambda _, rows, __: -(-rows // per_partition), _groups)
        )


class GroupIntoRanges(beam.PTransform):
    """(stream, pos, value, size) → ((stream, index, count), [values in pos order]); see the module docstring."""

    def __init__(self, scratch: Scratch | None, ranges: Callable[..., int], *side_inputs, consume: Callable | None = None,
                 tags: tuple[str, ...] = ()):
        super().__init__()
        self.scratch = scratch_or_local(scratch)
        self.ranges, self.side_inputs, self.consume, self.tags = ranges, side_inputs, consume, tags

    def expand(self, records):
        consume = self.consume

        def values_to(work, values, *sides):
            if consume is None:
                yield work, list(values)
            else:
                yield from consume(work, values, *sides)

        if self.scratch.via_runner:
            return records | "Ranges" >> _GroupedRanges(self.ranges, values_to, self.side_inputs, self.tags)

        def payloads_to(work, records, *sides):
            return values_to(work, (payload.decode(value) for _, _, value in records), *sides)

        return records | "Ranges" >> _SpilledRanges(self.scratch, self.ranges, payloads_to, self.side_inputs, keyed=False,
                                                    tags=self.tags)


class _GroupedRanges(beam.PTransform):
    """GroupIntoRanges through Beam's GroupByKey (Scratch.via_runner): the same ranges, the same values in the
    same order, for runners whose shuffle is disk-backed. A range's values are sorted in the worker's memory
    (a range is one shard or one bucket: bounded by --rows-per-shard and --bucket-docs, not by the corpus)."""

    def __init__(self, ranges: Callable[..., int], values_to: Callable, side_inputs=(), tags: tuple[str, ...] = ()):
        super().__init__()
        self.ranges, self.values_to, self.side_inputs, self.tags = ranges, values_to, side_inputs, tags

    def expand(self, records):
        ranges, values_to = self.ranges, self.values_to
        counts = (
            records
            | "Sizes" >> beam.Map(lambda r: (r[0], (1, r[3]))).with_output_types(StreamTotal)
            | "StreamTotals" >> beam.CombinePerKey(_sum_pairs)
            | "Counts" >> beam.Map(lambda kv, *sides: (kv[0], ranges(kv[0], *kv[1], *sides)), *self.side_inputs)
            .with_output_types(tuple[str, int])
        )

        def place(record, counts):
            stream, pos, value, _ = record
            count = counts[stream]
            return (stream, keys.bucket(pos, count), count), (pos, value)

        def consume(element, *sides):
            work, placed = element
            return values_to(work, _in_order(pv for pv in placed if pv is not None), *sides)

        # the value (pos, value) stays Any: a pos runs up to 2**64, past Beam's int coder (the module docstring)
        placed = records | "Place" >> beam.Map(place, beam.pvalue.AsDict(counts)).with_output_types(tuple[Work, typing.Any])
        every_range = counts | "EveryRange" >> beam.FlatMap(
            lambda kv: [((kv[0], i, kv[1]), None) for i in range(kv[1])]).with_output_types(tuple[Work, typing.Any])
        consumed = (
            (placed, every_range)
            | "WithEmpty" >> beam.Flatten()
            | "GroupByRange" >> beam.GroupByKey()
            | "Consume" >> beam.FlatMap(consume, *self.side_inputs).with_outputs(*self.tags, main="main")
        )
        if not self.tags:
            return consumed.main
        return {"main": own_step(consumed.main, "Out"), **{tag: consumed[tag] for tag in self.tags}}
