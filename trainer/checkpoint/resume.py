"""Resuming a run: what a checkpoint may be resumed under, on which number of ranks, and what a run records.

In:  the TrainConfig of this invocation, the manifest of --data, the Runtime; RUN/train_config.json and
     RUN/checkpoints/ of earlier invocations.
Out: `prepare` and `load`, what a run's start-up calls (trainer/start/steps.py), made of the rest:
     `recorded`: RUN/train_config.json when RUN has a checkpoint to resume (None for a new run);
     in `prepare`, a one-line TrainError when the checkpoint was saved under settings that trainer/config.py's
     RESUME_RULES do not let change; otherwise (rank 0) RUN/vocab/ (a copy of the data's vocabulary, checked first)
     and RUN/train_config.json, the record the next resume is checked against;
     `resolve`: the TrainConfig this invocation trains with: the run's global batch and data partitions (fixed
     when it started, read back from RUN/train_config.json), its ZeRO stage (--zero-stage auto: the recorded one
     on a resume), this world size's micro batch and grad_accum; or a one-line TrainError when they cannot fit;
     `universal_tag`: the checkpoint to resume (store.resume_tag: verified, its files scanned for anything but
     weights), and when it holds ZeRO optimizer partitions of another world size, the tag of its DeepSpeed universal form
     (RUN/checkpoints/<tag>_universal/, converted once by rank 0 with deepspeed.checkpoint.ds_to_universal), which
     an engine built with "checkpoint": {"load_universal": true} loads on any world size; None when the checkpoint
     loads as it is (same world size, or ZeRO-0 fp32, whose optimizer state is not partitioned). `load_universal`
     loads it and removes the converted copy.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import shutil
from typing import Any

from schemas import Manifest
from schemas import run_dir as run_layout
from schemas import vocab as vocab_files
from trainer.checkpoint import store
from trainer.checkpoint.safe_load import only_weights
from trainer.config import TrainConfig, TrainError, resume_refusal
from trainer.data.partitions import plan
from trainer.run.runtime import Runtime

RECORD = run_layout.TRAIN_CONFIG
UNIVERSAL_SUFFIX = "_universal"


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


def prepare(config: TrainConfig, manifest: Manifest, rt: Runtime, before: dict | None,
            extra: dict[str, Any] | None = None) -> tuple[TrainConfig, str | None, str | None]:
    """The run directory before training, in order: this invocation's batch (`resolve`); a resume the rules forbid
    refused (`before`: what `recorded` read of RUN, None for a new run); then (rank 0) RUN/vocab/ (a copy of the data's vocabulary, checked first) and RUN/train_config.json
    with `extra` keys beside the settings (an --init-from run's architecture: trainer/start/steps.py); then the
    checkpoint to resume and its universal form (`universal_tag`)."""
    config = resolve(config, rt)
    if before is not None and (refusal := resume_refusal(config.output, before, record(config, manifest, rt))):
        raise TrainError(refusal)
    if rt.world_size > 1:  # every rank has read the earlier train_config.json (here and in resolve)
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
    rt.log(f"global batch {config.global_batch_size} = {rt.world_size} ranks x {config.grad_accum} x {config.batch_size} pairs, "
           f"{config.partitions} data partitions")
    return (config, *universal_tag(config.output, rt))


def load(engine, run_dir: str, tag: str | None, universal: str | None, rt: Runtime) -> dict | None:
    """The checkpoint `prepare` chose, into the engine (its universal form, or as saved); its client state, None
    for a new run."""
    if universal:
        return load_universal(engine, run_dir, universal, rt)
    return store.load(engine, run_dir, tag)


def resolve(config: TrainConfig, rt: Runtime) -> TrainConfig:
    """The config with the run's global batch and partitions, and this world size's micro batch and grad_accum."""
    before = recorded(config.output)
    if before is None:
        global_batch = config.global_batch_size or config.batch_size * config.grad_accum * rt.world_size
        partitions = config.partitions
    else:
        # a run recorded before partitions existed: its global batch, one partition per rank
        world = before.get("world_size", 1)
        global_batch = before.get("global_batch_size") or before["batch_size"] * before.get("grad_accum", 1) * world
        partitions = before.get("partitions") or world
        refusal = resume_refusal(config.output, {"global_batch_size": global_batch, "partitions": partitions},
                                 {"global_batch_size": config.global_batch_size, "partitions": config.partitions})
        if refusal:
            raise TrainError(refusal)
    try:
        batching = plan(global_batch, partitions, rt.world_size, config.batch_size)
    except ValueError as e:
        raise TrainError(f"{config.output}: {e}" if before else str(e)) from None
    # --zero-stage auto: the stage the run started with (its optimizer state's layout), else this world size's
    zero_stage = before.get("zero_stage", 2) if before is not None and config.zero_stage == "auto" else config.zero_stage_for(rt.world_size)
    return dataclasses.replace(config, global_batch_size=global_batch, partitions=batching.partitions,
                               batch_size=batching.micro_batch, grad_accum=batching.grad_accum, zero_stage=zero_stage)


def partition_files(folder: str) -> list[str]:
    """The per-rank ZeRO optimizer files of a checkpoint folder (none under ZeRO-0 in fp32)."""
    return sorted(f for f in os.listdir(folder) if "zero_pp_rank_" in f and f.endswith("optim_states.pt"))


def universal_tag(run_dir: str, rt: Runtime) -> tuple[str | None, str | None]:
    """(the checkpoint to resume: the newest intact one, scanned for anything but weights, None for a new run;
    its universal form's tag when its ZeRO partitions are of another world size, else None)."""
    import torch.distributed as dist

    tag = store.resume_tag(run_dir)
    if tag is None:
        return None, None
    folder = os.path.join(store.checkpoint_dir(run_dir), tag)
    saved = len(partition_files(folder))
    if saved in (0, rt.world_size):
        return tag, None
    target = folder + UNIVERSAL_SUFFIX
    if rt.rank == 0 and not os.path.isdir(target):
        rt.log(f"{tag} holds ZeRO partitions of {saved} ranks, this run has {rt.world_size}: converting it to a universal checkpoint")
        convert(folder, target)
    if dist.is_initialized():
        dist.barrier()  # every rank loads the converted folder once rank 0 has renamed it into place
    return tag, tag + UNIVERSAL_SUFFIX


def convert(folder: str, target: str) -> None:
    """A DeepSpeed checkpoint folder → its universal form at `target` (written beside it, then renamed)."""
    from deepspeed.checkpoint.ds_to_universal import main as ds_to_universal

    tmp = target + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    args = argparse.Namespace(input_folder=folder, output_folder=tmp, num_extract_workers=1, num_merge_workers=1,
                              keep_temp_folder=False, strict=True, inject_missing_state=True)
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), only_weights():  # its prints; no unpickling
            ds_to_universal(args)
    except (OSError, ValueError, KeyError, AssertionError, RuntimeError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TrainError(f"{folder}: cannot convert to a universal checkpoint for another number of ranks ({type(e).__name__}: {e})") from None
    os.replace(tmp, target)
    with contextlib.suppress(FileNotFoundError):  # ds_to_universal's own pointer, at the temporary name
        os.remove(os.path.join(os.path.dirname(target), "latest_universal"))


def load_universal(engine, run_dir: str, tag: str, rt: Runtime) -> dict:
    """Load the universal form into an engine built with load_universal; returns the client state."""
    import torch.distributed as dist

    with only_weights():
        path, client = engine.load_checkpoint(store.checkpoint_dir(run_dir), tag=tag)
    if path is None:
        raise TrainError(f"{store.checkpoint_dir(run_dir)}/{tag}: DeepSpeed could not load this universal checkpoint")
    if dist.is_initialized():
        dist.barrier()
    if rt.rank == 0:  # a derived copy: the next save writes this world size's own partitions
        shutil.rmtree(os.path.join(store.checkpoint_dir(run_dir), tag), ignore_errors=True)
    return client
