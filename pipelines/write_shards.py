"""GlobalShuffle and WriteShards: pair rows → Arrow IPC shards (zstd) + their ShardInfo; also clean/ shards.

Every row carries a seeded 64-bit shuffle key. The number of shards per split is ceil(rows /
rows_per_shard), or ceil(token bytes / bytes_per_shard) with --bytes-per-shard (uncompressed ids, 2 or 4
bytes each), known only once the rows are counted: the rows wait in sorted run files for it
(pipelines/shuffle.py GroupIntoRanges), not in memory. A row goes to shard floor(key * n / 2^64), and
inside a shard rows are sorted by key. That is a global uniform shuffle whose result is the same for any
runner or worker count. Every shard index is written, also one that drew no row, so `-of-N` names never
lie.

Files are written to `<name>.tmp-<random>` and renamed into place, so a retried worker never leaves a half
shard under a final name.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import math
import posixpath
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator

import apache_beam as beam
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import keys
from pipelines.records import Doc
from pipelines.shuffle import GroupIntoRanges, Scratch
from schemas import ShardInfo, clean_doc_schema, pairs_schema, token_type

CLEAN_ROW_GROUP = 1000
"""Documents per Parquet row group in clean/ shards: the unit Tokenize reads back."""


def shard_name(split: str, index: int, count: int, suffix: str = "arrow") -> str:
    return f"{split}-{index:05d}-of-{count:05d}.{suffix}"


class _Sink:
    """A binary file being written under a temporary name, hashed and measured as it goes."""

    def __init__(self, f):
        self.f, self.sha256, self.bytes, self.closed = f, hashlib.sha256(), 0, False

    def write(self, data) -> int:
        self.sha256.update(data)
        self.bytes += len(data)
        return self.f.write(data)

    def tell(self) -> int:
        return self.bytes

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.closed = True  # the owner closes the underlying file


@contextlib.contextmanager
def open_atomically(url: str):
    """Yields a _Sink for writing `url`; the file appears under its name only once it is complete."""
    fs, path = fsspec.core.url_to_fs(url)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with fs.open(tmp, "wb") as f:
        yield _Sink(f)
    fs.mv(tmp, path)


def put_atomically(url: str, data: bytes) -> None:
    with open_atomically(url) as sink:
        sink.write(data)


def _ids_column(packed: list[bytes], id_type: pa.DataType) -> pa.ListArray:
    """A list<uint16|uint32> column from per-row packed ids (bytes of that type), without a Python int per id."""
    width = id_type.byte_width
    lengths = np.fromiter((len(b) for b in packed), dtype=np.int32, count=len(packed)) // width
    offsets = np.zeros(len(packed) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = pa.py_buffer(b"".join(packed))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.Array.from_buffers(id_type, int(offsets[-1]), [None, values]))


def write_pairs(sink, rows: Iterable[dict], vocab_size: int, batch_rows: int) -> tuple[int, dict[str, int]]:
    """Write `rows` to `sink` as an Arrow IPC file (zstd-compressed buffers) in record batches of `batch_rows`,
    holding one batch at a time; returns the row count and the rows per source.

    A row's tokens_a / tokens_b are its ids packed as bytes of the schema's id type (see MakePairsFn)."""
    schema = pairs_schema(vocab_size)
    id_type = token_type(vocab_size)
    count, sources = 0, Counter()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), schema, options=options) as writer:
        for chunk in _batched(rows, batch_rows):
            columns = {name: [r[name] for r in chunk] for name in schema.names}
            for name in ("tokens_a", "tokens_b"):
                columns[name] = _ids_column(columns[name], id_type)
            writer.write_batch(pa.record_batch(columns, schema=schema))
            count += len(chunk)
            sources.update(columns["source"])
    return count, dict(sorted(sources.items()))


def _batched(items: Iterable, n: int) -> Iterator[list]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, n)):
        yield chunk


def write_shard(work: tuple[str, int, int], rows: Iterable[dict], vocab: dict, *, directory: str, batch_rows: int):
    """GroupIntoRanges' consumer: one pairs shard, streamed from its rows in shuffle-key order → its ShardInfo."""
    split, index, count = work
    name = shard_name(split, index, count)
    with open_atomically(posixpath.join(directory, name)) as sink:
        written, sources = write_pairs(sink, rows, vocab["size"], batch_rows)
    yield ShardInfo(path=name, split=split, rows=written, bytes=sink.bytes, sha256=sink.sha256.hexdigest(),
                    source_rows=sources)


