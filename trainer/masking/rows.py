"""Whole-batch array helpers the masker and its strategies share: no Python loop over rows.

In:  (rows, n) numpy arrays of flags. Out: the index of each position's next flag (`next_index`), and a row's flags
     packed left into a table as wide as the widest row (`pack_rows`).
"""

from __future__ import annotations

import numpy as np


def next_index(flags: np.ndarray) -> np.ndarray:
    """(rows, n) -> for each position t the smallest j > t with flags[j] (n when none)."""
    n = flags.shape[1]
    at_or_after = np.where(flags, np.arange(n), n)
    at_or_after = np.minimum.accumulate(at_or_after[:, ::-1], axis=1)[:, ::-1]
    out = np.full_like(at_or_after, n)
    out[:, :-1] = at_or_after[:, 1:]
    return out


def pack_rows(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The True entries of (rows, n) `flags` packed left into a (rows, width) table, width the widest row.

    Returns `flat` (their flat indices into `flags`, row-major), `cols` (their columns), `packed` (their
    flat indices into the packed table) and `width`. Flat indices rather than (row, column) pairs: numpy
    scatters and gathers through one index array two to three times as fast as through two (measured: 3.0
    against 7.2 µs for 1,200 entries of a 64 x 128 array)."""
    n = flags.shape[1]
    flat = np.flatnonzero(flags)
    counts = np.count_nonzero(flags, axis=1)
    width = int(counts.max(initial=0))
    rows = flat // n
    rank = np.arange(flat.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return flat, flat - rows * n, rows * width + rank, width
