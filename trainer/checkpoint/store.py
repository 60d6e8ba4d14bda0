"""Checkpoints of a run: DeepSpeed's resumable state plus clozeforge's own, and the consolidated weights.

In:  a DeepSpeed engine and the client state (step, data position, configs) at save time; a run directory
     at load or export time.
Out: RUN/checkpoints/step_<8-digit step>/ (DeepSpeed files: model, optimizer and scheduler, per ZeRO partition,
     with our client state inside, and last the integrity record of trainer/checkpoint/integrity.py),
     RUN/checkpoints/latest (replaced atomically by rank 0 once every rank has written every file of the tag
     and the record checks out, so an interrupted or failed save leaves `latest` on the previous complete
     checkpoint, and a reader never sees it half written), and for export a consolidated fp32 state dict
     that needs no DeepSpeed engine and no GPU.

Resume and export use the newest checkpoint (up to `latest`) whose files match their record, with a
one-line warning naming each damaged one; resume also moves a damaged one aside (step_X.damaged) and points
`latest` at the one it used. Every file is read with trainer/checkpoint/safe_load.py: no code from a checkpoint runs.
A save that fails (disk full, no permission) ends the run with one line naming the path and the cause.

Dropout randomness is re-seeded from (seed, step, rank) every step, so no RNG state has to be carried.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import sys
from typing import Any

import torch

from schemas import ContractError
from schemas.run_dir import LATEST, checkpoint_dir, latest_tag, step_of, tag_for  # noqa: F401 (tag_for: the trainer's API)
from trainer.checkpoint import integrity
from trainer.checkpoint.safe_load import load as safe_torch_load
from trainer.checkpoint.safe_load import only_weights, refusal


class CheckpointError(ContractError):
    """A checkpoint cannot be written, or none that can be trusted is left to read."""


def _first_failure(failure: str | None) -> str | None:
    """The first rank's failure (every rank gets the same string), or None when every rank succeeded."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return failure
    every: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, failure)  # between our own ranks: strings
    return next((f for f in every if f), None)


def _write_failure(error: BaseException, folder: str) -> str:
    """One line for a failed write: the path and the cause (torch's zip writer hides ENOSPC behind 'unexpected pos')."""
    if isinstance(error, OSError) and error.errno is not None:
        return f"{error.filename or folder}: {os.strerror(error.errno)}"
    try:
        free = shutil.disk_usage(folder if os.path.isdir(folder) else os.path.dirname(folder)).free
    except OSError:
        free = None
    if free is not None and free < (16 << 20):
        return f"{folder}: {os.strerror(errno.ENOSPC)} ({free} bytes free)"
    return f"{folder}: {(str(error).strip().splitlines() or [type(error).__name__])[-1]}"


def save(engine, run_dir: str, step: int, client_state: dict[str, Any], keep_last: int) -> str:
    """Save on every rank (DeepSpeed gathers what each holds); then rank 0 records and checks the files, points
    `latest` at the tag and prunes. A failure on any rank is a CheckpointError on every rank."""
    tag = tag_for(step)
    folder = os.path.join(checkpoint_dir(run_dir), tag)
    failure = None
    try:
        engine.save_checkpoint(checkpoint_dir(run_dir), tag=tag, client_state=client_state, save_latest=False)
    except (OSError, RuntimeError) as e:
        failure = _write_failure(e, folder)
        import torch.distributed as dist

        # NOTE: a write that fails skips the barrier that ends DeepSpeed's save_checkpoint, which the other
        # ranks are in (the writes come after ZeRO's gathers: no other collective is skipped); meet them there.
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
    failure = _first_failure(failure)
    if failure is None and engine.global_rank == 0:  # every rank's partition is on disk
        try:
            integrity.write_record(folder)
            failure = integrity.problem(folder)
        except OSError as e:
            failure = _write_failure(e, folder)
    failure = _first_failure(failure)
    if failure:
        if engine.global_rank == 0:
            shutil.rmtree(folder, ignore_errors=True)  # frees what it took; `latest` never named it
        error = CheckpointError(f"checkpoint {tag} not saved: {failure}; `latest` still names {latest_tag(run_dir) or 'no checkpoint'}")
        error.quiet = engine.global_rank != 0  # the same line on every rank: printed once
        raise error
    if engine.global_rank == 0:
        write_latest(run_dir, tag)
        prune(run_dir, keep_last)
    return tag


def write_latest(run_dir: str, tag: str) -> None:
    """Write-then-rename: `latest` names either the old tag or the new one, never an empty or partial file."""
    path = os.path.join(checkpoint_dir(run_dir), LATEST)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(tag)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prune(run_dir: str, keep_last: int) -> None:
    root = checkpoint_dir(run_dir)
    current = latest_tag(run_dir)
    tags = sorted(t for t in os.listdir(root) if step_of(t) is not None)
    for tag in tags[:-keep_last]:
        if tag != current:
            shutil.rmtree(os.path.join(root, tag), ignore_errors=True)


