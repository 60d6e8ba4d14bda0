"""Continued pretraining's defaults: what `--init-from` changes in a run's settings that the user left unset.

In:  the TrainConfig of the flags, the names of the flags the user gave (`given`, TrainConfig field names, nested
     ones dotted: "masking.mask_prob"), and the run's Source (or, when the run resumes, its recorded config): its
     masking and its learning rate (trainer/start/rate.py: what the source's own training used, else a rule by
     width).
Out: the TrainConfig to train with, and the lines start-up prints: the rate and why, then the masking taken.
     Without --init-from it is the flags' config with `model` defaulting to tiny.

Why each default (the from-scratch defaults are trainer/config.py's):
  lr             the source's own training rate where its run or export records it, else 1e-4 x 768 / width
                 (BERT-base's 1e-4, scaled µP-style): trainer/start/rate.py. It used to be 1e-4 for every size,
                 which moved the demo's 128-wide model's man-page MLM accuracy from 0.212 to 0.226 in 1,000
                 steps where 1e-3 reached 0.344 (trainer/start/README.md). "Don't Stop Pretraining" (Gururangan
                 et al. 2020; allenai/dont-stop-pretraining, ADAPTIVE_PRETRAINING.md) continued RoBERTa-base at
                 1e-4 (TAPT) and 5e-4 (DAPT), against the 6e-4 it pretrained at.
  warmup         the from-scratch 6% of the steps (RoBERTa's), no longer BERT's 1%: the optimizer state starts
                 fresh, and the run now starts at the source's own peak rate. Measured on man pages, 1,500 steps
                 (trainer/start/README.md): 1% and 6% ended alike on tiny at 3e-3 and mini at 1e-3, so the
                 longer one, safe for a fresh Adam state at a full rate, costs nothing measurable.
  masking        the source's: a clozeforge run's recorded masking (strategy, rate, 80/10/10); for a HuggingFace
                 directory of any family, BERT's (15%, 80/10/10; RoBERTa, XLM-R and XLM masked alike), which is
                 the default and also what DAPT's script used.
  model          the source's shape (hidden, layers, heads, ffn, positions, vocabulary, eps); a --model or
                 --pre-layernorm that disagrees is refused.
"""

from __future__ import annotations

import dataclasses

from trainer.config import TrainConfig, TrainError
from trainer.masking import MaskingConfig
from trainer.model import ModelConfig
from trainer.start.rate import Rate


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
    """The config with continued pretraining's --lr (`rate`) and masking (`masking`: the source's recorded masking, if
    any) where the user did not give them; and the lines to print: the rate and why, then the masking taken."""
    if "lr" in given:
        rate = Rate(config.lr, "given (--lr)")
    changes: dict[str, object] = {"lr": rate.value}
    lines = [rate.line()]
    if masking and not any(name.startswith("masking.") for name in given):
        try:
            changes["masking"] = MaskingConfig.from_dict(masking, "the source's masking")
        except ValueError as e:
            raise TrainError(f"--init-from {config.init_from}: {e}") from None
        lines.append(f"masking {changes['masking'].strategy} {changes['masking'].mask_prob:g} (the source's)")
    return dataclasses.replace(config, **changes), lines
