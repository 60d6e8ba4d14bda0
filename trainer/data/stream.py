"""ShardStream: NSP pair shards (manifest + Arrow IPC, any fsspec URL) → masked training batches.

In:  a manifest URL, a split, this process's (rank, world_size), the batch size, a seed and a Masker.
Out: an IterableDataset of ready batches (numpy → torch in the collate step), each tagged with the
     (epoch, batch) position it came from, so the trainer can checkpoint the exact data position.

Which rows a rank reads in an epoch, and in which order, is trainer/data/layout.py's EpochLayout: shards in a
seeded order per epoch, each rank a contiguous slice of them (padded so all ranks get the same number of
batches), blocks shuffled within windows of `shuffle_window` consecutive shards, rows shuffled within blocks.
The rank's stream is cut into batches of `batch_size` rows; dataloader worker w of K builds batches
k ≡ w (mod K). The DataLoader hands worker outputs out round-robin, so the rank sees batches 0, 1, 2, ...
whatever K is, which is what makes resume exact after a change of the number of workers.

Length buckets (`length_buckets` = G > 0): the rows of each group of G consecutive batches of the rank are
sorted by num_tokens and cut into G batches, whose order is shuffled (seeded by seed, epoch, rank, group).
Dynamic padding then pads each batch to its own longest pair, which is now close to the others: fewer pad
tokens, the same rows in the same epoch, and still a pure function of (seed, epoch, rank, k).

Each worker reads through a ShardReader (trainer/data/reader.py): it holds the shards of the window ahead
of the current batch and fetches the next window's first shard(s) in a background thread (`readahead`), so
a worker reads each shard once per epoch. Randomness: the layout from (seed, epoch, rank); the mask of batch
k from (seed, epoch, rank, k), so a pair gets a fresh mask in every epoch and the same one after a resume.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import IterableDataset, get_worker_info

from schemas import ContractError, Manifest
from trainer.data.collate import collate_segments
from trainer.data.layout import Block, EpochLayout, rank_layout, split_blocks
from trainer.data.reader import ShardReader
from trainer.masking import Masker

__all__ = ["Block", "ShardStream", "gather_segments", "loader", "split_blocks"]

STATE_VERSION = 2
"""2: shards in a seeded order and blocks shuffled within a window of shards (1: all blocks shuffled at once)."""
_BUCKET_TAG = 0x6C656E  # keeps the bucket shuffle's seeds apart from the mask seeds (tag 7)
LAYOUT_KEYS = ("manifest", "split", "world_size", "batch_size", "seed", "shuffle_window", "length_buckets")
"""What a saved data position must share with the run that resumes it."""


def gather_segments(parts: list[tuple[pa.RecordBatch, np.ndarray]], column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, starts, lengths) of a list column over the given rows of record batches, for collate_segments.

    One batch: its own id buffer (zero-copy). Several: the rows taken from each (a copy of the batch's ids
    only, not of whole blocks: a length-bucketed batch gathers from a dozen blocks)."""
    if len(parts) == 1:
        batch, rows = parts[0]
        array = batch.column(column)
        offsets = array.offsets.to_numpy()
        return array.values.to_numpy(), offsets[rows].astype(np.int64), (offsets[rows + 1] - offsets[rows]).astype(np.int64)
    taken = pa.concat_arrays([batch.column(column).take(pa.array(rows)) for batch, rows in parts])
    offsets = taken.offsets.to_numpy().astype(np.int64)
    return taken.values.to_numpy(), offsets[:-1], np.diff(offsets)


