"""The training loop: steps of grad_accum micro batches through the DeepSpeed engine, with logging,
evaluation, checkpoints, phases and stopping.

In:  a TrainConfig and the Runtime; the start-up is trainer/start/steps.py's `start`.
Out: RUN/checkpoints/, RUN/metrics.jsonl (+ TensorBoard), RUN/curves.png, RUN/mixture.json with --mix; returns the last evaluation's figures. Resumes from RUN's latest
     checkpoint: model, optimizer, scheduler and data position; dropout is re-seeded per step. A new run starts
     from random weights or from --init-from's source (fresh optimizer, schedule and data position), which with
     --eval-every is evaluated at step 0 too (the source's score), and warned about when its first evaluation after
     that has not moved; the heads such a source lacked warm up first (trainer/start/warmup.py), and metrics.jsonl
     marks the records of those steps `"head_warmup": true`.
"""

from __future__ import annotations

import contextlib
import math
import os
import time

import torch

from process.stopping import StopFlag
from trainer.checkpoint import store
from trainer.config import TrainConfig
from trainer.data import default_workers
from trainer.builders import batch_share, phase_rope
from trainer.data.audit import RowAudit
from trainer.data.batch_forms import first_rows, real_tokens, rows_of
from trainer.data.device import device_batches
from trainer.evaluate import describe, evaluate, unmoved
from trainer.heads import loss_keys
from trainer.metrics import ExecutedFlops, MetricsLog, peak_flops
from trainer.run import lock as run_lock
from trainer.run.runtime import Runtime, mean_losses
from trainer.start import steps


