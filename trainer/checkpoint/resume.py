"""The run directory before training starts: what a checkpoint may be resumed under, and what a run records.

In:  the TrainConfig, the manifest of --data, the Runtime.
Out: `recorded`: RUN/train_config.json when RUN has a checkpoint to resume (None for a new run);
     `prepare_run_dir`: a one-line TrainError when the checkpoint was saved under settings that
     trainer/config.py's RESUME_RULES do not let change; otherwise (rank 0) RUN/vocab/ (a copy of the data's
     vocabulary, checked first) and RUN/train_config.json, the record the next resume is checked against;
     `trained_seq_len`: the longest pair length the run has trained on so far, which every checkpoint records
     (export writes it as the tokenizer's model_max_length).
"""

from __future__ import annotations

import json
import os
from typing import Any

from schemas import Manifest
from schemas import vocab as vocab_files
from trainer.checkpoint import store
from trainer.config import TrainConfig, TrainError, resume_refusal
from trainer.run.runtime import Runtime

RECORD = "train_config.json"


def recorded(run_dir: str) -> dict | None:
    """RUN/train_config.json when RUN has a checkpoint to resume (None for a new run)."""
    if store.latest_tag(run_dir) is None:
        return None
    path = os.path.join(run_dir, RECORD)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        raise TrainError(f"{path}: missing or unreadable, so the checkpoint beside it cannot be resumed safely") from None


def record(config: TrainConfig, manifest: Manifest, rt: Runtime) -> dict[str, Any]:
    """What RUN/train_config.json holds: the settings, and the data and world size they ran on."""
    return {**config.to_dict(), "data_fingerprint": manifest.fingerprint, "world_size": rt.world_size}


def prepare_run_dir(config: TrainConfig, manifest: Manifest, rt: Runtime, extra: dict[str, Any] | None = None) -> None:
    """Refuse a resume the rules forbid; then (rank 0) RUN/vocab/ and RUN/train_config.json, with `extra` keys beside
    the settings (an --init-from run's architecture: trainer/start/steps.py)."""
    before = recorded(config.output)
    if before is not None and (refusal := resume_refusal(config.output, before, record(config, manifest, rt))):
        raise TrainError(refusal)
    if rt.world_size > 1:  # every rank has read the earlier train_config.json (here and in elastic.resolve)
        import torch.distributed as dist

        dist.barrier()
    if rt.rank == 0:
        os.makedirs(config.output, exist_ok=True)
        vocab_files.copy_directory(manifest.vocab_directory, os.path.join(config.output, "vocab"),
                                   sha256=manifest.vocab["sha256"], size=manifest.vocab["size"])
        path = os.path.join(config.output, RECORD)
        with open(path + ".tmp", "w") as f:  # replaced whole: a reader never sees half of it
            json.dump({**record(config, manifest, rt), **(extra or {})}, f, indent=2)
        os.replace(path + ".tmp", path)


def trained_seq_len(config: TrainConfig, manifest: Manifest, phase: Any) -> int:
    """The longest sequence length of the data trained on up to `phase` (trainer.builders.Phase): phase 1's pairs
    (each --mix component's), then phase 2's once it has begun. Positions beyond it were never updated by
    pretraining, whatever max_position_embeddings the architecture holds."""
    lengths = []
    if phase.number == 1 or config.phase2_begins > 0:  # phase 2 from step 0 means phase 1 never ran
        components = getattr(phase.train, "components", None) if phase.number == 1 else None
        lengths += [c.manifest.max_seq_len for c in components] if components else [manifest.max_seq_len]
    if phase.number == 2:
        lengths.append(phase.manifest.max_seq_len)
    return max(lengths)