class Cursor:
    """One iterator's reading state: its ShardReader, and memos of the layouts, block row permutations and
    length-sorted group it computed (the stream itself holds no iteration state, so workers share nothing)."""

    def __init__(self, reader: Any):
        self.reader = reader
        self.layouts: dict[int, EpochLayout] = {}
        self.perms: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self.group: tuple | None = None
        self.holding: tuple | None = None

    def close(self) -> None:
        self.reader.close()


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
        shuffle_window: int = 4,
        length_buckets: int = 0,
        pad_to_multiple_of: int = 1,
        readahead: int = 1,
    ):
        if not manifest.split_shards(split):
            raise ContractError(f"{manifest.url}: no shards for split {split!r} (splits: {manifest.splits})")
        for name, value, least in (("shuffle_window", shuffle_window, 1), ("length_buckets", length_buckets, 0),
                                   ("pad_to_multiple_of", pad_to_multiple_of, 1), ("readahead", readahead, 0)):
            if value < least:
                raise ValueError(f"{name} must be >= {least}, got {value}")
        self.manifest, self.split, self.batch_size, self.masker = manifest, split, batch_size, masker
        self.seed, self.rank, self.world_size, self.verify, self.epochs = seed, rank, world_size, verify_checksums, epochs
        self.cache_dir, self.shuffle_window, self.length_buckets = cache_dir, shuffle_window, length_buckets
        self.pad_to_multiple_of, self.readahead = pad_to_multiple_of, readahead
        self.blocks = split_blocks(manifest, split)
        self.rows = sum(b.rows for b in self.blocks)
        self.batches_per_epoch = math.ceil(self.rows / (world_size * batch_size))
        self.padding = self.batches_per_epoch * world_size * batch_size - self.rows
        self.specials = manifest.special_tokens
        self.start = (0, 0)

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
            "shuffle_window": self.shuffle_window,
            "length_buckets": self.length_buckets,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at the batch after the last one trained on; refuse a state from other data or layout."""
        if state.get("version") != STATE_VERSION:
            raise ContractError(f"data state version {state.get('version')!r}, this trainer reads {STATE_VERSION}"
                                " (the epoch layout changed: restart the data position or use the matching clozeforge)")
        expected = self.state_dict(0, 0)
        for key in LAYOUT_KEYS:
            if state[key] != expected[key]:
                raise ContractError(
                    f"cannot resume the data position: checkpoint has {key}={state[key]!r}, this run has {expected[key]!r}"
                    + (" (the batch order depends on it)" if key not in ("manifest", "split", "seed") else "")
                )
        epoch, nxt = state["epoch"], state["next_batch"]
        self.start = (epoch + 1, 0) if nxt >= self.batches_per_epoch else (epoch, nxt)

    # -- reading --------------------------------------------------------------------------------------
    def open_reader(self) -> Any:
        return ShardReader(self.manifest, self.split, verify=self.verify, cache_dir=self.cache_dir)

    def batch_at(self, cursor: Cursor, epoch: int, k: int) -> dict[str, torch.Tensor]:
        """Batch k of `epoch` for this rank: rows, read (holding the window ahead), collated and masked."""
        layout = self._layout(cursor, epoch)
        size = self.batch_size
        first = k - k % self.length_buckets if self.length_buckets else k
        end = min(first + self.length_buckets, self.batches_per_epoch) if self.length_buckets else k + 1
        self._hold(cursor, layout, first * size, end * size)
        if self.length_buckets:
            parts = self._bucket_rows(cursor, layout, first, end, k)
        else:
            parts = [(b, self._perm(cursor, epoch, b)[lo:hi]) for b, lo, hi in layout.slices(k * size, (k + 1) * size)]
        return self.make_batch(cursor.reader, parts, epoch, k)

    def make_batch(self, reader: Any, parts: list[tuple[int, np.ndarray]], epoch: int, k: int) -> dict[str, torch.Tensor]:
        batches = [(reader.batch(self.blocks[b].shard, self.blocks[b].index, self.blocks[b].rows), rows) for b, rows in parts]
        nsp = np.concatenate([batch.column("is_random_next").to_numpy(zero_copy_only=False)[rows] for batch, rows in batches])
        s = self.specials
        arrays = collate_segments(
            *gather_segments(batches, "tokens_a"), *gather_segments(batches, "tokens_b"), nsp,
            cls_id=s["[CLS]"], sep_id=s["[SEP]"], pad_id=s["[PAD]"], max_seq_len=self.manifest.max_seq_len,
            pad_to_multiple_of=self.pad_to_multiple_of,
        )
        rng = np.random.default_rng([self.seed, epoch, self.rank, k, 7])
        masked = self.masker(arrays["input_ids"], arrays["special_mask"], rng)
        out = {**arrays, **masked}
        out.pop("special_mask", None)
        tensors = {key: torch.from_numpy(np.ascontiguousarray(v)) for key, v in out.items()}
        tensors["position"] = torch.tensor([epoch, k])
        return tensors

    def layout(self, epoch: int) -> EpochLayout:
        """This rank's rows of `epoch`, in order (trainer/data/layout.py)."""
        return rank_layout(self.blocks, seed=self.seed, epoch=epoch, rank=self.rank, world_size=self.world_size,
                           batch_size=self.batch_size, batches_per_epoch=self.batches_per_epoch, window=self.shuffle_window)

    def _layout(self, cursor: Cursor, epoch: int) -> EpochLayout:
        if epoch not in cursor.layouts:
            if len(cursor.layouts) >= 2:  # the current epoch and the next (read-ahead) are all that is needed
                cursor.layouts.pop(min(cursor.layouts))
            cursor.layouts[epoch] = self.layout(epoch)
        return cursor.layouts[epoch]

    def _perm(self, cursor: Cursor, epoch: int, block: int) -> np.ndarray:
        """(rows,) the seeded row order of a block in this epoch (kept for the few blocks in use)."""
        perm = cursor.perms.pop((epoch, block), None)
        if perm is None:
            perm = np.random.default_rng([self.seed, epoch, 1 + block]).permutation(self.blocks[block].rows)
        cursor.perms[(epoch, block)] = perm
        while len(cursor.perms) > 64:
            cursor.perms.popitem(last=False)
        return perm

    def _hold(self, cursor: Cursor, layout: EpochLayout, lo: int, hi: int) -> None:
        """Hold the shards of rows lo.. to the end of their windows, then the next window's first shard(s)."""
        first, end = layout.pieces(lo, hi)
        last_window = layout.last_window(end)
        if cursor.holding == (layout.epoch, first, last_window):
            return
        cursor.holding = (layout.epoch, first, last_window)
        want = layout.shards_ahead(first, last_window)
        ahead = None
        if last_window + 1 < layout.windows:
            ahead = layout.window_shards(last_window + 1)
        elif self.epochs is None or layout.epoch + 1 < self.epochs:
            ahead = self._layout(cursor, layout.epoch + 1).window_shards(0)
        want += [s for s in (ahead or [])[: self.readahead] if s not in want]
        cursor.reader.hold(want)

    def _bucket_rows(self, cursor: Cursor, layout: EpochLayout, first: int, end: int, k: int) -> list[tuple[int, np.ndarray]]:
        """Batch k's rows when the group of batches first..end is sorted by length (see the module docstring)."""
        size = self.batch_size
        if cursor.group is None or cursor.group[0] != (layout.epoch, first):
            slices = layout.slices(first * size, end * size)
            cursor.reader.decoded_capacity = max(cursor.reader.decoded_capacity, len(slices) + 2)  # the group's blocks stay decoded
            blocks, rows, lengths = [], [], []
            for b, lo, hi in slices:
                picked = self._perm(cursor, layout.epoch, b)[lo:hi]
                batch = cursor.reader.batch(self.blocks[b].shard, self.blocks[b].index, self.blocks[b].rows)
                blocks.append(np.full(len(picked), b))
                rows.append(picked)
                lengths.append(batch.column("num_tokens").to_numpy()[picked])
            order = np.argsort(np.concatenate(lengths), kind="stable")
            shuffle = np.random.default_rng([self.seed, layout.epoch, self.rank, first, _BUCKET_TAG]).permutation(end - first)
            cursor.group = ((layout.epoch, first), np.concatenate(blocks)[order], np.concatenate(rows)[order], shuffle)
        _, blocks, rows, shuffle = cursor.group
        j = int(shuffle[k - first])
        blk, picked = blocks[j * size : (j + 1) * size], rows[j * size : (j + 1) * size]
        unique, at = np.unique(blk, return_index=True)
        return [(int(b), picked[blk == b]) for b in unique[np.argsort(at)]]

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        cursor = Cursor(self.open_reader())
        try:
            epoch, first = self.start
            while self.epochs is None or epoch < self.epochs:
                for k in range(first + worker, self.batches_per_epoch, workers):
                    yield self.batch_at(cursor, epoch, k)
                # the next epoch starts at batch 0 for every worker; shift so round-robin order stays sequential
                done = self.batches_per_epoch - first
                worker = (worker - done) % workers
                epoch, first = epoch + 1, 0
        finally:
            cursor.close()


