"""GlobalShuffle and WriteShards: pair rows → Arrow IPC shards (zstd) + their ShardInfo; also clean/ shards.

Every row carries a seeded 64-bit shuffle key. The number of shards per split is ceil(rows /
rows_per_shard), or ceil(token bytes / bytes_per_shard) with --bytes-per-shard (uncompressed ids, 2 or 4
bytes each), known only once the rows are counted, so it arrives as a side input; a row goes to
shard floor(key * n / 2^64), and inside a shard rows are sorted by key. That is a global uniform shuffle
whose result is the same for any runner or worker count. Markers for every shard index make sure a
shard that drew no row is still written (empty), so `-of-N` names never lie.

Files are written to `<name>.tmp-<random>` and renamed into place, so a retried worker never leaves a half
shard under a final name.
"""

from __future__ import annotations

import hashlib
import io
import math
import posixpath
import uuid

import apache_beam as beam
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import keys
from schemas import ShardInfo, clean_doc_schema, pairs_schema, token_type

_MARKER = None


def shard_name(split: str, index: int, count: int, suffix: str = "arrow") -> str:
    return f"{split}-{index:05d}-of-{count:05d}.{suffix}"


def put_atomically(url: str, data: bytes) -> None:
    fs, path = fsspec.core.url_to_fs(url)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with fs.open(tmp, "wb") as f:
        f.write(data)
    fs.mv(tmp, path)


def _ids_column(packed: list[bytes], id_type: pa.DataType) -> pa.ListArray:
    """A list<uint16|uint32> column from per-row packed ids (bytes of that type), without a Python int per id."""
    width = id_type.byte_width
    lengths = np.fromiter((len(b) for b in packed), dtype=np.int32, count=len(packed)) // width
    offsets = np.zeros(len(packed) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = pa.py_buffer(b"".join(packed))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.Array.from_buffers(id_type, int(offsets[-1]), [None, values]))


def encode_pairs(rows: list[dict], vocab_size: int, batch_rows: int) -> bytes:
    """Arrow IPC file bytes (zstd-compressed buffers) for `rows`, in record batches of `batch_rows`.

    A row's tokens_a / tokens_b are its ids packed as bytes of the schema's id type (see MakePairsFn)."""
    schema = pairs_schema(vocab_size)
    id_type = token_type(vocab_size)
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(sink, schema, options=options) as writer:
        for start in range(0, len(rows), batch_rows):
            chunk = rows[start : start + batch_rows]
            columns = {name: [r[name] for r in chunk] for name in schema.names}
            for name in ("tokens_a", "tokens_b"):
                columns[name] = _ids_column(columns[name], id_type)
            writer.write_batch(pa.record_batch(columns, schema=schema))
    return sink.getvalue()


class WriteShardFn(beam.DoFn):
    def __init__(self, directory: str, *, batch_rows: int):
        self.directory = directory
        self.batch_rows = batch_rows

    def process(self, element, shard_counts: dict, vocab: dict):
        (split, index), keyed = element
        rows = [row for _, row in sorted((kr for kr in keyed if kr is not _MARKER), key=lambda kr: kr[0])]
        name = shard_name(split, index, shard_counts[split])
        data = encode_pairs(rows, vocab["size"], self.batch_rows)
        put_atomically(posixpath.join(self.directory, name), data)
        sources: dict[str, int] = {}
        for row in rows:
            sources[row["source"]] = sources.get(row["source"], 0) + 1
        yield ShardInfo(
            path=name,
            split=split,
            rows=len(rows),
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            source_rows=dict(sorted(sources.items())),
        )


def _shard_count(rows: int, rows_per_shard: int) -> int:
    return max(1, math.ceil(rows / rows_per_shard))


