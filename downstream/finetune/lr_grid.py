"""Learning-rate grids and their search: where each arm's grid starts, and how it grows while its best rate sits at
an edge, so that neither arm is judged at a rate it would not have chosen.

In:  the arm's width (hidden size), whether it starts from random weights, and after each round of runs the mean
     validation score of every rate tried so far.
Out: `start` → the three rates an arm's default grid starts with; `Search.next` → the rates to try next (none when
     the best rate is inside the grid, or the budget or the ladder is spent); `Search.record` → what results.json
     says of the search (each round's rates and choice, and whether the choice still sits at an edge).

The ladder is 1 and 3 times each power of ten (steps of about √10, the half-decade grid of the demo and of most
published sweeps). A default grid is three rungs centred on the rung nearest BERT-base's 3e-5 scaled by
768 / hidden (small models want larger steps: Turc et al. 2019 tune their 2-12 layer BERTs up to 1e-4): the demo's
128-wide model starts at {1e-4, 3e-4, 1e-3}, BERT-base at {1e-5, 3e-5, 1e-4}. A model from random weights starts one
rung higher (it wants larger steps), and both grids then grow by the same rule: while the best mean validation
score sits at the lowest (highest) rate, strictly above every other, the next rung below (above) is tried, up to
a budget of added rates per arm. A tie keeps the grid: a plateau gives no direction, and the lower rate of a tie
is the one chosen (protocol.select). Before this rule the pretrained arm got BERT's grid capped at 1e-3 and scratch
a wider one: a 4M-parameter model whose best rate lay above 3e-4 was judged at 3e-4 (issue 46: "gain" −45 points
on a classification task where both arms, each at its own best rate, were within a few points).
"""

from __future__ import annotations

import dataclasses
import math

from downstream.finetune.protocol import select

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