def loader(stream: IterableDataset, num_workers: int = 1) -> torch.utils.data.DataLoader:
    """A DataLoader that passes ShardStream's ready batches through (batching happens in the stream)."""
    return torch.utils.data.DataLoader(
        stream,
        batch_size=None,
        num_workers=num_workers,
        persistent_workers=False,
        prefetch_factor=4 if num_workers else None,
        worker_init_fn=_ignore_stop_signals if num_workers else None,
    )


def shutdown(batches) -> None:
    """Stop the worker processes of a loader's iterator now, not at interpreter exit.

    Workers ignore SIGTERM (below), and multiprocessing's exit hook terminates daemonic children with
    SIGTERM and then joins them: an iterator left open at exit would wait there forever. So the loop
    shuts each iterator down when done with it, and kills (SIGKILL) a worker that does not exit."""
    import signal

    stop = getattr(batches, "_shutdown_workers", None)  # torch's own orderly shutdown: a stop sentinel, then join
    if stop is None:
        return
    stop()
    for worker in getattr(batches, "_workers", []):
        if worker.is_alive():
            os.kill(worker.pid, signal.SIGKILL)
            worker.join()


def _ignore_stop_signals(_worker_id: int) -> None:
    """Workers leave SIGTERM/SIGINT to the training process, which checkpoints and then shuts them down: a
    scheduler or a Ctrl-C signals the whole process group, and a worker killed first would end the run
    before its checkpoint."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
