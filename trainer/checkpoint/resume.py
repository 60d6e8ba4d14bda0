"""The run directory before training starts: what a checkpoint may be resumed under, and what a run records.

In:  the TrainConfig, the manifest of --data, the Runtime.
Out: a one-line TrainError when the latest checkpoint was saved under settings this run does not share;
     otherwise (rank 0) RUN/vocab/ (a copy of the data's vocabulary, checked first) and RUN/train_config.json.
"""

from __future__ import annotations

import json
import os

from schemas import Manifest
from schemas import vocab as vocab_files
from trainer.checkpoint import store
from trainer.config import TrainConfig, TrainError
from trainer.run.runtime import Runtime

# What a checkpoint cannot be resumed under when it changes: the shapes of the weights, the ZeRO stage, and
# the meaning of the saved data position. The number of ranks and --batch-size may change (trainer/checkpoint/elastic.py
# keeps the global batch and the data partitions, and converts ZeRO partitions to the new world size).
_RESUME_KEYS = {
    "model": "--model", "pre_layernorm": "--pre-layernorm", "zero_stage": "--zero-stage",
    "data_fingerprint": "--data (its shards or vocabulary)",
}


def check_resumable(config: TrainConfig, manifest: Manifest, rt: Runtime) -> None:
    """Refuse, in one line, to resume a run's checkpoint under settings it was not saved with."""
    if store.latest_tag(config.output) is None:
        return
    path = os.path.join(config.output, "train_config.json")
    try:
        with open(path) as f:
            before = json.load(f)
    except (OSError, ValueError):
        raise TrainError(f"{path}: missing or unreadable, so the checkpoint beside it cannot be resumed safely") from None
    now = {**config.to_dict(), "data_fingerprint": manifest.fingerprint, "world_size": rt.world_size}
    before_span = before.get("masking", {}).get("strategy") == "span"
    if before_span != (config.masking.strategy == "span"):
        raise TrainError(f"{config.output}: its checkpoint was trained {'with' if before_span else 'without'} span masking's SBO head; "
                         "resume with the same --masking family or use a new --output")
    for key, flag in _RESUME_KEYS.items():
        if key in before and before[key] != now[key]:
            raise TrainError(f"{config.output}: its checkpoint was saved with {key}={before[key]!r}, this run has {now[key]!r}; "
                             f"resume with the same {flag} or use a new --output")


def prepare_run_dir(config: TrainConfig, manifest: Manifest, rt: Runtime) -> None:
    check_resumable(config, manifest, rt)
    if rt.world_size > 1:  # every rank has read the earlier train_config.json (here and in elastic.resolve)
        import torch.distributed as dist

        dist.barrier()
    if rt.rank == 0:
        os.makedirs(config.output, exist_ok=True)
        vocab_files.copy_directory(manifest.vocab_directory, os.path.join(config.output, "vocab"),
                                   sha256=manifest.vocab["sha256"], size=manifest.vocab["size"])
        path = os.path.join(config.output, "train_config.json")
        with open(path + ".tmp", "w") as f:  # replaced whole: a reader never sees half of it
            json.dump({**config.to_dict(), "data_fingerprint": manifest.fingerprint, "world_size": rt.world_size}, f, indent=2)
        os.replace(path + ".tmp", path)


