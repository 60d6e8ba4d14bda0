"""ShardStream: NSP pair shards (manifest + Arrow IPC, any fsspec URL) → masked training batches.

In:  a manifest URL, a split, this process's (rank, world_size), the batch size, a seed and a Masker.
Out: an IterableDataset of ready batches (numpy → torch in the collate step), each tagged with the
     (epoch, batch) position it came from, so the trainer can checkpoint the exact data position.

How an epoch is laid out (the same on every rank, from (seed, epoch) alone):
  1. The split's record batches ("blocks", prep writes `batch_rows` rows each) are put in a seeded
     random order, and the rows of each block in a seeded random order: one global row stream of N rows.
  2. The stream is padded to a multiple of world_size × batch_size by repeating its first rows
     (DistributedSampler's policy; cyclically, if the split is smaller than one global batch), so every
     rank gets the same number of batches; the pad is at most world_size × batch_size - 1 rows per epoch
     and is reported by `padding`.
  3. Rank r takes the r-th contiguous slice of it (so a block is read by at most two ranks), cut into
     batches; dataloader worker w of K builds batches k ≡ w (mod K) of that slice. The DataLoader hands
     worker outputs out round-robin, so the rank sees batches 0, 1, 2, ... whatever K is — which is
     what makes resume exact after a change of the number of workers.
Randomness: block order and row order from (seed, epoch); the mask of batch k from (seed, epoch, rank, k),
so a pair gets a fresh mask in every epoch and the same one after a resume.

Prep already shuffles rows globally across shards, so a batch drawn from one or two blocks is a uniform
sample; the block-level permutation adds a fresh order per epoch without reading the corpus into memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import OrderedDict
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import IterableDataset, get_worker_info

from schemas import ContractError, Manifest, validate_pairs_schema
from trainer.collate import collate_segments
from trainer.masking import Masker

STATE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Block:
    shard: int
    index: int
    rows: int


def split_blocks(manifest: Manifest, split: str) -> list[Block]:
    """Every record batch of the split's shards, from the manifest alone (no file is opened)."""
    batch_rows = int(manifest.config.get("batch_rows", 1024))
    blocks = []
    for s, shard in enumerate(manifest.split_shards(split)):
        full, rest = divmod(shard.rows, batch_rows)
        blocks += [Block(s, i, batch_rows) for i in range(full)]
        if rest:
            blocks.append(Block(s, full, rest))
    return blocks


class _ShardCache:
    """Opened shards of one worker and its last decoded record batches, least recently used first out.

    Checksums are verified when a shard is opened. NOTE: consecutive batches of a rank draw from the same
    one or two blocks (batch 64 from blocks of 1024 rows), so keeping a few decoded blocks saves a zstd
    decode per batch: it was 37% of the loader's time."""

    def __init__(self, manifest: Manifest, split: str, verify: bool, capacity: int = 2, cache_dir: str | None = None,
                 decoded_capacity: int = 4):
        self.manifest, self.shards, self.verify, self.capacity = manifest, manifest.split_shards(split), verify, capacity
        self.cache_dir, self.decoded_capacity = cache_dir, decoded_capacity
        self.open: OrderedDict[int, pa.ipc.RecordBatchFileReader] = OrderedDict()
        self.decoded: OrderedDict[tuple[int, int], pa.RecordBatch] = OrderedDict()

    def batch(self, block: Block) -> pa.RecordBatch:
        key = (block.shard, block.index)
        batch = self.decoded.pop(key, None)
        if batch is None:
            reader = self.open.pop(block.shard, None) or self._open(block.shard)
            self.open[block.shard] = reader
            while len(self.open) > self.capacity:
                self.open.popitem(last=False)
            batch = reader.get_batch(block.index)
            if batch.num_rows != block.rows:
                raise ContractError(f"{self.shards[block.shard].path}: record batch {block.index} has {batch.num_rows} rows, manifest implies {block.rows}")
        self.decoded[key] = batch
        while len(self.decoded) > self.decoded_capacity:
            self.decoded.popitem(last=False)
        return batch

    def _open(self, shard: int) -> pa.ipc.RecordBatchFileReader:
        info = self.shards[shard]
        url = self.manifest.resolve(info.path)
        if self.cache_dir and "://" in url and not url.startswith("file://"):
            # fsspec's filecache keeps a local copy: the next epoch (and the next run) reads the disk
            opened = fsspec.open(f"filecache::{url}", "rb", filecache={"cache_storage": self.cache_dir})
        else:
            opened = fsspec.open(url, "rb")
        with opened as f:
            data = f.read()
        if self.verify and hashlib.sha256(data).hexdigest() != info.sha256:
            raise ContractError(f"{url}: sha256 mismatch with the manifest (corrupt or replaced shard)")
        reader = pa.ipc.open_file(pa.BufferReader(data))
        validate_pairs_schema(reader.schema, url)
        return reader


def gather_segments(parts: list[tuple[pa.RecordBatch, np.ndarray]], column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, starts, lengths) of a list column over the given rows of record batches, for collate_segments.

    The values are the batches' own id buffers (zero-copy), concatenated when the rows span several."""
    values, starts, lengths, shift = [], [], [], 0
    for batch, rows in parts:
        array = batch.column(column)
        offsets = array.offsets.to_numpy()
        flat = array.values.to_numpy()
        starts.append(offsets[rows].astype(np.int64) + shift)
        lengths.append((offsets[rows + 1] - offsets[rows]).astype(np.int64))
        values.append(flat)
        shift += len(flat)
    one = len(values) == 1
    return (values[0] if one else np.concatenate(values)), np.concatenate(starts), np.concatenate(lengths)


