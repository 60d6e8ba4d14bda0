"""The comparison protocol: each arm's learning-rate grid and its search, which rate and which run an arm reports,
and what a gain is worth.

In:  per arm (the pretrained model, each checkpoint of a sweep, the baseline) its width and whether it starts from
     random weights (its grid), then the runs of its grid: for each learning rate, one run per seed 0..N-1 with its
     validation score and its score and predictions on the scored split (test when given, else validation); the
     task (its metric and per-example statistics).
Out: `start` → the three rates an arm's default grid starts with; `Search.next` → the rates to try next while its
     best rate sits at an edge (none when it is inside the grid, or the budget or the ladder is spent);
     `Search.record` → what results.json says of the search (each round's rates and choice, and whether the choice
     still sits at an edge);
     `select` → each lr's mean ± SE of the selection metric on validation over seeds, and the chosen lr (the
     highest mean; on a tie the rate furthest from the grid's ends, then the lowest); `best_seed` → the run
     model/ is saved from: the chosen lr's best seed by validation, never a run of another lr; `gain` → the gain
     of one arm over another:
       - the PAIRED per-seed difference: seed s of both arms shares its batch order (and, between two
         pretrained models, the head's initialisation), so d_s = a_s - b_s and the gain is mean(d) ± sd(d)/√n,
         which drops the variation the two arms share (the unpaired √(SE_a² + SE_b²) counts it twice);
       - a bootstrap 95% interval over the scored split's examples: resample the examples with replacement
         (a fixed seed, the same draw for both arms), score each arm's predictions of every seed on the draw,
         average over seeds, and take the 2.5 and 97.5 percentiles of the difference. It says how much the
         gain could move on another test set of the same size, which the seed SE does not see.
Scores are points (x 100). When the gain is within its SE, `gain` says so and the command prints one warning.

The grids. The ladder is 1 and 3 times each power of ten (steps of about √10, the half-decade grid of the demo and
of most published sweeps). A default grid is three rungs centred on the rung nearest BERT-base's 3e-5 scaled by
768 / hidden (small models want larger steps: Turc et al. 2019 tune their 2-12 layer BERTs up to 1e-4): the demo's
128-wide model starts at {1e-4, 3e-4, 1e-3}, BERT-base at {1e-5, 3e-5, 1e-4}. A model from random weights starts one
rung higher (it wants larger steps), and both grids then grow by the same rule: while the best mean validation
score sits at the lowest (highest) rate, strictly above every other, the next rung below (above) is tried, up to
a budget of added rates per arm. A tie keeps the grid: a plateau gives no direction, and of the tied rates the one
furthest inside the grid is chosen, then the lower (`select`): a rate at an edge is chosen only when it is strictly
best, and then the grid grows past it or results.json says why not (`at_edge`). Before this rule the pretrained
arm got BERT's grid capped at 1e-3 and scratch a wider one: a 4M-parameter model whose best rate lay above 3e-4
was judged at 3e-4 (issue 46: "gain" −45 points on a classification task where both arms, each at its own best
rate, were within a few points).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from downstream.finetune.tasks.base import draw_sums
from downstream.stats import mean_and_se, paired_difference  # noqa: F401  (mean_and_se: protocol.mean_and_se)

BOOTSTRAP_SEED = 0
BOOTSTRAP_CHUNK = 100
"""Resamples drawn at once (a (chunk, examples) index array): bounded memory on a large test split."""


# -- which rate and which run an arm reports ------------------------------------------------------------------

def select(per_lr: dict[float, Sequence[float]]) -> tuple[float, dict[float, tuple[float, float]]]:
    """(chosen lr, {lr: (mean, SE)}) from each lr's validation scores over seeds: the best mean; on a tie (equal
    means, as small validation splits give), the rate furthest from the grid's ends, then the lowest: a tied edge
    was never searched past, as `Search` grows a grid only past a strictly best edge."""
    table = {lr: mean_and_se(scores) for lr, scores in per_lr.items()}
    rates = sorted(table)
    top = max(mean for mean, _ in table.values())
    tied = [i for i, lr in enumerate(rates) if math.isclose(table[lr][0], top, rel_tol=1e-9, abs_tol=1e-12)]
    inner = max(tied, key=lambda i: (min(i, len(rates) - 1 - i), -i))
    return rates[inner], table


def best_seed(validation_scores: Sequence[float]) -> int:
    """Index of the best run of the chosen lr (the first on a tie)."""
    return int(np.argmax(validation_scores))


# -- each arm's grid, and how it grows -----------------------------------------------------------------------------

LADDER: tuple[float, ...] = tuple(float(f"{m}e{e}") for e in range(-7, 1) for m in (1, 3))[:-1]
"""The rates a default grid and every extension are drawn from: 1e-7, 3e-7, ..., 3e-1, 1."""
BERT_BASE_CENTRE = 3e-5
"""The middle of BERT's {2e-5, 3e-5, 5e-5} (Devlin et al. 2019, appendix A.3), for a 768-wide model."""
DEFAULT_EXTEND = 4
"""Rates a default grid may add (each side's extension counts one)."""


