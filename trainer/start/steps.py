"""A run's start-up, in the order trainer/loop.py's `train` calls it: where the run starts, what trains, what it reads.

  0. `settle(config, given)` (trainer/pretrain.py, in every process before any rank starts): a new run from random
     weights, a new run from `--init-from SOURCE` (its recipe defaults: trainer/start/recipe.py), or the resume of
     either; a --init-from on a run that has checkpoints is refused, since rerunning without it resumes.
  1. `where_it_starts(config, rt)`: the data checked (trainer/start/preflight.py), the run's batch resolved for this
     world size (trainer/checkpoint/resume.py), RUN/ prepared and its record written, the checkpoint to resume
     (verified) or the source to start from.
  2. `what_trains(start, rt)`: the model (the source's weights, or random) inside the DeepSpeed engine, with the
     checkpoint's state loaded when the run resumes.
  3. `what_it_reads(start, model, client, rt)`: the phase's data streams, at the saved position when resuming.

In:  the TrainConfig of the flags, the flags the user gave, the Runtime. Out: a Start, then (model, engine, client
     state), then the Phase and the step to start at.
"""

from __future__ import annotations

import dataclasses
import json
import os

from schemas import Manifest
from trainer.builders import Phase, build_engine, build_model, open_phase, phase_of
from trainer.checkpoint import resume, store
from trainer.checkpoint.resume import prepare_run_dir, recorded
from trainer.config import TrainConfig, TrainError
from trainer.data.mixture import MixtureStream
from trainer.run.runtime import Runtime
from trainer.start import preflight, recipe
from trainer.start.sources import ARCHITECTURE, Source, open_source

ARCHITECTURE_KEY = "init_architecture"
"""The key of RUN/train_config.json holding an --init-from run's architecture, so its resume needs no source."""


def settle(config: TrainConfig, given: set[str]) -> tuple[TrainConfig, list[str]]:
    """The config the run trains with, and a note per continued-pretraining default applied (see the module)."""
    before = recorded(config.output)  # None for a new run
    if before is not None and config.init_from:
        raise TrainError(f"--init-from {config.init_from}: {config.output} already has checkpoints (latest "
                         f"{store.latest_tag(config.output)}), so this is a resume: rerun without --init-from")
    source_url = before.get("init_from") if before is not None else config.init_from
    if not source_url:
        return dataclasses.replace(config, model=config.model or "tiny"), []
    config = dataclasses.replace(config, init_from=source_url)
    if before is not None:  # a resume: the source may be gone; the run recorded what it took from it
        return recipe.with_defaults(config, given, before.get("masking"))
    source = open_source(source_url)
    found = recipe.agreement(config, source.architecture)
    if found:
        raise TrainError(found)
    if source.architecture.get("pre_layernorm"):
        config = dataclasses.replace(config, pre_layernorm=True)
    return recipe.with_defaults(config, given, source.masking)


@dataclasses.dataclass
class Start:
    """Where a run starts: its settled config and data, and either a checkpoint to resume or a source to load."""

    config: TrainConfig
    manifest: Manifest
    tag: str | None
    """The verified checkpoint to resume (None: a new run)."""
    universal: str | None
    """That checkpoint's universal form when it was saved on another world size."""
    source: Source | None
    """--init-from's source for a new run (None when resuming: the checkpoint has the weights)."""
    architecture: dict | None
    """The model's shape when it is not a preset's: the source's, or what a resumed --init-from run recorded."""


def where_it_starts(config: TrainConfig, rt: Runtime) -> Start:
    preflight.check(config, rt)  # manifests, shard sizes and the source, before anything is written or trained
    manifest = Manifest.read(config.data)
    config = resume.resolve(config, rt)  # the run's global batch and partitions; this world size's micro batches
    before = recorded(config.output)
    source, architecture = None, None
    if config.init_from and before is None:
        source = open_source(config.init_from)
        architecture = {k: source.architecture[k] for k in ARCHITECTURE}
    elif config.init_from:
        architecture = before.get(ARCHITECTURE_KEY)
    prepare_run_dir(config, manifest, rt, extra={ARCHITECTURE_KEY: architecture} if architecture else None)
    rt.log(f"global batch {config.global_batch_size} = {rt.world_size} ranks x {config.grad_accum} x {config.batch_size} pairs, "
           f"{config.partitions} data partitions")
    tag = store.resume_tag(config.output)  # the newest intact checkpoint, scanned for anything but weights
    universal = resume.universal_tag(config.output, tag, rt)  # its ZeRO partitions are of another world size
    return Start(config, manifest, tag, universal, source, architecture)


def what_trains(start: Start, rt: Runtime):
    """(model, DeepSpeed engine, the resumed checkpoint's client state or None)."""
    config = start.config
    model = build_model(config, start.manifest, source=start.source, architecture=start.architecture, log=rt.log)
    engine = build_engine(model, config, rt, load_universal=start.universal is not None)
    if start.universal:
        client = resume.load_universal(engine, config.output, start.universal, rt)
    else:
        client = store.load(engine, config.output, start.tag)
    return model, engine, client


def what_it_reads(start: Start, model, client: dict | None, rt: Runtime) -> tuple[Phase, int]:
    """The data of the phase the run is in, at its saved position when resuming; and the step to start at."""
    config = start.config
    step = client["step"] if client else 0
    phase = open_phase(phase_of(step, config), config, rt, model, start.manifest.vocab["sha256"])
    if isinstance(phase.train, MixtureStream) and rt.rank == 0:
        with open(os.path.join(config.output, "mixture.json"), "w") as f:
            json.dump(phase.train.describe(), f, indent=2)
    if client and client.get("phase", 1) == phase.number:
        saved_world = client["data"].get("world_size", rt.world_size)
        if phase.number == 2 and saved_world != rt.world_size:
            raise TrainError(f"{config.output}: phase-2 data is laid out per rank and resumes only on the {saved_world} ranks "
                             f"that saved it, this run has {rt.world_size}")
        phase.train.load_state_dict(client["data"])
    if client:
        rt.log(f"resumed from {store.latest_tag(config.output)} at step {step} (phase {phase.number})")
    return phase, step