def intact_tag(run_dir: str, warn=print) -> str | None:
    """The newest checkpoint up to `latest` whose files match their record; each damaged one newer than it is
    reported through `warn` in one line. None when there is no checkpoint; CheckpointError when none is intact."""
    latest = latest_tag(run_dir)
    if latest is None:
        return None
    root = checkpoint_dir(run_dir)
    damaged = []
    for tag in sorted((t for t in os.listdir(root) if step_of(t) is not None and t <= latest), reverse=True):
        trouble = integrity.problem(os.path.join(root, tag))
        if trouble is None:
            for bad, why in damaged:
                warn(f"warning: checkpoint {bad} is damaged ({why}); using {tag}")
            return tag
        damaged.append((tag, trouble))
    raise CheckpointError(f"{root}: no intact checkpoint (" + "; ".join(f"{t}: {why}" for t, why in damaged) + ")")


def resume_tag(run_dir: str) -> str | None:
    """Rank 0 picks the newest intact checkpoint (moving damaged ones aside, `latest` to it); every rank gets it."""
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else 0
    tag, failure = None, None
    if rank == 0:
        try:
            tag = intact_tag(run_dir, warn=lambda line: print(line, file=sys.stderr, flush=True))
            root, latest = checkpoint_dir(run_dir), latest_tag(run_dir)
            if tag is not None:  # before any rank loads: a refusal on one rank only would leave the others waiting
                folder = os.path.join(root, tag)
                failure = next(filter(None, (refusal(os.path.join(folder, f)) for f in sorted(os.listdir(folder)) if f.endswith(".pt"))), None)
            if tag is not None and latest != tag:
                for bad in (t for t in os.listdir(root) if step_of(t) is not None and tag < t <= latest):
                    aside = next(f"{bad}.damaged{n or ''}" for n in range(1000) if not os.path.exists(os.path.join(root, f"{bad}.damaged{n or ''}")))
                    os.replace(os.path.join(root, bad), os.path.join(root, aside))
                write_latest(run_dir, tag)
        except CheckpointError as e:
            failure = str(e)
    if dist.is_initialized() and dist.get_world_size() > 1:
        box = [tag, failure]
        dist.broadcast_object_list(box, src=0)  # between our own ranks: two strings
        tag, failure = box
    if failure:
        error = CheckpointError(failure)
        error.quiet = rank != 0  # the same line on every rank: printed once
        raise error
    return tag


def load(engine, run_dir: str, tag: str | None) -> dict[str, Any] | None:
    """Restore checkpoint `tag` (from `resume_tag`: verified) into `engine`; returns its client state, or None
    when there is no checkpoint."""
    if tag is None:
        return None
    with only_weights():
        path, client_state = engine.load_checkpoint(checkpoint_dir(run_dir), tag=tag)
    if path is None:
        raise CheckpointError(f"{checkpoint_dir(run_dir)}/{tag}: DeepSpeed could not load this checkpoint")
    return client_state


def consolidated_state_dict(run_dir: str, tag: str | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any], str]:
    """fp32 weights of a checkpoint (any ZeRO stage) on CPU, its client state, and the tag used."""
    if tag is None:
        tag = intact_tag(run_dir, warn=lambda line: print(line, file=sys.stderr, flush=True))
        if tag is None:
            raise FileNotFoundError(f"{run_dir}: no checkpoint (expected {checkpoint_dir(run_dir)}/latest)")
    folder = os.path.join(checkpoint_dir(run_dir), tag)
    trouble = integrity.problem(folder) if os.path.isdir(folder) else "no such checkpoint"
    if trouble:
        raise CheckpointError(f"{folder}: {trouble}")
    states = sorted(f for f in os.listdir(folder) if f.endswith("model_states.pt"))
    if not states:
        raise FileNotFoundError(f"{folder}: no model_states.pt file")
    meta = safe_torch_load(os.path.join(folder, states[0]), map_location="cpu")
    client = {k: v for k, v in meta.items() if k in ("step", "data", "train_config", "model_config", "metrics")}
    if any(f.endswith("optim_states.pt") and "zero_pp" in f for f in os.listdir(folder)) and meta.get("ds_config", {}).get(
        "zero_optimization", {}
    ).get("stage", 0) > 0:
        from deepspeed.utils.zero_to_fp32 import (
            get_fp32_state_dict_from_zero_checkpoint,
        )

        # its progress lines and bars ("Processing zero checkpoint ...") are not for the user of export: errors raise
        with only_weights(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir(run_dir), tag=tag)
    else:
        state = meta["module"]
    return {k: v.float() for k, v in state.items()}, client, tag
