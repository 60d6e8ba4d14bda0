"""A figure and its spread, as every score clozeforge reports carries it: the mean over seeds (or examples) and the
standard error of that mean, alone or as the paired difference of two arms measured on the same seeds.

In:  values (one per seed, per instance). Out: (mean, SE), SE = sample standard deviation / sqrt(n).
One rule for one value: its SE is 0.0 (nothing to estimate a spread from; tables print such a figure without ±),
and an empty list has mean NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mean_and_se(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the mean (sample standard deviation / sqrt(n); 0 for one value)."""
    values = np.asarray(values, np.float64)
    if len(values) < 2:
        return (float(values.mean()) if len(values) else float("nan")), 0.0
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values)))


def paired_difference(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and SE of a_i - b_i: two arms measured on the same seeds or instances, in the same order (what both
    get right or both miss cancels)."""
    if len(a) != len(b):
        raise ValueError(f"a paired difference needs the same seeds on both arms, got {len(a)} and {len(b)} runs")
    return mean_and_se(np.asarray(a, np.float64) - np.asarray(b, np.float64))