class ShardStream(IterableDataset):
    """Masked batches for one rank, forever (epoch after epoch) from `start`; see the module docstring."""

    def __init__(
        self,
        manifest: Manifest,
        *,
        split: str,
        batch_size: int,
        masker: Masker,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        verify_checksums: bool = True,
        epochs: int | None = None,
        cache_dir: str | None = None,
    ):
        if not manifest.split_shards(split):
            raise ContractError(f"{manifest.url}: no shards for split {split!r} (splits: {manifest.splits})")
        self.manifest, self.split, self.batch_size, self.masker = manifest, split, batch_size, masker
        self.seed, self.rank, self.world_size, self.verify, self.epochs = seed, rank, world_size, verify_checksums, epochs
        self.blocks = split_blocks(manifest, split)
        self.rows = sum(b.rows for b in self.blocks)
        self.batches_per_epoch = math.ceil(self.rows / (world_size * batch_size))
        self.padding = self.batches_per_epoch * world_size * batch_size - self.rows
        self.specials = manifest.special_tokens
        self.start = (0, 0)
        self.cache_dir = cache_dir

    # -- resumable position ------------------------------------------------------------------------
    def state_dict(self, epoch: int, next_batch: int) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "epoch": epoch,
            "next_batch": next_batch,
            "manifest": self.manifest.fingerprint,
            "split": self.split,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "seed": self.seed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at the batch after the last one trained on; refuse a state from other data or layout."""
        if state.get("version") != STATE_VERSION:
            raise ContractError(f"data state version {state.get('version')!r}, this trainer reads {STATE_VERSION}")
        expected = self.state_dict(0, 0)
        for key in ("manifest", "split", "world_size", "batch_size", "seed"):
            if state[key] != expected[key]:
                raise ContractError(
                    f"cannot resume the data position: checkpoint has {key}={state[key]!r}, this run has {expected[key]!r}"
                    + (" (the global batch order depends on it)" if key in ("world_size", "batch_size") else "")
                )
        epoch, nxt = state["epoch"], state["next_batch"]
        self.start = (epoch + 1, 0) if nxt >= self.batches_per_epoch else (epoch, nxt)

    # -- epoch layout ---------------------------------------------------------------------------------
    def _rank_rows(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        """This rank's slice of the epoch stream as [(block position, row indices within block)]."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.blocks))
        per_rank = self.batches_per_epoch * self.batch_size
        lo, hi = self.rank * per_rank, (self.rank + 1) * per_rank
        out, pos = [], 0
        passes = math.ceil(hi / self.rows)  # passes after the first only supply padding rows (tiny splits)
        for b in order.tolist() * passes:
            n = self.blocks[b].rows
            if pos + n > lo and pos < hi:
                rows = np.random.default_rng([self.seed, epoch, 1 + b]).permutation(n)
                out.append((b, rows[max(lo - pos, 0) : min(hi - pos, n)]))
            pos += n
            if pos >= hi:
                break
        return out

    def _batch_rows(self, slices: list[tuple[int, np.ndarray]], k: int) -> list[tuple[int, np.ndarray]]:
        lo, hi = k * self.batch_size, (k + 1) * self.batch_size
        out, pos = [], 0
        for b, rows in slices:
            n = len(rows)
            if pos + n > lo and pos < hi:
                out.append((b, rows[max(lo - pos, 0) : min(hi - pos, n)]))
            pos += n
            if pos >= hi:
                break
        return out

    def make_batch(self, cache: _ShardCache, parts: list[tuple[int, np.ndarray]], epoch: int, k: int) -> dict[str, Any]:
        batches = [(cache.batch(self.blocks[block]), rows) for block, rows in parts]
        nsp = np.concatenate([batch.column("is_random_next").to_numpy(zero_copy_only=False)[rows] for batch, rows in batches])
        s = self.specials
        arrays = collate_segments(
            *gather_segments(batches, "tokens_a"), *gather_segments(batches, "tokens_b"), nsp,
            cls_id=s["[CLS]"], sep_id=s["[SEP]"], pad_id=s["[PAD]"], max_seq_len=self.manifest.max_seq_len,
        )
        rng = np.random.default_rng([self.seed, epoch, self.rank, k, 7])
        masked = self.masker(arrays["input_ids"], arrays["special_mask"], rng)
        out = {**arrays, **masked}
        out.pop("special_mask", None)
        tensors = {key: torch.from_numpy(np.ascontiguousarray(v)) for key, v in out.items()}
        tensors["position"] = torch.tensor([epoch, k])
        return tensors

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        cache = _ShardCache(self.manifest, self.split, self.verify, cache_dir=self.cache_dir)
        epoch, first = self.start
        while self.epochs is None or epoch < self.epochs:
            slices = self._rank_rows(epoch)
            for k in range(first + worker, self.batches_per_epoch, workers):
                yield self.make_batch(cache, self._batch_rows(slices, k), epoch, k)
            # the next epoch starts at batch 0 for every worker; shift so round-robin order stays sequential
            done = self.batches_per_epoch - first
            worker = (worker - done) % workers
            epoch, first = epoch + 1, 0


def loader(stream: ShardStream, num_workers: int = 1) -> torch.utils.data.DataLoader:
    """A DataLoader that passes ShardStream's ready batches through (batching happens in the stream)."""
    return torch.utils.data.DataLoader(
        stream,
        batch_size=None,
        num_workers=num_workers,
        persistent_workers=False,
        prefetch_factor=4 if num_workers else None,
    )
