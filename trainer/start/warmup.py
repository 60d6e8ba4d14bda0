"""The heads' warm-up: an --init-from run whose source lacks a head it trains (a bare encoder's or a
sentence-transformers model's MLM head) first trains the fresh parts alone, the source's weights held, then the
whole model.

In:  the run's TrainConfig, the parts the source lacked (trainer/start/sources.py `Source.lacking`, the part names
     of the network's row of trainer/model/__init__.py PARTS), the network's ModelConfig.
Out: a HeadWarmup (its steps, the fresh parameters' name prefixes) or None; `lr_factors`, the schedule's factor of
     each optimizer group (held groups 0 during the warm-up). The steps and prefixes are recorded in
     RUN/train_config.json (`init_fresh`), so a resume rebuilds the same groups and continues the same warm-up
     without the source.

How it holds the source's weights: by its parameter groups' rate, not by requires_grad. The optimizer is built
with the held parameters in groups of their own (trainer/optim.py `parameter_groups(..., held=...)`), whose rate
factor is 0 until the warm-up ends: AdamW then moves them by 0 x update and decays them by 1 - 0 x wd, which leaves
every bit as it was (tests/trainer/test_head_warmup.py, ZeRO 0 on one rank and ZeRO 2 on two), while DeepSpeed's
ZeRO partitions, which are laid out once at start from the parameters that require a gradient, stay the same for
the whole run and across a resume. The gradients still flow through the encoder (no compute saved) and count in the
clipping norm; Adam's moments of the held weights fill during the warm-up, so the first updates after it are not
a cold start.

After the warm-up the held groups take the run's schedule shifted to begin there: a linear warmup over --warmup
steps from the end of the heads' warm-up, then the run's decay to --max-steps. The fresh groups follow the run's
schedule from step 0. Why: a random head's gradients flow into a pretrained encoder from the first step
(Kumar et al. 2022, "Fine-Tuning can Distort Pretrained Features"; their LP-FT trains the head first).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

DEFAULT_STEPS, DEFAULT_FRACTION = 100, 0.1
"""--head-warmup-steps unset: 10% of --max-steps, at most 100: LP-FT's head-first order at a small share of the run.
Against none, MiniLM on the demo's documentation ended level in held-out MLM accuracy after 200 steps (0.219 and 0.217,
SE 0.006); its downstream effect is not yet measured (experiments/README.md "Issue 60")."""
TRAINED_BY: dict[str, Callable] = {
    "pooler": lambda c: c.nsp_weight > 0,
    "MLM head": lambda c: c.mlm_weight > 0,
    "NSP head": lambda c: c.nsp_weight > 0,
    "SBO head": lambda c: c.use_sbo and c.sbo_weight > 0,
    "own heads": lambda c: True,
    "discriminator head": lambda c: True,
    "generator": lambda c: True,
}
"""Whether the run's losses train a part (by its name in the parts tables): a fresh part nothing trains (a
BertForMaskedLM's pooler on rows without NSP) asks for no warm-up."""
RECORD_KEY = "init_fresh"
"""The key of RUN/train_config.json holding the warm-up's steps and fresh parameters' prefixes (None: none)."""


@dataclasses.dataclass(frozen=True)
class HeadWarmup:
    steps: int
    fresh: tuple[str, ...]
    """Name prefixes of the parameters that start fresh; every other parameter is held during the warm-up."""

    def held(self, name: str) -> bool:
        return not name.startswith(self.fresh)

    def line(self, parts: list[str]) -> str:
        return (f"head warm-up: the first {self.steps} steps train only the fresh {', '.join(parts)} with the source's "
                "weights held (their rate 0); then everything, on the schedule (--head-warmup-steps)")


def part_prefixes(model_config) -> dict[str, tuple[str, ...]]:
    """The parts table of the run's network (trainer/model/__init__.py PARTS): part name -> its parameters' prefixes."""
    from trainer.model import PARTS

    return PARTS[model_config.network]


def steps_for(config) -> int:
    """--head-warmup-steps, or the default for this run's length."""
    if config.head_warmup_steps is not None:
        return config.head_warmup_steps
    return min(DEFAULT_STEPS, int(DEFAULT_FRACTION * config.max_steps))


def plan(config, lacking: list[str], model_config) -> tuple[HeadWarmup | None, list[str]]:
    """(the warm-up of a new --init-from run whose source lacked `lacking`, or None; the trained fresh parts)."""
    trained = [part for part in lacking if TRAINED_BY.get(part, lambda c: True)(model_config)]
    steps = steps_for(config)
    if not trained or steps == 0:
        return None, trained
    prefixes = part_prefixes(model_config)
    return HeadWarmup(steps, tuple(p for part in lacking for p in prefixes[part])), trained


def recorded(record: dict | None) -> HeadWarmup | None:
    """A resumed run's warm-up, as its RUN/train_config.json recorded it (its steps and fresh prefixes, whatever
    the flags of the resume say: the optimizer's groups must be the ones its checkpoint saved)."""
    return HeadWarmup(int(record["steps"]), tuple(record["fresh"])) if record else None


def lr_factors(base: Callable[[int], float], config, warmup: HeadWarmup | None, groups: list[dict]) -> list[Callable[[int], float]]:
    """The factor of each optimizer group at each step: `base` for the fresh groups (and for all without a warm-up);
    for the held groups (`group["held"]`) 0 during the warm-up, then `base`'s shape begun at its end."""
    if warmup is None:
        return [base for _ in groups]
    start, ramp = warmup.steps, max(1, config.warmup)
    span = max(1, config.max_steps - start - ramp)

    def held(step: int) -> float:
        if step < start:
            return 0.0
        if step - start < ramp:
            return (step - start + 1) / ramp
        if config.schedule == "constant":
            return 1.0
        remaining = max(0.0, 1.0 - (step - start - ramp) / span)
        return remaining if config.schedule == "linear" else remaining**0.5

    return [held if group.get("held") else base for group in groups]


def record(run_dir: str, warmup: HeadWarmup | None) -> None:
    """Add the fresh prefixes to RUN/train_config.json (rank 0; replaced whole, as trainer/checkpoint/resume.py
    writes it), so that a resume holds the same weights for the rest of the warm-up without reading the source."""
    import json
    import os

    from trainer.checkpoint.resume import RECORD

    path = os.path.join(run_dir, RECORD)
    with open(path) as f:
        body = json.load(f)
    body[RECORD_KEY] = {"steps": warmup.steps, "fresh": list(warmup.fresh)} if warmup else None
    with open(path + ".tmp", "w") as f:
        json.dump(body, f, indent=2)
    os.replace(path + ".tmp", path)