def nearest(rate: float) -> int:
    """Index of the ladder rung nearest `rate` on a log scale."""
    return min(range(len(LADDER)), key=lambda i: abs(math.log(LADDER[i] / rate)))


def start(hidden_size: int, *, from_scratch: bool = False) -> tuple[float, ...]:
    """Three rungs centred on BERT-base's rate x 768 / hidden (one rung higher from random weights)."""
    centre = nearest(BERT_BASE_CENTRE * 768 / hidden_size) + int(from_scratch)
    centre = min(max(centre, 1), len(LADDER) - 2)
    return LADDER[centre - 1:centre + 2]


def below(rate: float) -> float | None:
    """The highest rung under `rate` (None under the ladder's lowest)."""
    return next((r for r in reversed(LADDER) if r < rate * (1 - 1e-9)), None)


def above(rate: float) -> float | None:
    """The lowest rung over `rate` (None over the ladder's highest)."""
    return next((r for r in LADDER if r > rate * (1 + 1e-9)), None)


@dataclasses.dataclass
class Search:
    """One arm's grid as it grows: `next` after each round of runs (every seed of every new rate)."""

    start: tuple[float, ...]
    budget: int
    """Rates it may still add."""
    rounds: list[dict] = dataclasses.field(default_factory=list)
    stopped: str = ""
    """Why the grid stopped growing while its best rate sat at an edge ("budget", "ladder"), or ""."""

    def next(self, means: dict[float, float]) -> list[float]:
        """The rates to try next, given every rate's mean validation score so far (see the module docstring)."""
        rates = sorted(means)
        chosen, _ = select({r: [means[r]] for r in rates})
        others = [means[r] for r in rates if r != chosen]
        strictly = all(means[chosen] > m for m in others)
        wanted = []
        if len(rates) == 1:  # one rate is no evidence either way: it grows both ways if it may, and warns of nothing
            wanted = [below(chosen), above(chosen)] if self.budget else []
        elif strictly and chosen == rates[0]:
            wanted = [below(chosen)]
        elif strictly and chosen == rates[-1]:
            wanted = [above(chosen)]
        add = [r for r in wanted if r is not None][:self.budget]
        self.stopped = "" if add or not wanted else ("ladder" if all(r is None for r in wanted) else "budget")
        self.budget -= len(add)
        self.rounds.append({"lrs": rates, "chosen": chosen, "added": add})
        return add

    def record(self) -> dict:
        """What results.json keeps of the search: where it started, each round, and whether its choice is at an edge
        it could not pass ("budget": no rate left to add; "ladder": past the ladder's end)."""
        return {"start": list(self.start), "rounds": self.rounds, "at_edge": self.stopped or None}


# -- what a gain is worth -----------------------------------------------------------------------------------------

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
