"""Canonical partitions: a global batch and a sample order that do not depend on how many ranks read them.

In:  the global batch G (rows per optimizer step, fixed for a run), the partition count P (fixed when the
     run starts), the world size W and the largest micro batch a rank may hold (--batch-size).
Out: a Batching: the rank's partitions, its micro batch and gradient-accumulation steps; or a one-line
     ValueError naming the flag when W, P and G do not fit together. `merge_chunks` joins masked chunks
     (one per partition and step) into one micro batch.

The data of an epoch is laid out as P partitions (trainer/data/layout.py's layout with P "ranks" and a batch
of G / P rows), so partition p's rows at global step k are a pure function of (manifest, seed, epoch, p, k),
and so is their mask. Global step k is the union over p of those chunks, whatever W is. Rank r of W takes
the whole partitions r x P/W .. (r + 1) x P/W - 1: it reads only their shards, and its G / W rows of step k
(its chunks in partition order) are cut into grad_accum micro batches. So W may change between runs as
long as it divides P, and the run resumes at the same global step with the same rows (Mosaic Streaming's
"canonical nodes" idea; here a partition also fixes the masks and the length buckets).

What a different W changes: which rows share a micro batch, hence the per-micro-batch loss normalisation
and dropout draws; the set of rows and their masks per optimizer step stay the same.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trainer.heads import IGNORE_INDEX, prediction_targets

DEFAULT_PARTITIONS = 64
"""At most this many partitions by default: any world size dividing the count can resume the run."""
MIN_CHUNK = 16
"""Default partitions leave at least this many pairs per partition and step where the global batch allows: each
chunk is collated and masked on its own, and a chunk of 1 pair makes the input path ~20x slower than one
chunk per batch (`python bench/run.py elastic`); --partitions trades that for more possible world sizes."""

_SEQ_KEYS = ("input_ids", "token_type_ids", "attention_mask", "position_ids", "documents")  # TLM's, per-document rows


@dataclasses.dataclass(frozen=True)
class Batching:
    """How one optimizer step's G rows are split: into P partition chunks, W ranks, micro batches."""

    global_batch: int
    partitions: int
    world_size: int
    micro_batch: int
    grad_accum: int

    @property
    def chunk(self) -> int:
        """Rows each partition gives to every global step."""
        return self.global_batch // self.partitions

    @property
    def per_rank(self) -> int:
        """Rows each rank trains on per optimizer step (micro_batch x grad_accum)."""
        return self.global_batch // self.world_size

    def rank_partitions(self, rank: int) -> range:
        share = self.partitions // self.world_size
        return range(rank * share, (rank + 1) * share)


def default_partitions(global_batch: int, world_size: int) -> int:
    """The most partitions, up to DEFAULT_PARTITIONS, that divide the global batch, that W divides and that leave
    chunks of MIN_CHUNK pairs; with no such count, the fewest that fit (W, when W divides the global batch)."""
    fits = [p for p in range(1, min(DEFAULT_PARTITIONS, global_batch) + 1) if global_batch % p == 0 and p % world_size == 0]
    if not fits:
        raise ValueError(f"no partition count fits a global batch of {global_batch} on {world_size} ranks: "
                         "make --global-batch-size a multiple of the number of ranks")
    roomy = [p for p in fits if global_batch // p >= MIN_CHUNK]
    return max(roomy) if roomy else min(fits)


def plan(global_batch: int, partitions: int | None, world_size: int, max_micro_batch: int) -> Batching:
    """The Batching for W ranks; refuses (ValueError, one line) what cannot keep the global step's rows."""
    if global_batch < 1 or max_micro_batch < 1:
        raise ValueError(f"--global-batch-size and --batch-size must be >= 1, got {global_batch} and {max_micro_batch}")
    p = default_partitions(global_batch, world_size) if partitions is None else partitions
    if p < 1:
        raise ValueError(f"--partitions must be >= 1, got {p}")
    if global_batch % p:
        raise ValueError(f"--global-batch-size {global_batch} is not a multiple of --partitions {p} "
                         "(every partition gives the same number of rows to each step)")
    if p % world_size:
        fits = [w for w in range(1, p + 1) if p % w == 0]
        raise ValueError(f"{world_size} ranks cannot share the run's {p} data partitions evenly; "
                         f"use a number of ranks that divides {p} ({', '.join(map(str, fits))})")
    per_rank = global_batch // world_size
    micro = max(d for d in range(1, min(max_micro_batch, per_rank) + 1) if per_rank % d == 0)
    return Batching(global_batch, p, world_size, micro, per_rank // micro)


def merge_chunks(chunks: list[dict[str, np.ndarray]], lo: int, hi: int, pad_id: int, pad_to_multiple_of: int) -> dict[str, np.ndarray]:
    """Rows lo..hi of the masked chunks stacked in order, padded to their own longest pair and prediction count."""
    if len(chunks) == 1 and lo == 0 and hi == len(chunks[0]["input_ids"]):
        return chunks[0]
    rows = [len(c["input_ids"]) for c in chunks]
    offsets = np.concatenate([[0], np.cumsum(rows)])
    out, targets = {}, prediction_targets()  # their fill pads a narrower chunk's prediction slots
    for key, first in chunks[0].items():
        if first.ndim == 2:
            width = max(c[key].shape[1] for c in chunks)
            fill = pad_id if key == "input_ids" else targets[key].fill if key in targets else 0
            merged = np.full((offsets[-1], width), fill, dtype=first.dtype)
            for c, at in zip(chunks, offsets):
                merged[at : at + len(c[key]), : c[key].shape[1]] = c[key]
        else:
            merged = np.concatenate([c[key] for c in chunks])
        out[key] = merged[lo:hi]
    longest = int(out["attention_mask"].sum(axis=1).max())
    seq = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    predictions = max(int((out["mlm_labels"] != IGNORE_INDEX).sum(axis=1).max()), 1)
    for key, value in out.items():
        if value.ndim == 2:
            out[key] = value[:, :seq] if key in _SEQ_KEYS else value[:, :predictions]
    return out
