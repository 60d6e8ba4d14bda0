"""Continued pretraining's defaults: what `--init-from` changes in a run's settings that the user left unset.

In:  the TrainConfig of the flags, the names of the flags the user gave (`given`, TrainConfig field names, nested
     ones dotted: "masking.mask_prob"), and the run's Source (or, when the run resumes, its recorded config).
Out: the TrainConfig to train with. Without --init-from it is the flags' config with `model` defaulting to tiny.

Why each default (the from-scratch defaults are trainer/config.py's):
  lr 1e-4        a tenth of the from-scratch 1e-3: the weights are already good, and a large step undoes them.
                 BERT itself pretrained at 1e-4 (batch 256), and "Don't Stop Pretraining" (Gururangan et al.
                 2020; allenai/dont-stop-pretraining, ADAPTIVE_PRETRAINING.md) continued RoBERTa at 1e-4 for
                 task-adaptive (batch 256) and 5e-4 for domain-adaptive pretraining (batch 2,048, 12.5K steps).
  warmup 1%      the weights need no long warmup out of a random start; BERT warmed up over its first 10,000 of
                 1M steps (1%), where the from-scratch default here is RoBERTa's 6%.
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

CONTINUED: dict[str, tuple[object, str]] = {
    "lr": (1e-4, "BERT's rate; DAPT/TAPT's 1e-4-5e-4"),
    "warmup_ratio": (0.01, "BERT's 10k of 1M steps"),
}
"""The settings --init-from changes when the user left them unset: value, and the short reason printed."""


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


def with_defaults(config: TrainConfig, given: set[str], masking: dict | None) -> tuple[TrainConfig, list[str]]:
    """The config with continued pretraining's defaults for every setting in CONTINUED (and the masking) the
    user did not give; and one note per default applied. `masking`: the source's recorded masking, if any."""
    changes: dict[str, object] = {}
    notes = []
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
    return dataclasses.replace(config, **changes), notes
