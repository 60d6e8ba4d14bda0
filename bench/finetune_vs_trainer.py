"""Benchmark `finetune-vs-trainer`: `clozeforge finetune`'s loop against transformers' Trainer on a mixed-length task.

    python bench/run.py finetune_vs_trainer [--quick]
    python bench/run.py finetune_vs_trainer --shapes 2x128,4x256,6x384 [--contended] [--quick]   (below: `shapes_main`)

In:  one randomly initialised transformers BertForSequenceClassification (mini: 4 layers x 256, vocabulary 30,522;
     --quick: 2 x 32), the same weights for every side; a learnable mixed-length task: rows [CLS] w... [SEP] of
     uniform lengths 8..128 word pieces whose words (200 ids) lean to the lower or the upper half of them (65:35),
     the label saying which (a bag-of-words task a small model learns in an epoch or two); train and validation rows
     drawn apart. fp32 on the CPU (torch's threads as clozeforge's processes set them, bench/run.py).
Out: one JSON object: per side examples/s (train rows x epochs / the training call's seconds, the median over the
     rounds) and validation accuracy (downstream/finetune's own evaluation, after the timed call, the same for every
     side), `ratio` = ours with --group-by-length / Trainer (the issue's figure), `ratio_plain` = ours without it /
     Trainer. Sides: `ours` (loop.train as `clozeforge finetune` runs it), `ours_grouped` (--group-by-length),
     `trainer` (Trainer with a collator that pads each batch to its longest row, as ours cuts it; its defaults
     otherwise: no length grouping), `trainer_grouped` (its length-grouped sampler, for a like-for-like reading). Same
     batch size, epochs, lr, warm-up ratio, linear decay, weight decay, clipping; no evaluation and no checkpoint
     inside either timed call (ours scores one validation row per epoch, its loop's fixed cost). The sides run in
     turn, the order reversed each round. Needs `accelerate` for Trainer (pip install 'clozeforge[bench]').
     Timing needs a quiet machine: a figure from a busy one says nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

WORDS = 200
"""The task's words: ids 1000..1199, half of them leaning to each label."""
SIDES = ("ours", "ours_grouped", "trainer", "trainer_grouped")


def task_rows(n: int, max_len: int, vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids (n, max_len) zero-padded, lengths, labels): lengths uniform in 8..max_len; label 1 rows draw 65% of their
    words from the upper half of WORDS ids from 1000, label 0 rows 65% from the lower half (few enough words that
    each is seen often in training, so validation rows are made of known words)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min(8, max_len), max_len + 1, size=n)
    labels = rng.integers(0, 2, size=n)
    middle, top = 1000 + WORDS // 2, min(1000 + WORDS, vocab)
    ids = np.zeros((n, max_len), dtype=np.int64)
    for i, (length, label) in enumerate(zip(lengths, labels)):
        upper = rng.random(length - 2) < (0.65 if label else 0.35)
        words = np.where(upper, rng.integers(middle, top, length - 2), rng.integers(1000, middle, length - 2))
        ids[i, :length] = [101, *words, 102]  # BERT's [CLS] and [SEP] ids
    return ids, lengths, labels


def _features(ids: np.ndarray, labels: np.ndarray):
    import torch

    from downstream.finetune.tasks import Features

    tensors = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy((ids != 0).astype(np.int64)),
               "token_type_ids": torch.zeros(ids.shape, dtype=torch.int64), "labels": torch.from_numpy(labels)}
    return Features(tensors, np.arange(len(ids)))


@dataclasses.dataclass
class Setup:
    """What every side starts from: the task, its features (ours) and rows (Trainer's), and the same initial weights."""
    task: object
    train_features: object
    valid_features: object
    valid_examples: list[dict]
    one: object
    """One validation row: what ours scores each epoch inside a timed call (its loop's fixed cost)."""
    rows: list[dict]
    """The training rows as Trainer's dataset: ids without padding, label."""
    new_model: Callable[[], object]
    """A BertForSequenceClassification with the shared initial weights."""


