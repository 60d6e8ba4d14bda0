"""ShardStream: NSP pair shards (manifest + Arrow IPC, any fsspec URL) → masked training batches.

In:  a manifest URL, a split, this process's (rank, world_size), the (largest) micro batch, optionally the
     global batch and the number of canonical partitions, a seed and a Masker.
Out: an IterableDataset of ready micro batches (numpy → torch in the collate step), each tagged with the
     (epoch, micro batch) position it came from, so the trainer can checkpoint the exact data position.

The epoch is laid out as P canonical partitions (trainer/data/partitions.py): partition p is the p-th "rank"
of trainer/data/layout.py's EpochLayout with P ranks and a batch of G / P rows (shards in a seeded order per
epoch, a contiguous slice of them per partition, padded so all get the same number of steps, blocks shuffled
within windows of `shuffle_window` consecutive shards, rows shuffled within blocks). Partition p's chunk of
global step k is a pure function of (manifest, seed, epoch, p, k), masks included, so the rows of a step do
not depend on the world size. This rank owns partitions r x P/W .. (r + 1) x P/W - 1; its rows of step k
(its chunks in order) are cut into grad_accum micro batches. Without a global batch, G = batch_size x W and
P = W: one partition per rank, one micro batch per step.

Dataloader worker w of K builds micro batches i ≡ w (mod K). The DataLoader hands worker outputs out
round-robin, so the rank sees batches 0, 1, 2, ... whatever K is, which is what makes resume exact after a
change of the number of workers.

Length buckets (`length_buckets` = L > 0): each partition's rows of L consecutive steps are sorted by
num_tokens and cut into L chunks, whose order is shuffled (seeded by seed, epoch, group: the same for every
partition, so the chunks of one step have similar lengths). Dynamic padding then pads each micro batch to
its own longest pair: fewer pad tokens, the same rows in the same epoch, still a function of (p, k).

The micro batch reaches the model in the shape `batch_form` says (trainer/data/batch_forms.py): padded to its longest
row, packed rows without padding, or one static shape; the rows and their masks are the same in every form.

Each worker reads through a ShardReader (trainer/data/reader.py): it holds the shards of the window ahead
of the current batch and fetches the next window's first shard(s) in a background thread (`readahead`), so
a worker reads each shard once per epoch. Randomness: the layout from (seed, epoch, partition); the mask of
partition p's chunk of step k from (seed, epoch, p, k), so a pair gets a fresh mask in every epoch and the
same one after a resume, on any world size.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from schemas import ContractError, Manifest
from trainer.config import DATA_POSITION_KEYS
from trainer.data.batch_forms import FORMS
from trainer.data.collate import ROW_COLLATORS
from trainer.data.layout import Block, EpochLayout, rank_layout, split_blocks
from trainer.data.partitions import merge_chunks, plan
from trainer.data.reader import ShardReader
from trainer.masking import Masker

__all__ = ["Block", "ShardStream", "default_workers", "loader", "split_blocks"]

STATE_VERSION = 3
"""3: canonical partitions, position in global steps (2: per-rank layout; 1: all blocks shuffled at once)."""
_BUCKET_TAG = 0x6C656E  # keeps the bucket shuffle's seeds apart from the mask seeds (tag 7)
LAYOUT_KEYS = ("manifest", "split", *(k for k in DATA_POSITION_KEYS if k != "manifest"))
"""What a saved data position must share with the run that resumes it (the manifest first: a mixture's position
names itself there). Which settings may change on resume is trainer/config.py's RESUME_RULES."""


