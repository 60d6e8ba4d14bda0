"""The Python parts of bench/gpu_check.sh: `python bench/_gpu_check.py PART`, one `RESULT {json}` line per figure
(or `FAILED {json}`), and `summary LOG...` to tabulate them.

Parts (BERT-base, seq 128 random-id pairs, one rank, --precision auto = bf16 on the GPU):
  eager-z0     the bare model (eager) and the trainer (ZeRO 0, eager) at batch 64 and 256: tokens/s, MFU, loop_ratio
  compiled-z0  the same, both compiled (inductor; the trainer's --compile auto)
  eager-z2     the trainer alone with ZeRO 2, eager (the bare figures are eager-z0's)
  compiled-z2  the trainer alone with ZeRO 2, compiled
  syncs        host synchronisations per trainer step (torch.cuda.set_sync_debug_mode): two runs of different
               lengths, so start-up and the end's single reads cancel; the places that synchronise most; with
               DeepSpeed's bf16 weights and with the -autocast variant's JSON
  compiled-z0-autocast  the trainer compiled, ZeRO 0, bf16 as torch autocast over fp32 weights (a DeepSpeed JSON)
  compiled-z0-static  the trainer compiled at the first batch size without marking batch and sequence dims dynamic
               (a graph per shape: what the marks cost or save, seq-128 batches being nearly all one shape)
  compiled-z0-unpadded  the trainer and the bare model compiled, ZeRO 0, --batch-form unpadded at attention dropout 0
               (FlashAttention's varlen kernel where torch has it), both on the same packed batches (issue 47)
  compiled-z0-static-form  the trainer compiled with --batch-form static: one shape for the run, so inductor replays
               each step as CUDA graphs (mode reduce-overhead); the issue's small-batch case
  unpad        bench/unpad.py: the bare eager step on padded against unpadded batches of the same rows
  profile      where a compiled ZeRO-0 trainer step's time goes at the first batch size, beside a bare compiled step:
               wall and device-busy ms per step, kernel launches, host ms in each part of the loop, top host ops
Every trainer row has both MFU figures: `MFU` by the old per-token count and `exec.` by the executed FLOPs
(trainer/metrics.py ExecutedFlops, bench/README.md#honest-mfu).
With GPU_CHECK_TINY=1 every part runs the tiny preset at batch 4 and 8 for a few steps, on whatever device is there
(the compiled parts with the `eager` backend on a CPU): a check of this script, not a measurement.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import warnings

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root, not bench/

from process import cpu_sharing  # noqa: E402

cpu_sharing.apply()

TINY = os.environ.get("GPU_CHECK_TINY") == "1"
PRESET = "tiny" if TINY else "base"
BATCHES = (4, 8) if TINY else tuple(int(b) for b in os.environ.get("GPU_CHECK_BATCHES", "64,256").split(","))
STEPS, WARMUP = (6, 2) if TINY else (20, 8)
"""Steps per trainer run; the first WARMUP (compiling, the loader filling its queue) are not timed."""
SYNC_STEPS = (4, 8) if TINY else (10, 20)


def _runtime():
    from process.logs import quiet_startup
    from trainer.run.runtime import start_runtime

    quiet_startup()
    return start_runtime("auto")


def _compile(rt, compiled: bool) -> str:
    if not compiled:
        return "off"
    return "auto" if rt.on_gpu else "eager"  # auto = inductor on a GPU; on a CPU only the code path is checked


AUTOCAST = {"bf16": {"enabled": False}, "torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
"""The DeepSpeed JSON of the `-autocast` variants: bf16 as torch autocast over fp32 weights (what the bare loop does,
and the trainer on a CPU), instead of DeepSpeed's bf16 weights, whose ZeRO-0 optimizer wrapper (FP16_Optimizer)
tests every gradient for inf/NaN with a host read each."""


def _autocast_json() -> str:
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="gpu-check-"), "autocast.json")
    with open(path, "w") as f:
        json.dump(AUTOCAST, f)
    return path


FORM_SUFFIX = {"unpadded": "-unpadded", "static": "-static-form"}
"""A --batch-form's part name suffix (`-static` alone is the trainer without its dynamic-shape marks)."""