def setup(*, layers: int, hidden: int, train: int, valid: int, max_len: int) -> Setup:
    import torch
    import transformers

    from downstream.finetune import tasks
    from downstream.finetune.data import Split
    from schemas.tables import Account

    transformers.logging.set_verbosity_error()
    config = transformers.BertConfig(num_labels=2, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                                     intermediate_size=4 * hidden, max_position_embeddings=max(max_len, 128))
    ids, _, labels = task_rows(train + valid, max_len, config.vocab_size, seed=0)
    train_features, valid_features = _features(ids[:train], labels[:train]), _features(ids[train:], labels[train:])
    rows = [{"input_ids": ids[i][ids[i] != 0].tolist(), "labels": int(labels[i])} for i in range(train)]
    examples = [{"label": int(y), "line": i + 1} for i, y in enumerate(labels)]
    task = tasks.of("classify")
    task.prepare(Split("synthetic", "", examples[:train], Account("jsonl", read=train)), [])
    one = tasks.Features({k: v[:1] for k, v in valid_features.tensors.items()}, valid_features.example_of_row[:1])
    torch.manual_seed(0)
    initial = transformers.BertForSequenceClassification(config).state_dict()

    def new_model():
        model = transformers.BertForSequenceClassification(config)
        model.load_state_dict(initial)
        return model

    return Setup(task, train_features, valid_features, examples[train:], one, rows, new_model)


def measure(*, layers: int, hidden: int, train: int, valid: int, epochs: int, batch: int, max_len: int, lr: float,
            rounds: int) -> dict:
    import torch
    import transformers
    from transformers import Trainer, TrainingArguments

    from bench.finetune_loop import pad_batch, trainer_grouping
    from downstream.finetune import loop
    from downstream.finetune.job import Progress

    s = setup(layers=layers, hidden=hidden, train=train, valid=valid, max_len=max_len)
    task, train_features, valid_features, valid_examples, new_model = s.task, s.train_features, s.valid_features, s.valid_examples, s.new_model
    quiet = Progress(1, print_fn=lambda *a, **k: None)

    def ours(grouped: bool):
        model = new_model()
        started = time.perf_counter()
        loop.train(task, model, train_features, s.one, valid_examples[:1],
                     loop.Recipe(epochs=epochs, batch_size=batch, group_by_length=grouped), lr=lr, seed=0, progress=quiet, label="")
        return time.perf_counter() - started, model

    def theirs(grouped: bool):
        with tempfile.TemporaryDirectory(prefix="bench-trainer.") as out:
            targs = TrainingArguments(output_dir=out, per_device_train_batch_size=batch, num_train_epochs=epochs,
                                      learning_rate=lr, warmup_steps=0.1, weight_decay=0.01, lr_scheduler_type="linear",
                                      max_grad_norm=1.0, seed=0, save_strategy="no", eval_strategy="no", report_to=[],
                                      logging_strategy="no", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
                                      **trainer_grouping(grouped))
            trainer = Trainer(model=new_model(), args=targs, train_dataset=s.rows, data_collator=pad_batch)
            started = time.perf_counter()
            trainer.train()
            return time.perf_counter() - started, trainer.model

    run = {"ours": lambda: ours(False), "ours_grouped": lambda: ours(True), "trainer": lambda: theirs(False),
           "trainer_grouped": lambda: theirs(True)}
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    scores: dict[str, list[float]] = {side: [] for side in SIDES}
    for r in range(rounds):
        for side in (SIDES if r % 2 == 0 else SIDES[::-1]):  # the order reversed each round: drift hits every side
            took, model = run[side]()
            seconds[side].append(took)
            evaluation = loop.evaluate(task, model.cpu(), valid_features, valid_examples)
            scores[side].append(round(float(evaluation.metrics["accuracy"]), 4))
    rate = {side: round(train * epochs / statistics.median(seconds[side]), 1) for side in SIDES}
    return {"device": "cpu", "precision": "fp32", "model": f"{layers}x{hidden}", "train_rows": train, "valid_rows": valid,
            "epochs": epochs, "batch_size": batch, "max_len": max_len, "lr": lr, "rounds": rounds,
            **{f"{side}_examples_per_s": rate[side] for side in SIDES},
            **{f"{side}_accuracy": scores[side] for side in SIDES},
            "ratio": round(rate["ours_grouped"] / rate["trainer"], 3), "ratio_plain": round(rate["ours"] / rate["trainer"], 3),
            "ratio_like_for_like": round(rate["ours_grouped"] / rate["trainer_grouped"], 3),
            "torch": torch.__version__, "transformers": transformers.__version__}