class Cursor:
    """One iterator's reading state: its ShardReader, and memos of the layouts, block row permutations and
    length-sorted group it computed (the stream itself holds no iteration state, so workers share nothing)."""

    def __init__(self, reader: Any):
        self.reader = reader
        self.layouts: dict[tuple[int, int], EpochLayout] = {}  # (epoch, partition)
        self.perms: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self.groups: dict[int, tuple] = {}  # partition -> its current length-bucket group
        self.chunks: OrderedDict[tuple[int, int, int], dict[str, np.ndarray]] = OrderedDict()  # (epoch, step, partition)
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
        global_batch: int | None = None,
        partitions: int | None = None,
        batch_form: str = "padded",
        predictions: int | None = None,
        static_len: int | None = None,
        languages: tuple[str, ...] = (),
    ):
        if not manifest.split_shards(split):
            raise ContractError(f"{manifest.url}: no shards for split {split!r} (splits: {manifest.splits})")
        for name, value, least in (("shuffle_window", shuffle_window, 1), ("length_buckets", length_buckets, 0),
                                   ("pad_to_multiple_of", pad_to_multiple_of, 1), ("readahead", readahead, 0)):
            if value < least:
                raise ValueError(f"{name} must be >= {least}, got {value}")
        if global_batch is None:  # the layout of one partition per rank, one micro batch per step
            global_batch, partitions = batch_size * world_size, partitions or world_size
        self.batching = plan(global_batch, partitions, world_size, batch_size)
        self.global_batch, self.partitions, self.grad_accum = global_batch, self.batching.partitions, self.batching.grad_accum
        self.own_partitions = self.batching.rank_partitions(rank)
        batch_size = self.batching.micro_batch
        self.manifest, self.split, self.batch_size, self.masker = manifest, split, batch_size, masker
        self.seed, self.rank, self.world_size, self.verify, self.epochs = seed, rank, world_size, verify_checksums, epochs
        self.cache_dir, self.shuffle_window, self.length_buckets = cache_dir, shuffle_window, length_buckets
        self.pad_to_multiple_of, self.readahead = pad_to_multiple_of, readahead
        self.form = FORMS[batch_form]
        # the static form's shape: every row static_len tokens (a mixture's longest component's) and `predictions` slots
        self.form_shape = {"max_seq_len": static_len or manifest.max_seq_len, "predictions": predictions,
                           "pad_id": manifest.special_id("pad_token")}
        if self.form.fixed_predictions and not predictions:
            raise ValueError(f"the {batch_form} batch form needs its number of predictions a row")
        self.blocks = split_blocks(manifest, split)
        self.count_rows(sum(b.rows for b in self.blocks))
        self.specials = manifest.special_tokens
        self.languages = {code: i for i, code in enumerate(languages)} or None  # XLM's: token types are languages
        self.start = (0, 0)

    def count_rows(self, rows: int) -> None:
        """Steps and micro batches per epoch, and the pad rows, for `rows` rows of the split."""
        self.rows = rows
        self.steps_per_epoch = math.ceil(rows / self.global_batch)
        self.batches_per_epoch = self.steps_per_epoch * self.grad_accum  # this rank's micro batches
        self.padding = self.steps_per_epoch * self.global_batch - rows

    # -- resumable position ------------------------------------------------------------------------
    def state_dict(self, epoch: int, next_batch: int) -> dict[str, Any]:
        """The position before micro batch `next_batch` of `epoch`, in global steps (any world size reads it)."""
        step, micro = divmod(next_batch, self.grad_accum)
        return {
            "version": STATE_VERSION,
            "epoch": epoch,
            "next_step": step,
            "next_micro": micro,  # 0 at every step boundary (where the trainer saves)
            "manifest": self.manifest.fingerprint,
            "split": self.split,
            "global_batch": self.global_batch,
            "partitions": self.partitions,
            "seed": self.seed,
            "shuffle_window": self.shuffle_window,
            "length_buckets": self.length_buckets,
            "world_size": self.world_size,  # a record: the position does not depend on it
            "grad_accum": self.grad_accum,
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
        if state["next_micro"] and state["grad_accum"] != self.grad_accum:
            raise ContractError(f"cannot resume the data position: it is inside a step of {state['grad_accum']} micro batches, "
                                f"this run takes {self.grad_accum} (resume from a checkpoint saved at a step boundary)")
        epoch, step = state["epoch"], state["next_step"]
        self.start = (epoch + 1, 0) if step >= self.steps_per_epoch else (epoch, step * self.grad_accum + state["next_micro"])

    # -- reading --------------------------------------------------------------------------------------
    def open_reader(self) -> Any:
        return ShardReader(self.manifest, self.split, verify=self.verify, cache_dir=self.cache_dir)

    def batch_at(self, cursor: Cursor, epoch: int, i: int) -> dict[str, torch.Tensor]:
        """Micro batch i of `epoch` for this rank: its partitions' chunks of the step, masked, cut to the micro batch."""
        k, m = divmod(i, self.grad_accum)
        chunk, lo = self.batching.chunk, m * self.batch_size
        first, last = lo // chunk, (lo + self.batch_size - 1) // chunk
        self._hold(cursor, epoch, k)
        chunks = [self._chunk(cursor, epoch, k, self.own_partitions[c]) for c in range(first, last + 1)]
        arrays = merge_chunks(chunks, lo - first * chunk, lo - first * chunk + self.batch_size, self.manifest.special_id("pad_token"),
                              self.pad_to_multiple_of)
        arrays = self.form.shape(arrays, **self.form_shape)
        tensors = {key: torch.from_numpy(np.ascontiguousarray(v)) for key, v in arrays.items()}
        tensors["position"] = torch.tensor([epoch, i])
        return tensors

    def _chunk(self, cursor: Cursor, epoch: int, k: int, p: int) -> dict[str, np.ndarray]:
        """Partition p's rows of step k, collated and masked (kept while the micro batches of the step use it)."""
        key = (epoch, k, p)
        if key not in cursor.chunks:
            layout, size = self._layout(cursor, epoch, p), self.batching.chunk
            if self.length_buckets:
                first = k - k % self.length_buckets
                end = min(first + self.length_buckets, self.steps_per_epoch)
                parts = self._bucket_rows(cursor, layout, p, first, end, k)
            else:
                parts = [(b, self._perm(cursor, epoch, b)[lo:hi]) for b, lo, hi in layout.slices(k * size, (k + 1) * size)]
            cursor.chunks[key] = self.make_chunk(cursor.reader, parts, epoch, k, p)
            while len(cursor.chunks) > 2:
                cursor.chunks.popitem(last=False)
        return cursor.chunks[key]

    def make_chunk(self, reader: Any, parts: list[tuple[int, np.ndarray]], epoch: int, k: int, p: int) -> dict[str, np.ndarray]:
        """The given rows of blocks, collated as their row format says and masked with the generator of
        (seed, epoch, partition, step)."""
        batches = [(reader.batch(self.blocks[b].shard, self.blocks[b].index, self.blocks[b].rows), rows) for b, rows in parts]
        arrays = ROW_COLLATORS[self.manifest.row_format.kind](batches, self.manifest, self.pad_to_multiple_of, self.languages)
        rng = np.random.default_rng([self.seed, epoch, p, k, 7])
        masked = self.masker(arrays["input_ids"], arrays["special_mask"], rng)
        out = {**arrays, **masked}
        out.pop("special_mask", None)
        return out

    def layout(self, epoch: int, partition: int) -> EpochLayout:
        """A partition's rows of `epoch`, in order (trainer/data/layout.py with P partitions as its ranks)."""
        return rank_layout(self.blocks, seed=self.seed, epoch=epoch, rank=partition, world_size=self.partitions,
                           batch_size=self.batching.chunk, batches_per_epoch=self.steps_per_epoch, window=self.shuffle_window)

    def _layout(self, cursor: Cursor, epoch: int, p: int) -> EpochLayout:
        if (epoch, p) not in cursor.layouts:
            # the current epoch and the next (read-ahead) are all that is needed
            for old in [key for key in cursor.layouts if key[0] < epoch - 1 or key[0] > epoch + 1]:
                del cursor.layouts[old]
            cursor.layouts[(epoch, p)] = self.layout(epoch, p)
        return cursor.layouts[(epoch, p)]

    def _perm(self, cursor: Cursor, epoch: int, block: int) -> np.ndarray:
        """(rows,) the seeded row order of a block in this epoch (kept for the few blocks in use)."""
        perm = cursor.perms.pop((epoch, block), None)
        if perm is None:
            perm = np.random.default_rng([self.seed, epoch, 1 + block]).permutation(self.blocks[block].rows)
        cursor.perms[(epoch, block)] = perm
        while len(cursor.perms) > 64:
            cursor.perms.popitem(last=False)
        return perm

    def _hold(self, cursor: Cursor, epoch: int, k: int) -> None:
        """Hold, for each partition of the rank, the shards of step k's rows (its length-bucket group's, with
        buckets) to the end of their windows; then each partition's next window's first shard(s)."""
        size, first_step = self.batching.chunk, k - k % self.length_buckets if self.length_buckets else k
        end_step = min(first_step + self.length_buckets, self.steps_per_epoch) if self.length_buckets else k + 1
        spans = []
        for p in self.own_partitions:
            layout = self._layout(cursor, epoch, p)
            first, end = layout.pieces(first_step * size, end_step * size)
            spans.append((first, layout.last_window(end)))
        if cursor.holding == (epoch, spans):
            return
        cursor.holding = (epoch, spans)
        want, ahead = [], []
        for p, (first, last_window) in zip(self.own_partitions, spans):
            layout = self._layout(cursor, epoch, p)
            want += layout.shards_ahead(first, last_window)
            if last_window + 1 < layout.windows:
                ahead.append(layout.window_shards(last_window + 1)[: self.readahead])
            elif self.epochs is None or epoch + 1 < self.epochs:
                ahead.append(self._layout(cursor, epoch + 1, p).window_shards(0)[: self.readahead])
        want = list(dict.fromkeys(want + [s for shards in ahead for s in shards]))
        cursor.reader.decoded_capacity = max(cursor.reader.decoded_capacity, 2 * len(self.own_partitions) + 2)
        cursor.reader.hold(want)

    def _bucket_rows(self, cursor: Cursor, layout: EpochLayout, p: int, first: int, end: int, k: int) -> list[tuple[int, np.ndarray]]:
        """Partition p's rows of step k when its steps first..end are sorted by length (see the module docstring)."""
        size = self.batching.chunk
        group = cursor.groups.get(p)
        if group is None or group[0] != (layout.epoch, first):
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
            shuffle = np.random.default_rng([self.seed, layout.epoch, first, _BUCKET_TAG]).permutation(end - first)
            group = cursor.groups[p] = ((layout.epoch, first), np.concatenate(blocks)[order], np.concatenate(rows)[order], shuffle)
        _, blocks, rows, shuffle = group
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


def loader(stream: IterableDataset, num_workers: int = 1, pin_memory: bool = False) -> torch.utils.data.DataLoader:
    """A DataLoader that passes ShardStream's ready batches through (batching happens in the stream); with
    `pin_memory` (a GPU run) its batches come in page-locked memory, so their copies to the GPU do not block."""
    return torch.utils.data.DataLoader(
        stream,
        batch_size=None,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=False,
        prefetch_factor=4 if num_workers else None,
        worker_init_fn=_ignore_stop_signals if num_workers else None,
    )


GPU_WORKERS = 4
"""Loader workers per rank on a GPU by default: masking a batch of 256 BERT pairs takes a core tens of ms, a
GPU step of BERT-base about 0.1 s, so four keep the queue full with room for slow shard reads."""


def default_workers(requested: int | None, on_gpu: bool, ranks_here: int = 1) -> int:
    """--num-workers as given, or its default: on a GPU, GPU_WORKERS, at most the cores per rank less one (the
    rank's own); on a CPU none. A CPU rank computes on its whole share of the cores (cpu_sharing.intra_op_threads),
    so a worker process has no core of its own: it takes its turns from the rank's threads, which wait for each
    other at every op. On the 2-core bench machine one worker cost the tiny model's loop about 5% (loop_ratio 0.945
    against 1.001 without, bench/README.md), where masking in the rank's own thread costs under 1% of a step."""
    if requested is not None:
        return requested
    if not on_gpu:
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(GPU_WORKERS, cores // max(ranks_here, 1) - 1))


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
