"""Checkpoints of a run: DeepSpeed's resumable state plus clozeforge's own, and the consolidated weights.

In:  a DeepSpeed engine and the client state (step, data position, configs) at save time; a run directory
     at load or export time.
Out: RUN/checkpoints/step_<8-digit step>/ (DeepSpeed files: model, optimizer and scheduler, per ZeRO partition,
     with our client state inside), RUN/checkpoints/latest (replaced atomically by rank 0 once every rank has
     written every file of the tag, so an interrupted save leaves `latest` on the previous complete
     checkpoint, and a reader never sees it half written), and for
     export a consolidated fp32 state dict that needs no DeepSpeed engine and no GPU.

Dropout randomness is re-seeded from (seed, step, rank) every step, so no RNG state has to be carried.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import torch

CHECKPOINTS = "checkpoints"
_TAG = re.compile(r"^step_(\d{8})$")


def tag_for(step: int) -> str:
    return f"step_{step:08d}"


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, CHECKPOINTS)


def latest_tag(run_dir: str) -> str | None:
    path = os.path.join(checkpoint_dir(run_dir), "latest")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        tag = f.read().strip()
    return tag if _TAG.match(tag) and os.path.isdir(os.path.join(checkpoint_dir(run_dir), tag)) else None


def save(engine, run_dir: str, step: int, client_state: dict[str, Any], keep_last: int) -> str:
    """Save on every rank (DeepSpeed gathers what each holds); then rank 0 points `latest` at it and prunes."""
    import torch.distributed as dist

    tag = tag_for(step)
    engine.save_checkpoint(checkpoint_dir(run_dir), tag=tag, client_state=client_state, save_latest=False)
    if dist.is_initialized():
        dist.barrier()  # every rank's partition is on disk before `latest` names the tag
    if engine.global_rank == 0:
        write_latest(run_dir, tag)
        prune(run_dir, keep_last)
    return tag


def write_latest(run_dir: str, tag: str) -> None:
    """Write-then-rename: `latest` names either the old tag or the new one, never an empty or partial file."""
    path = os.path.join(checkpoint_dir(run_dir), "latest")
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(tag)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prune(run_dir: str, keep_last: int) -> None:
    root = checkpoint_dir(run_dir)
    current = latest_tag(run_dir)
    tags = sorted(t for t in os.listdir(root) if _TAG.match(t))
    for tag in tags[:-keep_last]:
        if tag != current:
            shutil.rmtree(os.path.join(root, tag), ignore_errors=True)


def load(engine, run_dir: str) -> dict[str, Any] | None:
    """Restore the latest checkpoint into `engine`; returns its client state, or None when there is none."""
    tag = latest_tag(run_dir)
    if tag is None:
        return None
    path, client_state = engine.load_checkpoint(checkpoint_dir(run_dir), tag=tag)
    if path is None:
        raise RuntimeError(f"{checkpoint_dir(run_dir)}/{tag}: DeepSpeed could not load this checkpoint")
    return client_state


def consolidated_state_dict(run_dir: str, tag: str | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any], str]:
    """fp32 weights of a checkpoint (any ZeRO stage) on CPU, its client state, and the tag used."""
    tag = tag or latest_tag(run_dir)
    if tag is None:
        raise FileNotFoundError(f"{run_dir}: no checkpoint (expected {checkpoint_dir(run_dir)}/latest)")
    folder = os.path.join(checkpoint_dir(run_dir), tag)
    states = sorted(f for f in os.listdir(folder) if f.endswith("model_states.pt"))
    if not states:
        raise FileNotFoundError(f"{folder}: no model_states.pt file")
    meta = torch.load(os.path.join(folder, states[0]), map_location="cpu", weights_only=False)
    client = {k: v for k, v in meta.items() if k in ("step", "data", "train_config", "model_config", "metrics")}
    if any(f.endswith("optim_states.pt") and "zero_pp" in f for f in os.listdir(folder)) and meta.get("ds_config", {}).get(
        "zero_optimization", {}
    ).get("stage", 0) > 0:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir(run_dir), tag=tag)
    else:
        state = meta["module"]
    return {k: v.float() for k, v in state.items()}, client, tag
