"""Benchmark `train --loop`: the trainer's own loop against a bare forward/backward/step loop, in one process.

In:  a model preset, a micro batch, a number of steps, the device this process finds (one rank), and the
     trainer's --zero-stage / --compile / --precision; random-id pairs at seq 128 (BERT's length mix) written as
     a pair shard + manifest in a temporary folder, as prep would (bench/loader.py's writer).
Out: `trainer_tokens_per_s` (the trainer's own windows from metrics.jsonl, the first `warmup` steps left out),
     `bare_tokens_per_s` (the same model, seed and first batches, already on the device, through torch's AdamW:
     forward, backward, gradient clipping, step; timed before and after the trainer, the mean of the two), and
     `loop_ratio` = trainer / bare: what the loop costs around its model (the input path, DeepSpeed's engine,
     logging, host synchronisations), on this machine, as a ratio: the median over the trainer's windows of its
     tokens/s against a bare window of as many steps run right after it (`paired_windows`, `loop_ratio_windows`),
     which a machine's drift from one minute to the next moves alike; `loop_ratio_unpaired` is the trainer's mean
     against the bare runs before and after. MFU of both by the trainer's own FLOPs count (trainer/metrics.py:
     6 x parameters + attention, per token) where the device's peak is known.

The bare side's precision is the trainer's (--precision auto: bf16 on a GPU that supports it and on a CPU with
native bf16, else fp32), as bf16 autocast over fp32 weights, as the trainer's ZeRO 0 computes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time

import numpy as np
import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compile_backend(flag: str | None, on_gpu: bool) -> str | None:
    """The torch.compile backend a --compile value means here (the bare side compiles when the trainer does)."""
    if flag in (None, "none", "off") or (flag == "auto" and not on_gpu):
        return None
    return "inductor" if flag == "auto" else flag


def write_pairs(folder: str, pairs: int, *, seed: int = 0, vocab_size: int = 30522) -> str:
    """`pairs` random-id NSP pairs at seq 128 as one zstd shard + manifest; returns the pairs/ directory."""
    from bench.loader import _random_data, _write_shard

    rng = np.random.default_rng(seed)
    vocab, pairs_a, pairs_b, _ = _random_data(rng, pairs, vocab_size)
    return _write_shard(folder, vocab, pairs_a, pairs_b, rng.random(pairs) < 0.5)


class BareLoop:
    """Forward + backward + clipping + AdamW step on `model` (compiled with `backend`, under the trainer's
    precision as autocast), over batches already on the device; one optimizer across every call."""

    def __init__(self, model: torch.nn.Module, rt, config, backend: str | None):
        from trainer.optim import adamw

        self.model, self.device, self.grad_clip = model, rt.device, config.grad_clip
        self.optimizer = adamw(model, lr=config.lr, weight_decay=config.weight_decay, eps=1e-6)
        self.step_model = torch.compile(model, backend=backend) if backend else model
        self.precision = rt.precision

    def tokens_per_s(self, batches: list[dict], warmup: int = 0) -> float:
        """Tokens/s over `batches` after the first `warmup` (untimed), the device synchronised at both ends."""
        from trainer.data.batch_forms import real_tokens

        autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.precision == "bf16"
                    else contextlib.nullcontext())
        tokens = [real_tokens(b) for b in batches]  # counted before timing, as the trainer does (any batch form)
        start = 0.0
        for i, batch in enumerate(batches):
            if i == warmup:
                _sync(self.device)
                start = time.perf_counter()
            with autocast:
                loss = self.step_model(**batch)["loss"]
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        _sync(self.device)
        return sum(tokens[warmup:]) / (time.perf_counter() - start)


@contextlib.contextmanager
def paired_windows(bare: BareLoop, batches: list[dict], warmup: int):
    """While it is open, each training window the trainer logs after step `warmup` is followed by a bare window
    of as many steps (the next of `batches`, cycling): yields the list of (trainer, bare) tokens/s pairs it fills.
    The bare window runs inside the log's write, after the trainer has timed its window and before it starts
    timing the next, so neither clock holds the other's work; and a pair is taken within seconds, so a machine
    whose speed drifts (a shared CPU) moves both sides of it alike."""
    import trainer.loop

    pairs: list[tuple[float, float]] = []
    last = [0]
    plain = trainer.loop.MetricsLog

    class PairedLog(plain):
        def write(self, record):
            super().write(record)
            if "split" in record:
                return
            n, last[0] = record["step"] - last[0], record["step"]
            if record["step"] > warmup:
                window = [batches[(record["step"] - n + i) % len(batches)] for i in range(n)]
                pairs.append((record["tokens_per_s"], bare.tokens_per_s(window)))

    trainer.loop.MetricsLog = PairedLog
    try:
        yield pairs
    finally:
        trainer.loop.MetricsLog = plain


def measure(*, preset: str = "tiny", batch: int = 32, steps: int = 40, warmup: int = 10, zero_stage=None,
            compile: str | None = None, precision: str = "auto", num_workers: int | None = None,
            vocab_size: int = 30522, folder: str | None = None, rt=None, bare: bool = True, bare_after: bool = True,
            log_every: int | None = None, deepspeed_config: str | None = None, paired: bool = True,
            train_options: dict | None = None) -> dict:
    """One trainer run and a bare run before it (and after it, with `bare_after`: on a shared CPU the mean of the
    two is fairer); the figures named in the module docstring. `train_options`: more TrainConfig fields (e.g.
    batch_form, attention_dropout); the bare side then steps the same batches in the same form. A trainer that
    fails leaves `trainer_error` and the bare figures."""
    from schemas import Manifest
    from trainer.builders import build_model, open_phase
    from trainer.checkpoint import resume
    from trainer.config import TrainConfig
    from trainer.data import loader, shutdown
    from trainer.evaluate import to_device
    from trainer.loop import train
    from trainer.metrics import peak_flops
    from trainer.run.runtime import start_runtime

    own_folder = folder is None
    folder = folder or tempfile.mkdtemp(prefix="bench-loop-")
    try:
        data = write_pairs(os.path.join(folder, "prep"), batch * (steps + 1), vocab_size=vocab_size)
        rt = rt or start_runtime(precision)
        options = {"zero_stage": zero_stage} if zero_stage is not None else {}
        if compile is not None:
            options["compile"] = compile
        if num_workers is not None:
            options["num_workers"] = num_workers
        if deepspeed_config is not None:  # a DeepSpeed JSON merged over the trainer's (bench/_gpu_check.py's variants)
            options["deepspeed_config"] = deepspeed_config
        options.update(train_options or {})
        config = TrainConfig(data=data, output=os.path.join(folder, f"run-{time.time_ns()}"), model=preset, batch_size=batch,
                             max_steps=steps, log_every=log_every or warmup, eval_every=0, save_every=steps, dropout=0.1,
                             precision=precision, **options)
        manifest = Manifest.read(data)
        resolved = resume.resolve(config, rt)
        model = build_model(resolved, manifest).to(rt.device).train()
        phase = open_phase(1, resolved, rt, model, manifest.vocab["sha256"])
        peak, per_token = peak_flops(rt.device_name), phase.flops_per_token
        backend = compile_backend(resolved.compile, rt.on_gpu)
        result = {"loop_preset": preset, "loop_batch": batch, "loop_steps": steps, "loop_timed_steps": steps - warmup,
                  "loop_device": rt.device_name, "loop_precision": rt.precision, "loop_compile_backend": backend}
        bare_tps: list[float] = []
        if bare:
            batches_iter = iter(loader(phase.train, 0))
            batches = [to_device(next(batches_iter), rt.device) for _ in range(steps)]
            shutdown(batches_iter)
            bare_loop = BareLoop(model, rt, resolved, backend)
            bare_tps.append(bare_loop.tokens_per_s(batches, warmup))
            result["bare_tokens_per_s"] = round(bare_tps[0])
        started = time.time()
        with paired_windows(bare_loop, batches, warmup) if bare and paired else contextlib.nullcontext([]) as pairs:
            try:
                train(config, rt)
            except Exception as e:  # noqa: BLE001 (a trainer that fails here is a figure too; the bare one stays)
                result["trainer_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                return result
        result["trainer_wall_s"] = round(time.time() - started, 1)
        if bare and bare_after:
            bare_tps.append(bare_loop.tokens_per_s(batches, warmup))
            result["bare_tokens_per_s_before_after"] = [round(x) for x in bare_tps]
        if pairs:
            result["loop_ratio_windows"] = [round(t / b, 3) for t, b in pairs]
        with open(os.path.join(config.output, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]
        windows = [r for r in records if "split" not in r and r["step"] > warmup]
        trainer_tps = float(np.mean([r["tokens_per_s"] for r in windows]))
        with open(os.path.join(config.output, "train_config.json")) as f:
            ran = json.load(f)
        result.update({"loop_zero_stage": ran.get("zero_stage"), "loop_compile": ran.get("compile"),
                       "loop_num_workers": ran.get("num_workers"), "trainer_tokens_per_s": round(trainer_tps)})
        if peak:
            result["trainer_mfu"] = round(trainer_tps * per_token / peak, 3)
            # the executed FLOPs' MFU (trainer/metrics.py ExecutedFlops: masked positions only, no padding)
            result["trainer_mfu_executed"] = round(float(np.mean([r["mfu_executed"] for r in windows])), 3)
        if bare_tps:
            result["bare_tokens_per_s"] = round(float(np.mean(bare_tps)))
            result["loop_ratio_unpaired"] = round(trainer_tps / float(np.mean(bare_tps)), 3)
            result["loop_ratio"] = (float(np.median(result["loop_ratio_windows"])) if pairs
                                    else result["loop_ratio_unpaired"])
            if peak:
                result["bare_mfu"] = round(float(np.mean(bare_tps)) * per_token / peak, 3)
        return result
    finally:
        if own_folder:
            shutil.rmtree(folder, ignore_errors=True)


def main(quick: bool) -> dict:
    """`bench/run.py train --loop`: the tiny preset at batch 32, vocabulary 8,192 (bench/train.py's CPU setting),
    three rounds of `measure` (one with --quick), `loop_ratio` the median of every round's paired windows (five a
    round) and each round's on `loop_ratio_rounds`; and the ops a step dispatches (`dispatched_ops`, tiny at
    batch 4; the trainer's, DeepSpeed's own stage 0's, a bare step's), which measure what the loop adds on the host
    without a clock."""
    from process.logs import quiet_startup
    from trainer.run.runtime import start_runtime

    quiet_startup()
    rt = start_runtime("auto")
    rounds = [measure(preset="tiny", batch=32, steps=24 if quick else 60, warmup=4 if quick else 10, vocab_size=8192, rt=rt)
              for _ in range(1 if quick else 3)]
    result = dict(rounds[-1])
    if all("loop_ratio_windows" in r for r in rounds):
        result["loop_ratio_windows"] = [w for r in rounds for w in r["loop_ratio_windows"]]
        result["loop_ratio"] = float(np.median(result["loop_ratio_windows"]))
        result["loop_ratio_rounds"] = [r["loop_ratio"] for r in rounds]
        result["loop_ratio_unpaired"] = [r["loop_ratio_unpaired"] for r in rounds]
        for key in ("trainer_tokens_per_s", "bare_tokens_per_s"):
            result[key] = float(np.median([r[key] for r in rounds]))
        result.pop("bare_tokens_per_s_before_after", None)
    from tests.helpers import dispatched_ops  # the test suite counts the same ops (tests/trainer/test_loop_async.py)

    counted = dispatched_ops(rt)
    return {**result, **{f"{name}_ops_per_step": round(n, 1) for name, n in counted["ops_per_step"].items()}}
