"""Continued pretraining's defaults: what `--init-from` changes in a run's settings that the user left unset.

In:  the TrainConfig of the flags, the names of the flags the user gave (`given`, TrainConfig field names, nested
     ones dotted: "masking.mask_prob"), and the run's Source (or, when the run resumes, its recorded config): its
     masking and its learning rate (trainer/start/rate.py: what the source's own training used, else a rule by
     width).
Out: the TrainConfig to train with, and the lines start-up prints: the rate and why, then the other defaults
     applied. Without --init-from it is the flags' config with `model` defaulting to tiny.

Why each default (the from-scratch defaults are trainer/config.py's):
  lr             the source's own training rate where its run or export records it, else 1e-4 x 768 / width
                 (BERT-base's 1e-4, scaled µP-style): trainer/start/rate.py. It used to be 1e-4 for every size,
                 which moved the demo's 128-wide model's man-page MLM accuracy from 0.212 to 0.226 in 1,000
                 steps where 1e-3 reached 0.344 (trainer/start/README.md). "Don't Stop Pretraining" (Gururangan
                 et al. 2020; allenai/dont-stop-pretraining, ADAPTIVE_PRETRAINING.md) continued RoBERTa-base at
                 1e-4 (TAPT) and 5e-4 (DAPT), against the 6e-4 it pretrained at.
  warmup         WARMUP_NOTE
  masking        the source's: a clozeforge run's recorded masking (strategy, rate, 80/10/10); for a HuggingFace
                 BERT, BERT's own (15%, 80/10/10), which is the default and also what DAPT's script used.
  model          the source's shape (hidden, layers, heads, ffn, positions, vocabulary, eps); a --model or
                 --pre-layernorm that disagrees is refused.
"""

from __future__ import annotations

import dataclasses

from trainer.config import TrainConfig, TrainError
from trainer.masking import MaskingConfig
from trainer.model import ModelConfig
from trainer.start.rate import Rate

CONTINUED: dict[str, tuple[object, str]] = {
    "warmup_ratio": (0.06, "TODO"),
}
"""The settings besides the rate that --init-from changes when the user left them unset: value, and the reason
printed."""


def _architecture_of_preset(name: str, vocab_size: int) -> dict:
    preset = ModelConfig.preset(name, vocab_size=vocab_size)
    return {k: getattr(preset, k) for k in ("hidden_size", "num_layers", "num_heads", "intermediate_size")}


def agreement(config: TrainConfig, architecture: dict) -> str | None:
    """Why --model or --pre-layernorm disagrees with the source's architecture, or None."""
    if config.model is not None:
        preset = _architecture_of_preset(config.model, architecture["vocab_size"])
        differs = {k: (v, architecture[k]) for k, v in preset.items() if architecture[k] != v}
        if differs:
            said = ", ".join(f"{k} {a} (--model {config.model}) vs {b}" for k, (a, b) in differs.items())
            return f"--model {config.model} disagrees with --init-from {config.init_from}: {said}; leave --model out to take the source's shape"
    if config.pre_layernorm and not architecture.get("pre_layernorm", False):
        return f"--pre-layernorm disagrees with --init-from {config.init_from}, whose layers are post-LayerNorm; leave it out"
    return None


def with_defaults(config: TrainConfig, given: set[str], masking: dict | None, rate: Rate) -> tuple[TrainConfig, list[str]]:
    """The config with continued pretraining's defaults for --lr (`rate`), every setting in CONTINUED and the masking
    (`masking`: the source's recorded masking, if any) that the user did not give; and the lines to print: the
    rate and why, then the defaults applied."""
    changes: dict[str, object] = {}
    notes = []
    if "lr" in given:
        rate = Rate(config.lr, "given (--lr)")
    changes["lr"] = rate.value
    for field, (value, why) in CONTINUED.items():
        if field not in given and not (field == "warmup_ratio" and "warmup_steps" in given):
            changes[field] = value
            notes.append(f"{field} {value} ({why})")
    if masking and not any(name.startswith("masking.") for name in given):
        try:
            changes["masking"] = MaskingConfig.from_dict(masking, "the source's masking")
        except ValueError as e:
            raise TrainError(f"--init-from {config.init_from}: {e}") from None
        notes.append(f"masking {changes['masking'].strategy} {changes['masking'].mask_prob:g} (the source's)")
    lines = [rate.line()] + ([f"continued pretraining's defaults: {', '.join(notes)}"] if notes else [])
    return dataclasses.replace(config, **changes), lines