def loop_part(compiled: bool, zero: int, bare: bool, batches: tuple[int, ...] = BATCHES, static: bool = False,
              autocast: bool = False, form: str | None = None) -> None:
    """`form`: a --batch-form (unpadded runs at attention dropout 0, so that a GPU takes the varlen kernel)."""
    from bench._loop import measure

    rt = _runtime()
    ds_json = _autocast_json() if autocast else None
    if static:  # the trainer compiled without its dynamic-shape marks: a graph per batch shape, as dynamo does alone
        import trainer.loop

        trainer.loop.mark_dynamic = lambda batch: None
    for batch in batches:
        name = (f"{'compiled' if compiled else 'eager'}-z{zero}{'-static' if static else ''}{'-autocast' if autocast else ''}"
                f"{FORM_SUFFIX.get(form, '')}")
        part = {"part": name, "batch": batch}
        options = {} if form is None else {"batch_form": form, **({"attention_dropout": 0.0} if form == "unpadded" else {})}
        try:
            result = measure(preset=PRESET, batch=batch, steps=STEPS, warmup=WARMUP, zero_stage=zero,
                             compile=_compile(rt, compiled), rt=rt, bare=bare, bare_after=False, deepspeed_config=ds_json,
                             train_options=options)
            print("RESULT", json.dumps({**part, **result}), flush=True)
        except Exception as e:  # noqa: BLE001 (the next batch size still runs)
            print("FAILED", json.dumps({**part, "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)


def sync_part() -> None:
    """Synchronising CUDA calls of two eager ZeRO-0 runs at batch 64 (log, eval and save once each, at the end),
    with DeepSpeed's bf16 weights and with autocast."""
    rt = _runtime()
    for ds_json in (None, _autocast_json()):
        _syncs(rt, ds_json)


def _syncs(rt, ds_json: str | None) -> None:
    import torch

    from bench._loop import measure

    counts, places = [], collections.Counter()
    for steps in SYNC_STEPS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if rt.on_gpu:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                result = measure(preset=PRESET, batch=BATCHES[0], steps=steps, warmup=2, log_every=steps, zero_stage=0,
                                 compile="off", rt=rt, bare=False, deepspeed_config=ds_json)
            finally:
                if rt.on_gpu:
                    torch.cuda.set_sync_debug_mode(0)
        if "trainer_error" in result:
            raise RuntimeError(result["trainer_error"])
        syncs = [w for w in caught if "synchroniz" in str(w.message)]
        counts.append(len(syncs))
        if steps == SYNC_STEPS[-1]:
            places.update(f"{os.path.relpath(w.filename)}:{w.lineno}" for w in syncs)
    per_step = (counts[1] - counts[0]) / (SYNC_STEPS[1] - SYNC_STEPS[0])
    print("RESULT", json.dumps({"part": "syncs" + ("-autocast" if ds_json else ""), "batch": BATCHES[0], "steps": list(SYNC_STEPS), "syncs": counts,
                                "syncs_per_step": per_step, "on_gpu": rt.on_gpu,
                                "most_syncs_at": places.most_common(8)}), flush=True)


PROFILED = 6
"""Steps the profile part records, after the warm-up."""


def profile_part(batch: int = BATCHES[0]) -> None:
    """Where a compiled trainer step's time goes at `batch` (ZeRO 0, the defaults), beside a bare compiled step:
    per step, the wall time, the device's busy time (its kernels' durations summed: far under the wall time means
    the device waits for the host), the kernels launched, and the host's time in each part of the loop (taking
    the next batch, the engine's forward, backward and step, and the rest: logging, the stop check); then the
    ops with the most host time. Nothing in a step waits for the device, so a part's host time is its launch
    work; the profiler synchronises only at its start and end."""
    import time

    import trainer.builders
    import trainer.data.device
    from bench._loop import measure

    rt = _runtime()
    host = collections.Counter()
    state = {"steps": 0, "profile": None}

    def timed(name, fn):
        def call(*args, **kwargs):
            if state["profile"] is None:
                return fn(*args, **kwargs)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                host[name] += time.perf_counter() - start
        return call

    def steps_profiled(engine):
        step = engine.step

        def step_and_count(*args, **kwargs):
            out = timed("step", step)(*args, **kwargs)
            state["steps"] += 1
            if state["steps"] == WARMUP:
                state["profile"] = _start_profile(rt)
            elif state["steps"] == WARMUP + PROFILED and state["profile"] is not None:
                state["result"] = _stop_profile(rt, *state["profile"], PROFILED)
                state["profile"] = None
            return out

        engine.forward = timed("forward", engine.forward)
        engine.backward = timed("backward", engine.backward)
        engine.step = step_and_count
        return engine

    build_engine, next_batch = trainer.builders.build_engine, trainer.data.device.DeviceBatches.__next__
    trainer.builders.build_engine = lambda *a, **k: steps_profiled(build_engine(*a, **k))
    trainer.data.device.DeviceBatches.__next__ = lambda self: timed("next_batch", next_batch)(self)
    try:
        result = measure(preset=PRESET, batch=batch, steps=WARMUP + PROFILED + 2, warmup=WARMUP, zero_stage=0,
                         compile=_compile(rt, True), rt=rt, bare=False)
    finally:
        trainer.builders.build_engine, trainer.data.device.DeviceBatches.__next__ = build_engine, next_batch
    found = state.get("result", {"error": result.get("trainer_error", "the profiled steps did not run")})
    found["host_ms_per_step"] = {k: round(1000 * v / PROFILED, 2) for k, v in host.most_common()}
    print("RESULT", json.dumps({"part": "profile-trainer", "batch": batch, **found}), flush=True)
    print("RESULT", json.dumps({"part": "profile-bare", "batch": batch, **_profile_bare(rt, batch)}), flush=True)


def _start_profile(rt):
    import time

    import torch

    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if rt.on_gpu else [])
    profile = torch.profiler.profile(activities=activities)
    if rt.on_gpu:
        torch.cuda.synchronize()
    profile.__enter__()
    return profile, time.perf_counter()


def _stop_profile(rt, profile, started: float, steps: int) -> dict:
    import time

    import torch

    if rt.on_gpu:
        torch.cuda.synchronize()
    wall = time.perf_counter() - started
    profile.__exit__(None, None, None)
    events = profile.key_averages()
    device = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]  # kernels and copies (the ops
    # that launched them carry the same time as their own "self device" time: summing those would count it twice)
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"))
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]
    return {"wall_ms_per_step": round(1000 * wall / steps, 2),
            "device_busy_ms_per_step": round(sum(e.self_device_time_total for e in device) / 1000 / steps, 2),
            "kernel_launches_per_step": round(launches / steps, 1),
            "ops_per_step": round(sum(e.count for e in events if e.key.startswith("aten::")) / steps, 1),
            "top_host_ms_per_step": [(e.key[:60], round(e.self_cpu_time_total / 1000 / steps, 3)) for e in top]}


