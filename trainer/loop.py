"""The training loop: steps of grad_accum micro batches through the DeepSpeed engine, with logging,
evaluation, checkpoints, phases and stopping.

In:  a TrainConfig and the Runtime. Out: RUN/checkpoints/, RUN/metrics.jsonl (+ TensorBoard), RUN/curves.png,
     RUN/mixture.json with --mix; returns the last evaluation's figures. Resumes from RUN's latest
     checkpoint: model, optimizer, scheduler and data position; dropout is re-seeded per step.
"""

from __future__ import annotations

import json
import os
import time

import torch

from schemas import Manifest
from trainer.builders import build_engine, build_model, open_phase, phase_of
from trainer.checkpoint import elastic
from trainer.checkpoint import store
from trainer.checkpoint.resume import prepare_run_dir, trained_seq_len
from trainer.config import TrainConfig, TrainError
from trainer.data import loader, shutdown
from trainer.data.audit import RowAudit
from trainer.data.mixture import MixtureStream
from trainer.evaluate import describe, evaluate, to_device
from trainer.metrics import MetricsLog, peak_flops, plot_curves
from trainer.run import lock as run_lock
from trainer.run import preflight
from trainer.run.runtime import Runtime
from trainer.run.stopping import StopFlag


def train(config: TrainConfig, rt: Runtime) -> dict[str, float]:
    stop = StopFlag(rt)  # first: a signal during start-up also ends in an agreed stop
    with run_lock.held(config.output, rt.rank, log=rt.log):  # one trainer per --output
        return _train(config, rt, stop)


def _train(config: TrainConfig, rt: Runtime, stop: StopFlag) -> dict[str, float]:
    preflight.check(config, rt)  # manifests and shard sizes, before anything is written or trained
    manifest = Manifest.read(config.data)
    config = elastic.resolve(config, rt)  # the run's global batch and partitions; this world size's micro batches
    prepare_run_dir(config, manifest, rt)
    rt.log(f"global batch {config.global_batch_size} = {rt.world_size} ranks x {config.grad_accum} x {config.batch_size} pairs, "
           f"{config.partitions} data partitions")
    model = build_model(config, manifest)
    tag = store.resume_tag(config.output)  # the newest intact checkpoint, scanned for anything but weights
    universal = elastic.universal_tag(config.output, tag, rt)  # its ZeRO partitions are of another world size
    engine = build_engine(model, config, rt, load_universal=universal is not None)
    client = elastic.load_universal(engine, config.output, universal, rt) if universal else store.load(engine, config.output, tag)
    step = client["step"] if client else 0
    phase = open_phase(phase_of(step, config), config, rt, model, manifest.vocab["sha256"])
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
    log = MetricsLog(config.output, config.max_steps, enabled=rt.rank == 0, start_step=step)
    peak = peak_flops(rt.device_name)
    position = phase.train.state_dict(*phase.train.start)
    batches = iter(loader(phase.train, config.num_workers))
    audit = RowAudit(config.output, rt.rank, rt.world_size) if config.audit_rows else None
    window_tokens, window_start, last = 0, time.time(), {}

    def save() -> None:
        state = {"step": step, "phase": phase.number, "data": position, "train_config": config.to_dict(),
                 "model_config": model.config.to_dict(),
                 "trained_seq_len": trained_seq_len(config, manifest, phase)}  # export's model_max_length
        rt.log(f"saved checkpoint {store.save(engine, config.output, step, state, config.keep_last)}")

    end = config.max_steps if config.stop_after is None else min(config.max_steps, step + config.stop_after)
    try:
        while step < end and not stop.agreed():
            if phase_of(step, config) != phase.number:
                phase = open_phase(2, config, rt, model, manifest.vocab["sha256"])
                shutdown(batches)
                position, batches = phase.train.state_dict(0, 0), iter(loader(phase.train, config.num_workers))
                rt.log(f"phase 2 from step {step}: {phase.manifest.url} (max_seq_len {phase.manifest.max_seq_len})")
            stats = {}
            lr = engine.get_lr()[0]  # the rate this step uses (the scheduler moves on inside engine.step)
            for micro in range(config.grad_accum):
                batch = next(batches)
                epoch, k = batch["position"].tolist()
                if audit:
                    audit.write(step, micro, batch)
                torch.manual_seed(hash((config.seed, step, rt.rank, k)) & 0x7FFF_FFFF)  # dropout: explicit per step
                out = engine(**to_device(batch, rt.device))
                engine.backward(out["loss"])
                engine.step()
                window_tokens += int(batch["attention_mask"].sum())
                for key in ("loss", "mlm_loss", "nsp_loss", "sbo_loss"):
                    if key in out:
                        stats[key] = stats.get(key, 0.0) + out[key].detach().item() / config.grad_accum
                position = phase.train.state_dict(epoch, k + 1)
            step += 1
            if step % config.log_every == 0 or step == config.max_steps:
                elapsed = time.time() - window_start
                tokens_per_s = window_tokens * rt.world_size / max(elapsed, 1e-9)
                stats = rt.all_reduce_mean(stats)
                record = {"step": step, **stats, "lr": lr, "tokens_per_s": tokens_per_s, "epoch": epoch, "phase": phase.number,
                          "mfu": tokens_per_s * phase.flops_per_token / (peak * rt.world_size) if peak else None}
                log.write(record)
                log.progress(record)
                window_tokens, window_start = 0, time.time()
            if (config.eval_every and step % config.eval_every == 0) or step == config.max_steps:
                last = evaluate(engine, phase.valid, config.eval_batches, rt.device, rt)
                if last:
                    log.write({"step": step, "split": "validation", **last})
                    rt.log("eval " + describe(last))
            if step % config.save_every == 0 or step == config.max_steps:
                save()
    finally:
        shutdown(batches)  # its workers ignore SIGTERM; left to interpreter exit they would hang it
        if audit:
            audit.close()
    if step < config.max_steps and step % config.save_every:  # stopped early by a signal or --stop-after
        rt.log(f"stopping at step {step} of {config.max_steps}: checkpointing")
        save()
    log.close()
    if rt.rank == 0:
        plot = plot_curves(config.output)
        if plot:
            rt.log(f"curves: {plot}")
    return last


