"""Benchmark `finetune-profile`: where one fine-tuning epoch spends its host time, ours against transformers' Trainer.

    python bench/run.py finetune_profile [--quick]
    python bench/finetune_profile.py --code DIR [--quick]     another checkout's loop (its downstream/), e.g. before a change

In:  the model, task and settings of bench/finetune_vs_trainer.py (mini: 4 layers x 256, rows of uniform lengths
     8..128 word pieces, batch 32, fp32 on the CPU), one epoch of 512 rows per side under torch.profiler (CPU
     activity), after one untimed epoch of each side. Sides: `ours` (loop.train as `clozeforge finetune` runs it),
     `ours_grouped` (--group-by-length; skipped where the profiled checkout has no such option) and `trainer`
     (Trainer, its default sampler, a collator that pads each batch to its longest row).
Out: one JSON object: per side, per training step: host ms in all (the profiled call's wall time / steps), and the
     parts of it, read from the profiler's top-level events: `forward` (the model's forward, marked by a wrapper
     around it), `backward` (autograd's engine), `optimizer` (Optimizer.step and zero_grad), `other_ops` (every other
     top-level torch op: the batch gather or collation, clipping, the schedule), `python` (the rest: the loop's own
     interpreter time); `ops` = torch ops dispatched per step (the CPU's analogue of kernel launches), and the mean
     padded width of a batch. The order of the sides is reversed between the warm-up and the profiled epoch.
     Device-busy time is a GPU figure: bench/finetune_loop.py --gpu on bench/gpu_check.sh. Needs `accelerate`.
     Timing needs a quiet machine.
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # run as a file: the repository root, not bench/ (whose tokenize.py shadows the stdlib's)
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

PARTS = ("forward", "backward", "optimizer", "other_ops", "python")


def _marked(model):
    """`model` whose forward runs inside a profiler range named "forward" (both loops call model(**batch))."""
    from torch.profiler import record_function

    forward = model.forward

    def marked(*args, **kwargs):
        with record_function("forward"):
            return forward(*args, **kwargs)

    model.forward = marked
    return model


def _widths(model) -> list[int]:
    """Records each forward's padded width (input_ids' second dimension)."""
    widths: list[int] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: widths.append(int(kw["input_ids"].shape[1])), with_kwargs=True)
    return widths


def split(events, wall_us: float, steps: int) -> dict:
    """Per-step ms of each part from a profile's top-level events, and the ops dispatched per step."""
    us = dict.fromkeys(PARTS, 0.0)
    ops = 0
    for e in events:
        if e.name.startswith("aten::"):
            ops += 1
        if e.cpu_parent is not None:
            continue
        name, took = e.name, e.time_range.elapsed_us()
        if name == "forward":
            us["forward"] += took
        elif name.startswith("autograd::engine") or "Backward" in name:
            us["backward"] += took
        elif name.startswith("Optimizer."):
            us["optimizer"] += took
        elif name.startswith("aten::") or name.startswith("torch::"):
            us["other_ops"] += took
    us["python"] = max(0.0, wall_us - sum(us.values()))
    return {"host_ms_per_step": round(wall_us / steps / 1e3, 2), **{f"{p}_ms": round(us[p] / steps / 1e3, 2) for p in PARTS},
            "ops_per_step": round(ops / steps), "steps": steps}


def measure(*, layers: int, hidden: int, rows: int, batch: int, max_len: int) -> dict:
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile
    from transformers import Trainer, TrainingArguments

    from bench.finetune_loop import pad_batch
    from bench.finetune_vs_trainer import setup
    from downstream.finetune import loop
    from downstream.finetune.job import Progress

    s = setup(layers=layers, hidden=hidden, train=rows, valid=1, max_len=max_len)
    quiet = Progress(1, print_fn=lambda *a, **k: None)
    grouping = "group_by_length" in {f.name for f in dataclasses.fields(loop.Recipe)}

    def ours(grouped: bool):
        def go(model):
            options = {"group_by_length": True} if grouped else {}
            loop.train(s.task, model, s.train_features, s.one, s.valid_examples, loop.Recipe(epochs=1, batch_size=batch, **options),
                         lr=3e-4, seed=0, progress=quiet, label="")
        return go

    def theirs(model):
        with tempfile.TemporaryDirectory(prefix="bench-trainer.") as out:
            targs = TrainingArguments(output_dir=out, per_device_train_batch_size=batch, num_train_epochs=1, learning_rate=3e-4,
                                      warmup_steps=0.1, weight_decay=0.01, lr_scheduler_type="linear", max_grad_norm=1.0, seed=0,
                                      save_strategy="no", eval_strategy="no", report_to=[], logging_strategy="no", use_cpu=True,
                                      dataloader_num_workers=0, disable_tqdm=True,
                                      remove_unused_columns=False)  # the marked forward hides its parameters
            Trainer(model=model, args=targs, train_dataset=s.rows, data_collator=pad_batch).train()

    sides = {"ours": ours(False), **({"ours_grouped": ours(True)} if grouping else {}), "trainer": theirs}
    for name in sides:  # warm-up: allocator, threads, first-call costs
        sides[name](s.new_model())
    steps = (rows + batch - 1) // batch
    result = {}
    for name in reversed(sides):
        model = _marked(s.new_model())
        widths = _widths(model)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            started = time.perf_counter()
            sides[name](model)
            wall_us = (time.perf_counter() - started) * 1e6
        train_widths = widths[:steps]  # ours then scores one validation row: not a training step
        result[name] = {**split(prof.events(), wall_us, steps), "mean_width": round(sum(train_widths) / len(train_widths), 1)}
    code = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(loop.__file__))))
    return {"code": code, "device": "cpu", "precision": "fp32", "model": f"{layers}x{hidden}", "rows": rows, "batch_size": batch,
            "max_len": max_len, "torch": torch.__version__, "transformers": transformers.__version__, **result}


def main(corpus: str | None, quick: bool) -> dict:
    del corpus  # bench/finetune_vs_trainer.py's mixed-length task: its lengths are the point
    if quick:
        return measure(layers=2, hidden=32, rows=128, batch=32, max_len=64)
    return measure(layers=4, hidden=256, rows=512, batch=32, max_len=128)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="bench/finetune_profile.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", help="a checkout whose downstream/ and schemas/ are profiled (default: this one)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.code:  # this checkout's bench (the task), that checkout's downstream/, schemas/ and trainer/
        import bench.finetune_vs_trainer  # noqa: F401

        sys.path.insert(0, os.path.abspath(args.code))
    from process import cpu_sharing

    cpu_sharing.apply()
    import json

    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(main(None, args.quick)))