def train(config: TrainConfig, rt: Runtime) -> dict[str, float]:
    stop = StopFlag(rt)  # first: a signal during start-up also ends in an agreed stop
    # one trainer per --output (the lock); metrics.jsonl closed, and curves.png drawn by rank 0, when the run ends
    with run_lock.held(config.output, rt.rank, log=rt.log), contextlib.ExitStack() as closing:
        run = steps.start(config, rt)  # a resume, --init-from's source, or random weights; the engine; the phase's data
        config, model, engine, phase, step = run.config, run.model, run.engine, run.phase, run.step
        closing.callback(engine.destroy)  # its hooks let go of the model, which holds the process groups (runtime.py)
        phase_rope(model, config, phase.number)  # a run resumed in phase 2 runs at phase 2's rotary base
        log = closing.enter_context(MetricsLog(config.output, config.max_steps, enabled=rt.rank == 0, start_step=step, log=rt.log))
        peak = peak_flops(rt.device_name)
        position = phase.train.state_dict(*phase.train.start)
        workers = default_workers(config.num_workers, rt.on_gpu, int(os.environ.get("LOCAL_WORLD_SIZE", rt.world_size)))
        # compiled: one graph for every sequence length, unless the batch form has one shape for the whole run
        dynamic = config.compile_backend(rt.on_gpu) is not None and config.batch_form_for(rt.on_gpu) != "static"
        executed = ExecutedFlops.of(model.config)  # what a batch's real rows, tokens and predictions cost
        window_tokens, window_flops, window_start, last = 0, 0, time.time(), {}
        logged_losses = loss_keys()  # what a logged step records: `loss` and every head's (trainer/heads.py)

        def save() -> None:
            state = {"step": step, "phase": phase.number, "data": position, "train_config": config.to_dict(),
                     "model_config": model.config.to_dict(),
                     "trained_seq_len": phase.trained_seq_len}  # export's model_max_length
            rt.log(f"saved checkpoint {store.save(engine, config.output, step, state, config.keep_last)}")

        # an --init-from run is read at step 0 too: its curve starts at the source's score, and its first evaluation
        # after that says whether the run moved it (evaluate.unmoved)
        source_score = evaluate(engine, phase.valid, config.eval_batches, rt.device, rt) \
            if step == 0 and config.init_from and config.eval_every else {}
        if source_score:
            log.write({"step": 0, "split": "validation", **source_score})
            rt.log("eval " + describe(source_score) + " (step 0: the source)")
        end = config.max_steps if config.stop_after is None else min(config.max_steps, step + config.stop_after)
        # the loader's workers shut down (they ignore SIGTERM; left to interpreter exit they would hang it) and
        # --audit-rows' file closed however the loop ends, before a last checkpoint
        with (RowAudit(config.output, rt.rank, rt.world_size) if config.audit_rows else contextlib.nullcontext()) as audit, \
                device_batches(phase.train, workers, rt.device) as batches:
            # NOTE: nothing in a step waits for the device (no .item(), no bool() of a device tensor): the host
            # queues step s+1 while the device runs step s. The losses are read at logged steps only, the stop
            # flag one step after its collective started (process/stopping.py), tokens come from the host batch.
            while step < end and not stop.agreed():
                if step == run.next_at:
                    phase = run.next_phase
                    phase_rope(model, config, phase.number)  # context extension: a rotary network's longer base
                    position = phase.train.state_dict(0, 0)
                    batches.switch(phase.train)
                    rt.log(f"phase 2 from step {step}: {phase.manifest.url} (max_seq_len {phase.manifest.max_seq_len})")
                logged = (step + 1) % config.log_every == 0 or step + 1 == config.max_steps
                losses: list[dict[str, torch.Tensor]] = []  # the logged step's micro-batch losses, still on the device
                lr = engine.get_lr()[0]  # the rate this step uses (the scheduler moves on inside engine.step)
                share = batch_share(config, step)  # --batch-warmup-ratio's share of the batch; 1 after it
                for micro in range(config.grad_accum):
                    sent = next(batches)
                    epoch, k = sent.position
                    if audit:
                        audit.write(step, micro, sent.host)
                    torch.manual_seed(hash((config.seed, step, rt.rank, k)) & 0x7FFF_FFFF)  # dropout: explicit per step
                    host, device = sent.host, sent.device
                    if share < 1.0:  # the first rows only; the rest were read, so the data position is the full batch's
                        cut = first_rows(host, max(1, math.ceil(rows_of(host) * share)))
                        host, device = cut(host), cut(device)
                    if dynamic:
                        mark_dynamic(device)
                    out = engine(**device)
                    engine.backward(out["loss"])
                    engine.step()
                    window_tokens += sent.tokens if share == 1.0 else real_tokens(host)
                    window_flops += executed.of_batch(host)
                    if logged:
                        losses.append({key: out[key].detach() for key in logged_losses if key in out})
                    position = phase.train.state_dict(epoch, k + 1)
                step += 1
                if step == run.head_warmup:
                    rt.log(f"head warm-up over at step {step}: the source's weights train from here")
                if logged:
                    stats = rt.all_reduce_mean(mean_losses(losses, config.grad_accum))  # the one read of the window
                    elapsed = time.time() - window_start  # after the read: the device has finished the window
                    tokens_per_s = window_tokens * rt.world_size / max(elapsed, 1e-9)
                    flops_per_s = window_flops * rt.world_size / max(elapsed, 1e-9)
                    record = {"step": step, **stats, "lr": lr, "tokens_per_s": tokens_per_s, "epoch": epoch, "phase": phase.number,
                              "executed_flops": window_flops, "executed_flops_per_s": flops_per_s,
                              "mfu": tokens_per_s * phase.flops_per_token / (peak * rt.world_size) if peak else None,
                              "mfu_executed": flops_per_s / (peak * rt.world_size) if peak else None,
                              **({"head_warmup": True} if step <= run.head_warmup else {})}
                    log.write(record)
                    log.progress(record)
                    window_tokens, window_flops, window_start = 0, 0, time.time()
                if (config.eval_every and step % config.eval_every == 0) or step == config.max_steps:
                    last = evaluate(engine, phase.valid, config.eval_batches, rt.device, rt)
                    if last:
                        log.write({"step": step, "split": "validation", **last,
                                   **({"head_warmup": True} if step <= run.head_warmup else {})})
                        rt.log("eval " + describe(last))
                    if source_score and last:
                        warning = unmoved(source_score, last, step, config.lr)
                        if warning:
                            rt.log(warning)
                        source_score = {}
                if step % config.save_every == 0 or step == config.max_steps:
                    save()
            stop.settle()
        if step < config.max_steps and step % config.save_every:  # stopped early by a signal or --stop-after
            rt.log(f"stopping at step {step} of {config.max_steps}: checkpointing")
            save()
    return last


def mark_dynamic(batch: dict[str, torch.Tensor]) -> None:
    """Tell torch.compile that the batch and sequence lengths vary (dynamic padding, length buckets, a resumed
    run's smaller micro batch), so it compiles one graph for all of them rather than one per shape."""
    import torch._dynamo

    for tensor in batch.values():
        for dim in range(min(tensor.dim(), 2)):
            torch._dynamo.maybe_mark_dynamic(tensor, dim)