def _profile_bare(rt, batch: int) -> dict:
    """The same profile of a bare compiled step (bench/_loop.BareLoop: forward, backward, clipping, fused AdamW
    under the trainer's precision) on random-id batches of the same shape, already on the device."""
    from bench._loop import BareLoop
    from tests.helpers import random_batches
    from trainer.config import TrainConfig
    from trainer.model import BertForPretraining, ModelConfig

    model = BertForPretraining(ModelConfig.preset(PRESET, vocab_size=30522), seed=0).to(rt.device).train()
    bare = BareLoop(model, rt, TrainConfig(data="d", output="o"), _compile(rt, True).replace("auto", "inductor"))
    batches = random_batches(batch, 128, 20, 30522, count=2, device=rt.device)
    bare.tokens_per_s([batches[i % 2] for i in range(WARMUP)])
    profile = _start_profile(rt)
    bare.tokens_per_s([batches[i % 2] for i in range(PROFILED)])
    return _stop_profile(rt, *profile, PROFILED)


def unpad_part() -> None:
    """bench/unpad.py at each batch size: the bare model's step on padded against unpadded batches of the same rows
    (eager, bf16 autocast on a GPU), paired and alternating; its first-batch losses say both held the same rows."""
    from bench.unpad import measure

    for batch in BATCHES:
        part = {"part": "unpad", "batch": batch}
        try:
            print("RESULT", json.dumps({**part, **measure(PRESET, batch, steps=STEPS, warmup=WARMUP)}), flush=True)
        except Exception as e:  # noqa: BLE001 (the next batch size still runs)
            print("FAILED", json.dumps({**part, "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)


def summary(logs: list[str]) -> None:
    """One table of every RESULT line in `logs`."""
    rows = []
    for path in logs:
        if os.path.exists(path):
            with open(path) as f:
                rows += [json.loads(line.split(" ", 1)[1]) for line in f if line.startswith(("RESULT ", "FAILED "))]
    print(f"{'part':<28} {'batch':>5} {'trainer tok/s':>14} {'MFU':>6} {'exec.':>6} {'bare tok/s':>11} {'MFU':>6} {'ratio':>6}  note")
    for r in rows:
        if r.get("part") == "unpad":
            print(f"unpad (bare, eager, batch {r['batch']}): padded {r.get('padded_tokens_per_s')} tok/s, unpadded "
                  f"{r.get('unpadded_tokens_per_s')}, ratio {r.get('ratio')}, padding {r.get('padding_share')}, first losses "
                  f"{r.get('first_loss_padded')} / {r.get('first_loss_unpadded')} {r.get('error', '')}")
            continue
        if r.get("part", "").startswith("profile"):
            keys = ("wall_ms_per_step", "device_busy_ms_per_step", "kernel_launches_per_step", "ops_per_step", "host_ms_per_step")
            print(f"{r['part']} (compiled, batch {r['batch']}): " + ", ".join(f"{k} {r[k]}" for k in keys if k in r) + f" {r.get('error', '')}")
            continue
        if r.get("part", "").startswith("syncs"):
            print(f"{r['part']} per trainer step (eager, ZeRO 0, batch {r['batch']}): {r['syncs_per_step']} {r['most_syncs_at']}")
            continue
        cells = [r.get("trainer_tokens_per_s"), r.get("trainer_mfu"), r.get("trainer_mfu_executed"), r.get("bare_tokens_per_s"),
                 r.get("bare_mfu"), r.get("loop_ratio")]
        text = [f"{c:,}" if isinstance(c, int) else (f"{c:.3f}" if isinstance(c, float) else "-") for c in cells]
        note = r.get("error") or r.get("trainer_error") or ""
        print(f"{r['part']:<28} {r['batch']:>5} {text[0]:>14} {text[1]:>6} {text[2]:>6} {text[3]:>11} {text[4]:>6} {text[5]:>6}  {note}")


PARTS = {
    "eager-z0": lambda: loop_part(compiled=False, zero=0, bare=True),
    "compiled-z0": lambda: loop_part(compiled=True, zero=0, bare=True),
    "eager-z2": lambda: loop_part(compiled=False, zero=2, bare=False),
    "compiled-z2": lambda: loop_part(compiled=True, zero=2, bare=False),
    "syncs": sync_part,
    "compiled-z0-autocast": lambda: loop_part(compiled=True, zero=0, bare=False, autocast=True),
    "compiled-z0-static": lambda: loop_part(compiled=True, zero=0, bare=False, batches=BATCHES[:1], static=True),
    "profile": profile_part,
    "compiled-z0-unpadded": lambda: loop_part(compiled=True, zero=0, bare=True, form="unpadded"),
    "compiled-z0-static-form": lambda: loop_part(compiled=True, zero=0, bare=False, form="static"),
    "unpad": unpad_part,
}

if __name__ == "__main__":
    if sys.argv[1:2] == ["summary"]:
        summary(sys.argv[2:])
    else:
        from trainer.run.runtime import shutdown_runtime

        try:
            PARTS[sys.argv[1]]()
        finally:
            shutdown_runtime()