def main(corpus: str | None, quick: bool, shapes: str | None = None, contended: bool = False) -> dict:
    del corpus  # a synthetic task: its length mix is the point, not its words
    if shapes or contended:  # each side in its own process, with its own defaults, at each shape
        return shapes_main(shapes or "2x128,4x256,6x384", contended, quick)
    if quick:
        return measure(layers=2, hidden=32, train=256, valid=128, epochs=1, batch=32, max_len=64, lr=1e-3, rounds=1)
    return measure(layers=4, hidden=256, train=2048, valid=512, epochs=3, batch=32, max_len=128, lr=3e-4, rounds=2)


# ---- --shapes: each side in its own process with its own defaults, paired a chunk of steps at a time ----
# Ours and Trainer run at once as two worker processes (bench/_finetune_shapes.py), each paused every CHUNK training
# steps: the driver lets one side run a chunk, then the other, alternating which goes first each round, so a drift in
# the machine's load hits both sides alike and the ratio is a median of per-round ratios. Each side's environment is
# its own default: ours with clozeforge's threading defaults (process/cpu_sharing.py, what `clozeforge finetune` runs
# with), Trainer's with libgomp's own (no OMP_WAIT_POLICY, no GOMP_SPINCOUNT), as a user's Trainer script runs. A side
# may carry extra variables for a study of the policy (`ours@OMP_NUM_THREADS=1`, `ours@GOMP_SPINCOUNT=1000`), and
# `ours_grouped` is ours with --group-by-length, `ours_whole` ours with --no-length-pieces. The first chunk (warm-up) is not counted; whole-process seconds are
# the worker's own less its pauses (interpreter start, imports, model, training, exit), the workers started one
# after the other.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUSY_LOOP = "while True:\n    pass\n"
THREADING = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
CHUNK = 8
"""Training steps a side runs before it hands the machine to the other side."""



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
    """One side's worker process (bench/_finetune_shapes.py), paused between chunks."""

    def __init__(self, side: str, shape: str, rows: int, epochs: int):
        self.name = side
        self.proc = subprocess.Popen([sys.executable, "-m", "bench._finetune_shapes", "--worker", side.partition("@")[0], shape,
                                      str(rows), str(epochs), str(CHUNK)], cwd=ROOT, env=side_env(side), stdin=subprocess.PIPE,
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


def shapes_main(shapes: str, contended: bool, quick: bool, sides: tuple[str, ...] = ("ours", "trainer")) -> dict:
    rows, epochs = (768, 1) if quick else (2048, 2)  # quick: 24 steps, the first chunk of 8 a warm-up
    result: dict = {"rows": rows, "epochs": epochs, "batch_size": 32, "chunk_steps": CHUNK, "precision": "fp32",
                    "sides": list(sides), "ratios_against": sides[-1]}
    for shape in shapes.split(","):
        result[shape] = {"quiet": paired(list(sides), shape, rows, epochs)}
        if contended:
            result[shape]["beside_busy_loop"] = paired(list(sides), shape, rows, epochs, busy=True)
    return result
