"""ChoiceSequence: which mixture component each global step draws from, as a pure function of (seed, step).

Step j's component comes from a uniform draw of the generator seeded (seed, chunk j // CHOICE_CHUNK), so it
needs no sequential state: any worker can compute any step's choice, and a resume needs only the step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CHOICE_CHUNK = 4096
"""Mixture steps drawn per seeded generator; part of the sequence's definition (changing it changes choices)."""
_CHOICE_TAG = 0x6D6978  # keeps the choice draws apart from every other seeded draw


class ChoiceSequence:
    """Which component each mixture step draws from, as a pure function of (seed, step)."""

    def __init__(self, probabilities: Sequence[float], seed: int, chunk: int = CHOICE_CHUNK):
        p = np.asarray(probabilities, dtype=np.float64)
        if p.ndim != 1 or not len(p) or (p <= 0).any() or abs(p.sum() - 1) > 1e-9:
            raise ValueError(f"probabilities must be positive and sum to 1, got {p.tolist()}")
        self.probabilities, self.seed, self.chunk = p, seed, chunk
        self._cdf = np.cumsum(p)
        self._prefix = [np.zeros(len(p), dtype=np.int64)]  # _prefix[i]: batches drawn per component before chunk i
        self._last: tuple[int, np.ndarray] = (-1, np.empty(0, dtype=np.int64))

    def chunk_choices(self, i: int) -> np.ndarray:
        """(chunk,) component of each step in [i * chunk, (i + 1) * chunk)."""
        if self._last[0] != i:
            u = np.random.default_rng([self.seed, _CHOICE_TAG, i]).random(self.chunk)
            picks = np.minimum(np.searchsorted(self._cdf, u, side="right"), len(self._cdf) - 1)
            self._last = (i, picks)
        return self._last[1]

    def choices(self, start: int, stop: int) -> np.ndarray:
        """(stop - start,) the component of each step in [start, stop)."""
        first, end = start // self.chunk, -(-stop // self.chunk)
        parts = [self.chunk_choices(i)[max(start - i * self.chunk, 0) : stop - i * self.chunk] for i in range(first, end)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def drawn_before(self, step: int) -> np.ndarray:
        """(components,) batches each component has given before `step`. O(step / chunk) the first time."""
        i, r = divmod(step, self.chunk)
        while len(self._prefix) <= i:
            n = len(self._prefix) - 1
            self._prefix.append(self._prefix[n] + np.bincount(self.chunk_choices(n), minlength=len(self._cdf)))
        return self._prefix[i] + np.bincount(self.chunk_choices(i)[:r], minlength=len(self._cdf))

    def locate(self, step: int) -> tuple[int, int]:
        """(component, that component's batch index) of a mixture step."""
        c = int(self.chunk_choices(step // self.chunk)[step % self.chunk])
        return c, int(self.drawn_before(step)[c])


