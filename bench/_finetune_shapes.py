"""`python bench/run.py finetune_vs_trainer --shapes 2x128,4x256,6x384 [--contended]`: our fine-tuning loop against
transformers' Trainer, each in its own process with its own defaults, at several model shapes, paired in time.

In:  shapes LAYERSxHIDDEN; the task, rows and weights of bench/finetune_vs_trainer.py's `setup` (rows of uniform
     lengths 8..128 word pieces, batch 32, lr 1e-3, fp32 on the CPU, the plain batch order on both sides).
Out: per shape: in-loop examples/s of each side and `loop_ratio` (ours / Trainer), whole-process examples/s
     (rows x epochs / the process's own wall seconds: interpreter start, imports, model, training, exit; the pauses
     below excluded) and `process_ratio`; with `--contended` the same again beside a single-threaded busy loop.

How: both sides run at once as two worker processes, each paused by its driver every CHUNK training steps (a
forward pre-hook that reads a line from stdin): the driver lets one side run a chunk, then the other, alternating
which goes first each round, so a drift in the machine's load hits both sides alike and the ratio is a median of
per-round ratios. Each side's environment is its own default: ours with clozeforge's threading defaults
(process/cpu_sharing.py, what `clozeforge finetune` runs with), Trainer's with libgomp's own (no OMP_WAIT_POLICY,
no GOMP_SPINCOUNT), as a user's Trainer script runs. A side may carry extra variables (`ours@GOMP_SPINCOUNT=0`) for
a study of the policy (`ours@OMP_NUM_THREADS=1`), and `ours_grouped` is ours with --group-by-length. A paused side's OpenMP threads sleep after their spin; the first chunk (warm-up) is not
counted. Take these on a quiet machine: the two sides share it with nothing but each other's idle processes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHUNK = 8
"""Training steps a side runs before it hands the machine to the other side."""
BUSY_LOOP = "while True:\n    pass\n"
THREADING = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


# ---- a worker: one side, run as `python -m bench._finetune_shapes --worker SIDE LxH ROWS EPOCHS` ----


def _worker(side: str, shape: str, rows: int, epochs: int) -> None:
    started = time.perf_counter()
    import torch  # first: libgomp reads its environment now, before anything imports process/ (which sets ours)

    layers, hidden = map(int, shape.split("x"))
    from bench.finetune_vs_trainer import setup

    s = setup(layers=layers, hidden=hidden, train=rows, valid=8, max_len=128)
    model = s.new_model()
    waited = 0.0
    steps = 0

    def pause(module, args, kwargs):
        nonlocal waited, steps
        if not module.training:
            return
        if steps % CHUNK == 0:
            print(json.dumps({"steps": steps, "t": time.perf_counter()}), flush=True)
            t = time.perf_counter()
            if sys.stdin.readline().strip() != "go":
                os._exit(0)
            waited += time.perf_counter() - t
        steps += 1

    model.register_forward_pre_hook(pause, with_kwargs=True)
    if side == "trainer":
        _train_with_trainer(s, model, epochs)
    else:
        _train_with_ours(s, model, epochs, grouped=side == "ours_grouped")
    print(json.dumps({"done": True, "steps": steps, "t": time.perf_counter(), "threads": torch.get_num_threads(),
                      "process_s": time.perf_counter() - started - waited}), flush=True)
    sys.stdin.readline()


def _train_with_ours(s, model, epochs: int, grouped: bool = False) -> None:
    from downstream.finetune import loop
    from downstream.finetune.job import Progress

    loop.train(s.task, model, s.train_features, s.one, s.valid_examples[:1], loop.Recipe(epochs=epochs, batch_size=32, group_by_length=grouped),
               lr=1e-3, seed=0, progress=Progress(1, print_fn=lambda *a, **k: None), label="")


def _train_with_trainer(s, model, epochs: int) -> None:
    import tempfile

    from transformers import Trainer, TrainingArguments

    from bench.finetune_loop import pad_batch

    with tempfile.TemporaryDirectory(prefix="bench-trainer.") as out:
        targs = TrainingArguments(output_dir=out, per_device_train_batch_size=32, num_train_epochs=epochs, learning_rate=1e-3,
                                  warmup_steps=0.1, weight_decay=0.01, lr_scheduler_type="linear", max_grad_norm=1.0, seed=0,
                                  save_strategy="no", eval_strategy="no", report_to=[], logging_strategy="no", use_cpu=True,
                                  dataloader_num_workers=0, disable_tqdm=True)
        Trainer(model=model, args=targs, train_dataset=s.rows, data_collator=pad_batch).train()


# ---- the driver ----


def side_env(side: str) -> dict[str, str]:
    """The environment of a side: `ours` with clozeforge's defaults, `trainer` with libgomp's own, then the side's
    `@NAME=VALUE,...` extras."""
    from process import cpu_sharing

    name, _, extra = side.partition("@")
    env = {k: v for k, v in os.environ.items() if k not in THREADING}
    if name.startswith("ours"):
        cpu_sharing.apply(env)
    env.update(dict(item.split("=", 1) for item in extra.split(",") if item))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


class _Side:
    def __init__(self, side: str, shape: str, rows: int, epochs: int):
        self.name = side
        self.proc = subprocess.Popen([sys.executable, "-m", "bench._finetune_shapes", "--worker", side.partition("@")[0], shape,
                                      str(rows), str(epochs)], cwd=ROOT, env=side_env(side), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.last = self._read()  # paused before its first step
        self.rates: list[float] = []
        self.seconds, self.steps_timed = 0.0, 0
        self.done: dict | None = None

    def _read(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"bench finetune_vs_trainer: the {self.name} worker exited {self.proc.wait()}")
            if line.startswith("{\""):  # not Trainer's own printed dicts
                return json.loads(line)

    def chunk(self, counted: bool) -> None:
        """Let it run one chunk; record its steps per second (`counted`: not the warm-up)."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        went = time.perf_counter()
        now = self._read()
        took, steps = time.perf_counter() - went, now["steps"] - self.last["steps"]
        if counted and steps:
            self.rates.append(steps / took)
            self.seconds += took
            self.steps_timed += steps
        self.last = now
        if now.get("done"):
            self.done = now
            self.proc.stdin.write("end\n")
            self.proc.stdin.flush()
            self.proc.wait()


