"""Selection and statistics: which learning rate an arm reports, which run model/ holds, and what a gain is worth.

In:  per arm (the pretrained model, each checkpoint of a sweep, the baseline), the runs of its grid: for each
     learning rate, one run per seed 0..N-1 with its validation score and its score and predictions on the
     scored split (test when given, else validation); the task (its metric and per-example statistics).
Out: `select` → each lr's mean ± SE of the selection metric on validation over seeds, and the chosen lr (the
     highest mean; the first in the given order on a tie, which job.py makes the lowest lr; lr_grid.py grows the
     grid while the chosen lr sits at an edge); `best_seed` → the run model/ is saved from: the chosen lr's best
     seed by validation, never a run of another lr; `gain` → the gain of one arm over another:
       - the PAIRED per-seed difference: seed s of both arms shares its batch order (and, between two
         pretrained models, the head's initialisation), so d_s = a_s - b_s and the gain is mean(d) ± sd(d)/√n,
         which drops the variation the two arms share (the unpaired √(SE_a² + SE_b²) counts it twice);
       - a bootstrap 95% interval over the scored split's examples: resample the examples with replacement
         (a fixed seed, the same draw for both arms), score each arm's predictions of every seed on the draw,
         average over seeds, and take the 2.5 and 97.5 percentiles of the difference. It says how much the
         gain could move on another test set of the same size, which the seed SE does not see.
Scores are points (x 100). When the gain is within its SE, `gain` says so and the command prints one warning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from downstream.finetune.metrics import mean_and_se
from downstream.finetune.tasks.base import draw_sums

BOOTSTRAP_SEED = 0
BOOTSTRAP_CHUNK = 100
"""Resamples drawn at once (a (chunk, examples) index array): bounded memory on a large test split."""


def select(per_lr: dict[float, Sequence[float]]) -> tuple[float, dict[float, tuple[float, float]]]:
    """(chosen lr, {lr: (mean, SE)}) from each lr's validation scores over seeds."""
    table = {lr: mean_and_se(scores) for lr, scores in per_lr.items()}
    chosen = max(table, key=lambda lr: (table[lr][0], -list(table).index(lr)))
    return chosen, table


def best_seed(validation_scores: Sequence[float]) -> int:
    """Index of the best run of the chosen lr (the first on a tie)."""
    return int(np.argmax(validation_scores))


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean and SE of a_s - b_s over seeds s (both arms ran the same seeds, in the same order)."""
    if len(a) != len(b):
        raise ValueError(f"paired difference needs the same seeds on both arms, got {len(a)} and {len(b)} runs")
    return mean_and_se(np.asarray(a, np.float64) - np.asarray(b, np.float64))


Resampled = Callable[[np.ndarray], np.ndarray]
"""(draws (b, n) example indices) → (b,) the arm's metric on each draw, averaged over its seeds."""


def resampled_metric(task, gold: list, predictions: Sequence[list]) -> Resampled:
    """An arm's metric on resampled examples, from its per-seed predictions. When the task's metric is a
    function of per-example sums (accuracy, token F1, micro entity F1), the draws sum precomputed statistics;
    otherwise (MCC, Pearson, ...) the metric is recomputed on every draw."""
    fast = [task.stats(gold, p) for p in predictions]
    if all(s is not None for s in fast):
        def metric(draws: np.ndarray) -> np.ndarray:
            return np.mean([finish(draw_sums(stats, draws)) for stats, finish in fast], axis=0)
        return metric

    def recompute(draws: np.ndarray) -> np.ndarray:
        return np.array([np.mean([task.score([gold[i] for i in row], [p[i] for i in row])["score"] for p in predictions])
                         for row in draws])
    return recompute


def bootstrap_interval(n: int, a: Resampled, b: Resampled, *, resamples: int, seed: int = BOOTSTRAP_SEED,
                       level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of a - b over `resamples` draws of n examples with replacement."""
    rng = np.random.default_rng(seed)
    differences = []
    for start in range(0, resamples, BOOTSTRAP_CHUNK):
        draws = rng.integers(0, n, size=(min(BOOTSTRAP_CHUNK, resamples - start), n))
        differences.append(a(draws) - b(draws))
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(np.concatenate(differences), [tail, 100 - tail])
    return float(lo), float(hi)


def gain(task, gold: list, a_scores: Sequence[float], a_predictions: Sequence[list], b_scores: Sequence[float],
         b_predictions: Sequence[list], *, resamples: int, split: str) -> dict:
    """The gain of arm a over arm b, in points: {mean, se, per_seed, bootstrap, ...} (see the module docstring)."""
    mean, se = paired_difference(a_scores, b_scores)
    out = {"mean": round(mean, 4), "se": round(se, 4), "paired_seeds": len(a_scores),
           "per_seed": [round(x - y, 4) for x, y in zip(a_scores, b_scores)],
           "within_se": abs(mean) <= se}
    if resamples > 0:
        lo, hi = bootstrap_interval(len(gold), resampled_metric(task, gold, a_predictions),
                                    resampled_metric(task, gold, b_predictions), resamples=resamples)
        out.update(bootstrap=[round(100 * lo, 4), round(100 * hi, 4)], bootstrap_resamples=resamples,
                   bootstrap_seed=BOOTSTRAP_SEED, bootstrap_split=split, bootstrap_examples=len(gold))
    return out
