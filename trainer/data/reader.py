"""ShardReader: one dataloader worker's shards, read whole in a background thread ahead of their use.

In:  the manifest and split, and from the stream, before each batch, the shards it will need next (`hold`),
     in the order it will need them.
Out: decoded record batches (`batch`), each shard's bytes read once while it is held; the last few decoded
     batches are kept.

Why whole shards: a zstd Arrow IPC file is read in one request (one GET on s3/gs) and checked against the
manifest's sha256; ranged reads of single record batches would cost a request per block. The stream holds
a window of consecutive shards at a time (trainer/data/layout.py), so each shard is read once per epoch per
worker, and memory is (window + read-ahead) x shard size per worker.

Read-ahead: one thread per reader fetches held shards in the order asked (the window's next shard while the
current one is consumed, then the first shard(s) of the next window), also with `--num-workers 0`.
Checksums are checked once per process: a shard already verified by this process (same URL and sha256) is
not hashed again when a later epoch reads it anew.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import fsspec
import pyarrow as pa

from schemas import ContractError, Manifest, validate_pairs_schema

_verified: set[tuple[str, str]] = set()  # (url, sha256) whose bytes this process has checked
_verified_lock = threading.Lock()
checksums_computed: Counter[str] = Counter()
"""URL -> sha256 computations of that shard in this process (a record; tests read it)."""


def open_shard(url: str, cache_dir: str | None = None) -> fsspec.core.OpenFile:
    """The shard at `url`, through fsspec's whole-file cache in `cache_dir` when the URL is remote."""
    if cache_dir and "://" in url and not url.startswith("file://"):
        # fsspec's filecache keeps a local copy: the next epoch (and the next run) reads the disk
        return fsspec.open(f"filecache::{url}", "rb", filecache={"cache_storage": cache_dir})
    return fsspec.open(url, "rb")


class ShardReader:
    """Held shards (futures of their readers) and the last decoded record batches; see the module docstring.

    NOTE: consecutive batches of a worker draw from the same one or two blocks (batch 64 from blocks of
    1024 rows), so keeping a few decoded blocks saves a zstd decode per batch: it was 37% of the loader's time."""

    def __init__(self, manifest: Manifest, split: str, *, verify: bool = True, cache_dir: str | None = None,
                 decoded_capacity: int = 4):
        self.manifest, self.shards, self.verify, self.cache_dir = manifest, manifest.split_shards(split), verify, cache_dir
        self.decoded_capacity = decoded_capacity
        self.held: dict[int, Future[pa.ipc.RecordBatchFileReader]] = {}
        self.decoded: OrderedDict[tuple[int, int], pa.RecordBatch] = OrderedDict()
        self.reads: Counter[int] = Counter()  # shard -> whole-shard reads by this reader
        self._pool: ThreadPoolExecutor | None = None

    def hold(self, shards: Sequence[int]) -> None:
        """Keep these shards (fetching the missing ones in the order given) and let every other one go."""
        keep = set(shards)
        for s in [s for s in self.held if s not in keep]:
            self.held.pop(s).cancel()  # a fetch already running finishes, and its result is dropped
        for s in shards:
            if s not in self.held:
                if self._pool is None:  # started lazily: in the process (dataloader worker) that reads
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clozeforge-readahead")
                self.held[s] = self._pool.submit(self._read, s)

    def batch(self, shard: int, index: int, rows: int) -> pa.RecordBatch:
        """Record batch `index` of `shard`, which must have `rows` rows (what the manifest implies)."""
        key = (shard, index)
        batch = self.decoded.pop(key, None)
        if batch is None:
            if shard not in self.held:  # a caller that did not plan ahead still gets its data
                self.hold([*self.held, shard])
            batch = self.held[shard].result().get_batch(index)
            if batch.num_rows != rows:
                raise ContractError(f"{self.shards[shard].path}: record batch {index} has {batch.num_rows} rows, manifest implies {rows}")
        self.decoded[key] = batch
        while len(self.decoded) > self.decoded_capacity:
            self.decoded.popitem(last=False)
        return batch

    def close(self) -> None:
        """Drop every shard and stop the thread (waiting for a fetch in flight, so no thread outlives the
        iterator: a dataloader that forks next must not copy a thread holding a lock)."""
        self.held.clear()
        self.decoded.clear()
        pool, self._pool = self._pool, None
        if pool is not None and not sys.is_finalizing():  # at interpreter exit, concurrent.futures joins it itself
            pool.shutdown(wait=True, cancel_futures=True)

    def _read(self, shard: int) -> pa.ipc.RecordBatchFileReader:
        info = self.shards[shard]
        url = self.manifest.resolve(info.path)
        with open_shard(url, self.cache_dir) as f:
            data = f.read()
        self.reads[shard] += 1
        if self.verify and (url, info.sha256) not in _verified:
            digest = hashlib.sha256(data).hexdigest()
            with _verified_lock:  # one thread per reader, and a mixture has a reader per component
                checksums_computed[url] += 1
            if digest != info.sha256:
                raise ContractError(f"{url}: sha256 mismatch with the manifest (corrupt or replaced shard)")
            with _verified_lock:
                _verified.add((url, info.sha256))
        reader = pa.ipc.open_file(pa.BufferReader(data))
        validate_pairs_schema(reader.schema, url, self.manifest.row_format.kind)
        return reader