def paired(sides: list[str], shape: str, rows: int, epochs: int, busy: bool = False) -> dict:
    """Run `sides` against each other, a chunk at a time; their figures and the ratios to the last side."""
    rival = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if busy else None
    try:
        workers = [_Side(side, shape, rows, epochs) for side in sides]
        batch = 32
        round_ = 0
        ratios: dict[str, list[float]] = {w.name: [] for w in workers[:-1]}
        while not all(w.done for w in workers):
            order = workers if round_ % 2 == 0 else workers[::-1]
            for w in order:
                if not w.done:
                    w.chunk(counted=round_ > 0)
            if round_ > 0 and all(len(w.rates) == len(workers[-1].rates) for w in workers) and workers[-1].rates:
                for w in workers[:-1]:
                    ratios[w.name].append(w.rates[-1] / workers[-1].rates[-1])
            round_ += 1
    finally:
        if rival:
            rival.kill()
            rival.wait()
    base = workers[-1]
    out = {}
    for w in workers:
        out[w.name] = {"loop_examples_per_s": round(w.steps_timed * batch / w.seconds, 1) if w.seconds else None,
                       "process_examples_per_s": round(rows * epochs / w.done["process_s"], 1),
                       "process_s": round(w.done["process_s"], 2), "threads": w.done["threads"],
                       "env": {k: v for k, v in side_env(w.name).items() if k in THREADING}}
    for w in workers[:-1]:
        out[w.name]["loop_ratio"] = round(statistics.median(ratios[w.name]), 3) if ratios[w.name] else None
        mine, theirs = out[w.name]["loop_examples_per_s"], out[base.name]["loop_examples_per_s"]
        out[w.name]["loop_ratio_total"] = round(mine / theirs, 3) if mine and theirs else None
        out[w.name]["process_ratio"] = round(base.done["process_s"] / w.done["process_s"], 3)
        out[w.name]["rounds"] = len(ratios[w.name])
    return out


def main(shapes: str, contended: bool, quick: bool, sides: tuple[str, ...] = ("ours", "trainer")) -> dict:
    rows, epochs = (768, 1) if quick else (2048, 2)  # quick: 24 steps, the first chunk of 8 a warm-up
    result: dict = {"rows": rows, "epochs": epochs, "batch_size": 32, "chunk_steps": CHUNK, "precision": "fp32",
                    "sides": list(sides), "ratios_against": sides[-1]}
    for shape in shapes.split(","):
        result[shape] = {"quiet": paired(list(sides), shape, rows, epochs)}
        if contended:
            result[shape]["beside_busy_loop"] = paired(list(sides), shape, rows, epochs, busy=True)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