def shard_count(rows: int, tokens: int, vocab_size: int, *, rows_per_shard: int, bytes_per_shard: int | None) -> int:
    """Shards for a split: by rows, or (when set) by uncompressed token bytes (2 or 4 bytes an id)."""
    if bytes_per_shard is None:
        return _shard_count(rows, rows_per_shard)
    itemsize = token_type(vocab_size).byte_width
    return max(1, math.ceil(tokens * itemsize / bytes_per_shard))


def _sum_pairs(pairs) -> tuple[int, int]:
    rows = tokens = 0
    for r, t in pairs:
        rows, tokens = rows + r, tokens + t
    return rows, tokens


class WriteShards(beam.PTransform):
    """Pair rows → ShardInfo per written shard (GlobalShuffle included)."""

    def __init__(self, directory: str, *, rows_per_shard: int, batch_rows: int, vocab, bytes_per_shard: int | None = None):
        super().__init__()
        self.directory = directory
        self.rows_per_shard = rows_per_shard
        self.bytes_per_shard = bytes_per_shard
        self.batch_rows = batch_rows
        self.vocab = vocab  # singleton PCollection of the vocabulary summary

    def expand(self, rows):
        per_rows, per_bytes = self.rows_per_shard, self.bytes_per_shard
        sizes = (
            rows
            | "SizePerRow" >> beam.Map(lambda r: (r["split"], (1, r["num_tokens"] - 3)))
            | "SizePerSplit" >> beam.CombinePerKey(_sum_pairs)
        )
        counts = sizes | "ShardsPerSplit" >> beam.Map(
            lambda kv, vocab: (kv[0], shard_count(*kv[1], vocab["size"], rows_per_shard=per_rows, bytes_per_shard=per_bytes)),
            beam.pvalue.AsSingleton(self.vocab),
        )

        def place(row, counts):
            key = row.pop("shuffle_key")
            split = row.pop("split")
            return (split, keys.bucket(key, counts[split])), (key, row)

        placed = rows | "PlaceRows" >> beam.Map(lambda r, c: place(dict(r), c), beam.pvalue.AsDict(counts))
        marked = counts | "ShardMarkers" >> beam.FlatMap(lambda kv: [((kv[0], i), _MARKER) for i in range(kv[1])])
        return (
            (placed, marked)
            | "WithMarkers" >> beam.Flatten()
            | "GroupShards" >> beam.GroupByKey()
            | "WriteShard"
            >> beam.ParDo(WriteShardFn(self.directory, batch_rows=self.batch_rows), beam.pvalue.AsDict(counts), beam.pvalue.AsSingleton(self.vocab))
        )


class WriteCleanDocs(beam.PTransform):
    """Doc → Parquet shards of the CLEAN_DOC schema under `directory` (sorted by doc_id); outputs file names."""

    def __init__(self, directory: str, docs_per_shard: int = 50_000):
        super().__init__()
        self.directory = directory
        self.docs_per_shard = docs_per_shard

    def expand(self, docs):
        directory, per_shard = self.directory, self.docs_per_shard
        total = docs | "CountDocs" >> beam.combiners.Count.Globally()

        def place(doc, total):
            n = _shard_count(total, per_shard)
            return keys.bucket(keys.key64(0, "clean", doc.doc_id), n), doc

        def write(element, total):
            index, group = element
            group = sorted(group, key=lambda d: d.doc_id)
            table = pa.Table.from_pylist(
                [{"doc_id": d.doc_id, "source": d.source, "path": d.path, "sentences": list(d.sentences)} for d in group],
                schema=clean_doc_schema(),
            )
            sink = io.BytesIO()
            pq.write_table(table, sink, compression="zstd")
            name = shard_name("clean", index, _shard_count(total, per_shard), "parquet")
            put_atomically(posixpath.join(directory, name), sink.getvalue())
            yield name

        return (
            docs
            | "PlaceDocs" >> beam.Map(place, beam.pvalue.AsSingleton(total))
            | "GroupCleanShards" >> beam.GroupByKey()
            | "WriteCleanShard" >> beam.FlatMap(write, beam.pvalue.AsSingleton(total))
        )
