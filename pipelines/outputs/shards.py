"""Shard files, no Beam: names, how many per split, and the encoding of pair (Arrow IPC) and clean (Parquet) shards.

In:  pair rows (tuples of a row format's columns in order, schemas/pairs.py, ids packed as bytes of the schema's id type) or Docs.
Out: `write_pairs` streams rows into an Arrow IPC file of record batches (zstd); `write_clean_docs` streams
     documents into a Parquet file of the CLEAN_DOC schema; `read_clean_shard` reads one back a row group
     at a time. Shard names are deterministic: `train-00003-of-00008.arrow`.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.documents.records import Doc
from schemas import clean_doc_schema, token_type
from schemas.pairs import NSP_PAIRS, RowFormat

CLEAN_ROW_GROUP = 1000
"""Documents per Parquet row group in clean/ shards: the unit Tokenize reads back."""


def shard_name(split: str, index: int, count: int, suffix: str = "arrow") -> str:
    return f"{split}-{index:05d}-of-{count:05d}.{suffix}"



def shard_count_by_rows(rows: int, rows_per_shard: int) -> int:
    return max(1, math.ceil(rows / rows_per_shard))


def shard_count(rows: int, tokens: int, vocab_size: int, *, rows_per_shard: int, bytes_per_shard: int | None) -> int:
    """Shards for a split: by rows, or (when set) by uncompressed token bytes (2 or 4 bytes an id)."""
    if bytes_per_shard is None:
        return shard_count_by_rows(rows, rows_per_shard)
    itemsize = token_type(vocab_size).byte_width
    return max(1, math.ceil(tokens * itemsize / bytes_per_shard))


def _ids_column(packed: list[bytes], id_type: pa.DataType) -> pa.ListArray:
    """A list<uint16|uint32> column from per-row packed ids (bytes of that type), without a Python int per id."""
    width = id_type.byte_width
    lengths = np.fromiter((len(b) for b in packed), dtype=np.int32, count=len(packed)) // width
    offsets = np.zeros(len(packed) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = pa.py_buffer(b"".join(packed))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.Array.from_buffers(id_type, int(offsets[-1]), [None, values]))


def write_pairs(sink, rows: Iterable[tuple], vocab_size: int, batch_rows: int,
                row_format: RowFormat = NSP_PAIRS) -> tuple[int, dict[str, int]]:
    """Write `rows` to `sink` as an Arrow IPC file (zstd-compressed buffers) of `row_format`, in record batches
    of `batch_rows`, holding one batch at a time; returns the row count and the rows per source.

    A row is a tuple of the schema's columns in order; its id columns (tokens_a / tokens_b, or tokens) are its
    ids packed as bytes of the schema's id type (see BucketPairs in stages/make_nsp_pairs.py)."""
    schema = row_format.schema(vocab_size)
    id_type = token_type(vocab_size)
    count, sources = 0, Counter()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), schema, options=options) as writer:
        for chunk in _batched(rows, batch_rows):
            columns = dict(zip(schema.names, map(list, zip(*chunk))))
            for name in row_format.id_columns:
                columns[name] = _ids_column(columns[name], id_type)
            writer.write_batch(pa.record_batch(columns, schema=schema))
            count += len(chunk)
            sources.update(columns["source"])
    return count, dict(sorted(sources.items()))


def _batched(items: Iterable, n: int) -> Iterator[list]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, n)):
        yield chunk


def ids_dtype(vocab_size: int) -> np.dtype:
    """The numpy dtype of the shards' id column for this vocabulary (uint16 when it fits)."""
    return np.dtype(np.uint16) if token_type(vocab_size) == pa.uint16() else np.dtype(np.uint32)


def write_clean_docs(sink, docs: Iterable[Doc], meta: bool = False) -> None:
    """Write `docs` to `sink` as a Parquet file of the CLEAN_DOC schema, a row group at a time; `meta`: with the meta
    column (the run has an input whose format keeps metadata)."""
    schema = clean_doc_schema(meta)
    with pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema, compression="zstd") as writer:
        for chunk in _batched(docs, CLEAN_ROW_GROUP):
            # column by column: the same table as from row dicts, without a dict per document
            columns = {"doc_id": [d.doc_id for d in chunk], "source": [d.source for d in chunk],
                       "path": [d.path for d in chunk], "sentences": [d.sentences for d in chunk],
                       "language": [d.language for d in chunk], "meta": [list(d.meta) for d in chunk]}
            writer.write_table(pa.table({name: columns[name] for name in schema.names}, schema=schema))


def read_clean_shard(url: str) -> Iterator[Doc]:
    """The documents of one clean/ Parquet shard, a row group at a time."""
    with fsspec.open(url, "rb") as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=CLEAN_ROW_GROUP):
            columns = [batch.column(name).to_pylist() for name in ("source", "path", "doc_id", "sentences", "language")]
            metas = batch.column("meta").to_pylist() if "meta" in batch.schema.names else [()] * batch.num_rows
            for source, path, doc_id, sentences, language, meta in zip(*columns, metas):
                yield Doc(source=source, path=path, doc_id=doc_id, sentences=tuple(sentences), language=language,
                          meta=tuple(meta))