def _shard_count(rows: int, rows_per_shard: int) -> int:
    return max(1, math.ceil(rows / rows_per_shard))


def shard_count(rows: int, tokens: int, vocab_size: int, *, rows_per_shard: int, bytes_per_shard: int | None) -> int:
    """Shards for a split: by rows, or (when set) by uncompressed token bytes (2 or 4 bytes an id)."""
    if bytes_per_shard is None:
        return _shard_count(rows, rows_per_shard)
    itemsize = token_type(vocab_size).byte_width
    return max(1, math.ceil(tokens * itemsize / bytes_per_shard))


def _placed(row: dict) -> tuple[str, int, dict, int]:
    row = dict(row)
    key, split = row.pop("shuffle_key"), row.pop("split")
    return split, key, row, row["num_tokens"] - 3


class WriteShards(beam.PTransform):
    """Pair rows → ShardInfo per written shard (GlobalShuffle included)."""

    def __init__(self, directory: str, *, rows_per_shard: int, batch_rows: int, vocab, bytes_per_shard: int | None = None,
                 scratch: Scratch | None = None):
        super().__init__()
        self.directory = directory
        self.rows_per_shard = rows_per_shard
        self.bytes_per_shard = bytes_per_shard
        self.batch_rows = batch_rows
        self.vocab = vocab  # singleton PCollection of the vocabulary summary
        self.scratch = scratch

    def expand(self, rows):
        per_rows, per_bytes = self.rows_per_shard, self.bytes_per_shard

        def shards(split, rows, tokens, vocab):
            return shard_count(rows, tokens, vocab["size"], rows_per_shard=per_rows, bytes_per_shard=per_bytes)

        consume = functools.partial(write_shard, directory=self.directory, batch_rows=self.batch_rows)
        return (
            rows
            | "PlaceRows" >> beam.Map(_placed)
            | "GlobalShuffle" >> GroupIntoRanges(self.scratch, shards, beam.pvalue.AsSingleton(self.vocab), consume=consume)
        )


def _write_clean_shard(work: tuple[str, int, int], docs: Iterable[Doc], *, directory: str) -> Iterator[str]:
    """GroupIntoRanges' consumer: one clean/ shard, a row group at a time, in shuffle-key order → its URL."""
    _, index, count = work
    url = posixpath.join(directory, shard_name("clean", index, count, "parquet"))
    schema = clean_doc_schema()
    with open_atomically(url) as sink, pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema, compression="zstd") as writer:
        for chunk in _batched(docs, CLEAN_ROW_GROUP):
            rows = [{"doc_id": d.doc_id, "source": d.source, "path": d.path, "sentences": list(d.sentences)} for d in chunk]
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    yield url


def read_clean_shard(url: str) -> Iterator[Doc]:
    """The documents of one clean/ Parquet shard, a row group at a time."""
    with fsspec.open(url, "rb") as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=CLEAN_ROW_GROUP):
            for row in batch.to_pylist():
                yield Doc(source=row["source"], path=row["path"], doc_id=row["doc_id"], sentences=tuple(row["sentences"]))


class WriteCleanDocs(beam.PTransform):
    """Doc → Parquet shards of the CLEAN_DOC schema under `directory` (rows in a seeded random order); outputs their URLs."""

    def __init__(self, directory: str, docs_per_shard: int = 50_000, scratch: Scratch | None = None):
        super().__init__()
        self.directory = directory
        self.docs_per_shard = docs_per_shard
        self.scratch = scratch

    def expand(self, docs):
        per_shard = self.docs_per_shard
        return (
            docs
            | "PlaceDocs" >> beam.Map(lambda d: ("clean", keys.key64(0, "clean", d.doc_id), d, 0))
            | "WriteCleanShards"
            >> GroupIntoRanges(
                self.scratch,
                lambda _, docs, __: _shard_count(docs, per_shard),
                consume=functools.partial(_write_clean_shard, directory=self.directory),
            )
        )
