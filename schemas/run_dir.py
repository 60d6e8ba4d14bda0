"""A training run's directory as every command reads it: where its checkpoints are and which one is complete.

In:  a RUN directory written by `clozeforge train` (local path).
Out: the names of its parts, and `latest_tag` / `latest_step` / `checkpoint_tags`, read with the standard library
     alone, so the demo (no torch), the trainer, export and fine-tuning agree on one layout:

    RUN/checkpoints/step_<8-digit step>/   one resumable checkpoint (trainer/checkpoint/store.py writes it)
    RUN/checkpoints/latest                 the tag of the newest complete checkpoint, replaced only once it is whole
    RUN/train_config.json                  the run's settings, the record a resume is checked against
    RUN/vocab/                             a copy of the data's vocabulary, so export needs nothing else
"""

from __future__ import annotations

import os
import re

CHECKPOINTS = "checkpoints"
LATEST = "latest"
TRAIN_CONFIG = "train_config.json"
VOCAB = "vocab"
_TAG = re.compile(r"^step_(\d{8})$")


def tag_for(step: int) -> str:
    return f"step_{step:08d}"


def step_of(tag: str) -> int | None:
    """The step a checkpoint tag names, or None for a name that is not a tag (`latest`, `step_X.damaged`)."""
    found = _TAG.match(tag)
    return int(found.group(1)) if found else None


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, CHECKPOINTS)


def checkpoint_tags(run_dir: str) -> list[str]:
    """Every checkpoint folder of the run, oldest first (complete or not: `latest_tag` says which is)."""
    try:
        names = os.listdir(checkpoint_dir(run_dir))
    except OSError:
        return []
    return sorted(n for n in names if step_of(n) is not None)


def latest_tag(run_dir: str) -> str | None:
    """The tag `latest` names, when it is a tag and its folder is there; None for a run with no complete checkpoint."""
    try:
        with open(os.path.join(checkpoint_dir(run_dir), LATEST)) as f:
            tag = f.read().strip()
    except OSError:
        return None
    return tag if step_of(tag) is not None and os.path.isdir(os.path.join(checkpoint_dir(run_dir), tag)) else None


def latest_step(run_dir: str) -> int | None:
    tag = latest_tag(run_dir)
    return None if tag is None else step_of(tag)
