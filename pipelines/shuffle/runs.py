"""Sorted run files: how prep's shuffles move records through storage instead of the runner's memory.

In:  records (pos, key, payload): `pos` a uniform 64-bit int that orders and places the record, `key` the
     bytes that group it (b"" when only the order matters), `payload` its value's bytes
     (pipelines/shuffle/payload.py: msgpack of known record types, never pickle).
Out: run files under a temporary directory (local or any fsspec URL), each sorted by (pos, key) and cut
     into zstd blocks, described by a RunInfo (path, rows, and the pos range and byte range of every
     block); and, back from a set of runs, the records whose pos lies in [lo, hi), merged in (pos, key,
     payload) order, whichever runs they came in.

NOTE: Beam's local FnApiRunner holds every GroupByKey's data and every PCollection that waits for a side
input in its own memory, so a prep run whose stages meet through Beam's shuffle needs memory in proportion
to the corpus (`python bench/run.py prep` shows it). Through run files, only run
descriptions cross Beam's shuffle; a writer holds one buffer of `spill_bytes`, a reader one block per run.
This is the temporary-file pattern of Beam's own file sinks (fileio): files written under unique names,
only the names of finished files passed on, so a retried bundle leaves an orphan file, never a duplicate.
"""

from __future__ import annotations

import dataclasses
import heapq
import posixpath
import struct
import uuid
from collections.abc import Iterable, Iterator

import fsspec
import zstandard

from pipelines.errors import PrepError, write_failed

_HEADER = struct.Struct("<QII")  # pos, key length, payload length
_BLOCK_BYTES = 1 << 20  # uncompressed bytes per block: the unit a reader holds per run
_LEVEL = 1  # zstd level: temporary data, written once and read once


@dataclasses.dataclass(frozen=True)
class RunInfo:
    path: str
    stream: str
    """What the records are (a split, say); a reader asks for one stream's runs."""
    rows: int
    size: int
    """The sum of the records' sizes as the writer measured them (token counts for pairs)."""
    blocks: tuple[tuple[int, int, int, int], ...]
    """(first pos, last pos, byte offset, byte length) per block, in pos order."""


class RunWriter:
    """Buffers records of one stream and writes them as one sorted run file when asked."""

    def __init__(self, directory: str, stream: str):
        self.directory, self.stream = directory, stream
        self.records: list[tuple[int, bytes, bytes]] = []
        self.bytes = self.size = 0

    def add(self, pos: int, key: bytes, payload: bytes, size: int = 0) -> None:
        self.records.append((pos, key, payload))
        self.bytes += _HEADER.size + len(key) + len(payload)
        self.size += size

    def flush(self) -> RunInfo | None:
        """Write the buffered records (sorted by pos, then key, then payload) as a new run file; None when empty."""
        if not self.records:
            return None
        # NOTE: the records themselves are the sort key (no key function: a lambda and a tuple per record cost
        # more than the sort); equal (pos, key) records come out by payload, whatever order they came in
        self.records.sort()
        path = posixpath.join(self.directory, f"{self.stream or 'run'}-{uuid.uuid4().hex}.run")
        compressor = zstandard.ZstdCompressor(level=_LEVEL)
        blocks, offset = [], 0
        fs, local = fsspec.core.url_to_fs(path)
        try:
            fs.makedirs(posixpath.dirname(local), exist_ok=True)
            with fs.open(local, "wb") as f:
                for chunk in _chunks(self.records):
                    data = compressor.compress(b"".join(_HEADER.pack(p, len(k), len(v)) + k + v for p, k, v in chunk))
                    f.write(data)
                    blocks.append((chunk[0][0], chunk[-1][0], offset, len(data)))
                    offset += len(data)
        except OSError as e:  # a full disk, a permission: one line naming the file (the next run removes it)
            raise write_failed(path, e) from None
        info = RunInfo(path=path, stream=self.stream, rows=len(self.records), size=self.size, blocks=tuple(blocks))
        self.records, self.bytes, self.size = [], 0, 0
        return info


def _chunks(records: list[tuple[int, bytes, bytes]]) -> Iterator[list[tuple[int, bytes, bytes]]]:
    chunk, size = [], 0
    for record in records:
        chunk.append(record)
        size += _HEADER.size + len(record[1]) + len(record[2])
        if size >= _BLOCK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def read_range(run: RunInfo, lo: int, hi: int) -> Iterator[tuple[int, bytes, bytes]]:
    """The run's records with lo <= pos < hi, in order, reading only the blocks that overlap."""
    fs, path = fsspec.core.url_to_fs(run.path)
    decompressor = zstandard.ZstdDecompressor()
    for first, last, offset, length in run.blocks:
        if last < lo or first >= hi:
            continue
        try:
            data = decompressor.decompress(fs.cat_file(path, start=offset, end=offset + length))
        except zstandard.ZstdError as e:
            raise PrepError(f"{run.path}: shuffle run file damaged at byte {offset} ({e}); was it changed by another "
                            "program? Remove the run's .tmp-* directory and run again") from None
        view, at = memoryview(data), 0
        while at < len(data):
            if at + _HEADER.size > len(data):
                raise PrepError(f"{run.path}: shuffle run file damaged at byte {offset} (a record cut short)")
            pos, klen, vlen = _HEADER.unpack_from(data, at)
            at += _HEADER.size
            if lo <= pos < hi:
                yield pos, bytes(view[at : at + klen]), bytes(view[at + klen : at + klen + vlen])
            at += klen + vlen


def merge_range(runs: Iterable[RunInfo], lo: int, hi: int) -> Iterator[tuple[int, bytes, bytes]]:
    """Records with lo <= pos < hi from all `runs` (each run file once), merged in (pos, key, payload) order (one
    block per run in memory).

    NOTE: the payload breaks ties of (pos, key), as it does inside a run: merged by (pos, key) alone, equal records
    came out in the order of `runs`, which is the order the runner listed the spilled runs in, and that changes
    with the bundles (a retried or split bundle, another worker count). A run listed twice is read once: Beam's
    FnApiRunner hands a side input the elements of a stage that ran in several bundles (a split, a checkpoint)
    once per later bundle (fn_runner.py's commit_side_inputs_to_state appends the whole buffer after each one)."""
    unique = {run.path: run for run in runs}
    return heapq.merge(*(read_range(run, lo, hi) for run in unique.values()))


def range_bounds(index: int, count: int) -> tuple[int, int]:
    """[lo, hi) of the index-th of `count` equal slices of the 64-bit space: exactly the positions that
    keys.bucket(pos, count) maps to `index`."""
    return -(-(index << 64) // count), -(-((index + 1) << 64) // count)


def remove(runs: Iterable[RunInfo]) -> None:
    """Delete run files; one already gone (prep's Finalize removes the whole temporary directory) is fine."""
    for run in runs:
        fs, path = fsspec.core.url_to_fs(run.path)
        try:
            fs.rm(path)
        except FileNotFoundError:
            pass
