"""Epoch layout: which rows of a split one rank reads in an epoch, and in which order, from the manifest alone.

In:  the split's blocks (record batches: shard, index, rows), seed and epoch, this rank of world_size, the
     batch size, the batches per epoch and the shuffle window (shards).
Out: an EpochLayout: the rank's rows of the epoch as a sequence of pieces (a block and a slice of its row
     permutation), grouped in windows of shards; `slices(lo, hi)` locates any range of the rank's rows.

The layout of epoch e (steps 1-2 are the same on every rank, from (seed, e) alone):
  1. The split's shards in a seeded order, each shard's blocks in file order: one natural stream of N rows.
  2. It is padded to batches_per_epoch x world_size x batch_size rows by repeating its first rows
     (cyclically, if the split is smaller than one global batch): DistributedSampler's policy, so every rank
     gets the same number of batches; the pad is under world_size x batch_size rows per epoch.
  3. Rank r takes the r-th contiguous slice: about N / world_size rows of consecutive shards, cut at block
     boundaries (and where the slice starts and ends) into pieces.
  4. The rank's shards, in order of first appearance, form windows of `window` shards; the pieces of each
     window are shuffled (seeded by seed, e, rank, window), so the blocks of the window's shards interleave.
  5. The rows of a block follow a permutation seeded by (seed, e, block); a piece is a slice of it.
The slices partition the padded stream and a rank's rows are a permutation of its slice: every row once per
epoch across ranks (pad rows twice). Each shard falls in one window of a rank, so a reader that holds the
current window (plus read-ahead) reads each shard once per epoch; memory is window x shard size.

NOTE: prep shuffles rows globally across shards, so a batch drawn from one or two blocks is a uniform
sample; the seeded shard order and window shuffle give each epoch a fresh order without random access to the
whole split (the earlier layout shuffled all blocks of the split at once and read each shard ~96 times per
epoch at prep's defaults, 100k rows a shard in blocks of 1024).
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np

from schemas import Manifest

WINDOW_TAG = 0x77696E  # keeps the window shuffle's seeds apart from the other (seed, epoch, rank, ...) seeds


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


@dataclasses.dataclass(frozen=True)
class EpochLayout:
    """One rank's rows of one epoch; arrays are per piece, in the order the rank reads them."""

    epoch: int
    block: np.ndarray  # (pieces,) the piece's block, as a position in the split's block list
    lo: np.ndarray  # (pieces,) the piece is rows lo .. lo + length of its block's row permutation
    start: np.ndarray  # (pieces + 1,) first row of each piece in the rank's stream; start[-1] = the rank's rows
    shard: np.ndarray  # (pieces,) the piece's shard
    window: np.ndarray  # (pieces,) the piece's window, non-decreasing
    windows: int

    def __post_init__(self) -> None:
        # NOTE: Python lists for the per-batch lookups: bisect on a list takes ~0.3 µs, np.searchsorted with a
        # Python scalar ~7 µs, which was 5% of a batch's time in bench/loader.py
        for name in ("block", "lo", "start", "shard", "window"):
            object.__setattr__(self, f"_{name}", getattr(self, name).tolist())

    def pieces(self, lo: int, hi: int) -> tuple[int, int]:
        """[first, end) of the pieces holding rows lo..hi (hi > lo) of the rank's stream."""
        return bisect.bisect_right(self._start, lo) - 1, bisect.bisect_left(self._start, hi)

    def slices(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """Rows lo..hi of the rank's stream as [(block, a, b)]: rows a..b of that block's row permutation."""
        first, end = self.pieces(lo, hi)
        out = []
        for p in range(first, end):
            begin, offset = self._start[p], self._lo[p]
            out.append((self._block[p], offset + max(lo - begin, 0), offset + min(hi, self._start[p + 1]) - begin))
        return out

    def last_window(self, end: int) -> int:
        """The window of piece end - 1."""
        return self._window[end - 1]

    def shards_ahead(self, first_piece: int, last_window: int) -> list[int]:
        """Shards of the pieces from `first_piece` to the end of window `last_window`, in order of first use."""
        return list(dict.fromkeys(self._shard[first_piece : bisect.bisect_right(self._window, last_window)]))

    def window_shards(self, window: int) -> list[int]:
        """The shards of one window, in order of first use."""
        return list(dict.fromkeys(self._shard[bisect.bisect_left(self._window, window) : bisect.bisect_right(self._window, window)]))


def rank_layout(blocks: list[Block], *, seed: int, epoch: int, rank: int, world_size: int, batch_size: int,
                batches_per_epoch: int, window: int) -> EpochLayout:
    """The layout of the module docstring for one (epoch, rank)."""
    shard_of = np.array([b.shard for b in blocks], dtype=np.int64)
    rows = np.array([b.rows for b in blocks], dtype=np.int64)
    order = np.random.default_rng([seed, epoch]).permutation(np.unique(shard_of))
    place = np.zeros(shard_of.max() + 1, dtype=np.int64)
    place[order] = np.arange(len(order))
    natural = np.argsort(place[shard_of], kind="stable")  # (blocks,) shards in the epoch's order, blocks in file order
    lengths = rows[natural]
    ends = np.cumsum(lengths)
    starts, total = ends - lengths, int(ends[-1])
    per_rank = batches_per_epoch * batch_size
    lo, hi = rank * per_rank, (rank + 1) * per_rank
    block, first, last = [], [], []
    for cycle in range(lo // total, (hi - 1) // total + 1):  # cycles after the first only supply pad rows
        a, b = max(lo - cycle * total, 0), min(hi - cycle * total, total)
        i, j = int(np.searchsorted(ends, a, "right")), int(np.searchsorted(starts, b, "left"))
        block.append(natural[i:j])
        first.append(np.maximum(a - starts[i:j], 0))
        last.append(np.minimum(b - starts[i:j], lengths[i:j]))
    block, first, last = np.concatenate(block), np.concatenate(first), np.concatenate(last)
    shard = shard_of[block]
    appearance = np.zeros_like(place)
    seen = list(dict.fromkeys(shard.tolist()))  # the rank's shards in order of first appearance
    appearance[seen] = np.arange(len(seen))
    window_of = appearance[shard] // window
    windows = (len(seen) - 1) // window + 1
    grouped = np.argsort(window_of, kind="stable")
    bounds = np.searchsorted(window_of[grouped], np.arange(windows + 1))
    for w in range(windows):
        members = grouped[bounds[w] : bounds[w + 1]]
        grouped[bounds[w] : bounds[w + 1]] = members[np.random.default_rng([seed, epoch, rank, w, WINDOW_TAG]).permutation(len(members))]
    piece_rows = (last - first)[grouped]
    start = np.concatenate([[0], np.cumsum(piece_rows)])
    assert start[-1] == per_rank, (start[-1], per_rank)
    return EpochLayout(epoch=epoch, block=block[grouped], lo=first[grouped], start=start, shard=shard[grouped],
                       window=window_of[grouped], windows=windows)
