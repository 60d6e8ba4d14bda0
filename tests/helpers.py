"""What several test modules share: the repository root, the CLI as a user runs it, a free port, waits that fail
loudly at their bound, the digests of an output tree, the default masker for a manifest, the training pairs of
a prep output, the identity of a batch's rows, and the aten ops a training step dispatches (also on
`bench/run.py train --loop`'s line). Fixtures live in conftest.py; helpers here."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

from process.ports import free_port  # noqa: F401 (the tests use the trainer's own)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


HANG_S = 3600
"""How long a child process may run before a test calls it hung: a guard against hangs, never a speed
limit (a busy machine makes everything slower, and no test may fail for that)."""


def run_cli(*args: str, timeout: int = HANG_S, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m clozeforge ARGS` the way a user would; the output is kept for assertions."""
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    return subprocess.run([sys.executable, "-m", "clozeforge", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=full_env)


def poll_until(condition: Callable[[], bool], timeout: float = HANG_S, every: float = 0.2) -> bool:
    """Whether `condition()` held within `timeout` seconds, checked every `every` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


def wait_until(condition: Callable[[], bool], what: str, proc: subprocess.Popen | None = None, timeout: float = HANG_S) -> None:
    """Wait for `condition()`; fail naming `what` when `proc` exits first or `timeout` seconds pass (a hang)."""
    ended = lambda: proc is not None and proc.poll() is not None  # noqa: E731
    assert poll_until(lambda: condition() or ended(), timeout), f"{what}: not within {timeout:.0f} s (hung?)"
    assert condition(), f"{what}: the process exited first (status {proc.returncode if proc else None})"


def digest_tree(root: str) -> dict[str, str]:
    """{path under root: sha256} of every output file (not report.json, which records times, nor the lock files)."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name == "report.json" or name.startswith(".clozeforge"):  # the lock names its pid
                continue
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def learned_vocab_dir(path, texts: list[str], **config) -> str:
    """The vocabulary directory prep would write for `texts` (the project's learner; VocabConfig fields as
    keywords, vocab_size 1000 unless given).

    NOTE: not tokenizers' WordPieceTrainer: its token order changes from run to run (tokenizers issue #1794),
    which changes the ids, the initial weights they meet and so what a few-step model predicts."""
    from pipelines.wordpiece import (
        VocabConfig,
        basic_words,
        learn_wordpiece,
        write_vocab,
    )

    vocab = VocabConfig(**{"vocab_size": 1000, **config})
    counts = Counter(w for t in texts * 4 for w in basic_words(t, lowercase=vocab.lowercase, handle_chinese_chars=vocab.handle_chinese_chars))
    write_vocab(str(path), learn_wordpiece(counts.items(), vocab), vocab)
    return str(path)


def masker_for(manifest):
    """The default BERT masker for a manifest's vocabulary."""
    from tests.trainer.masking_helpers import Masker
    from trainer.masking import MaskingConfig

    return Masker.for_vocabulary(MaskingConfig(), manifest.read_vocab_tokens(), manifest.special_tokens["[MASK]"])


def row_keys(batch: dict) -> list[tuple]:
    """An identity for each row of a masked batch: its unmasked ids ([CLS] A [SEP] B [SEP]), the masked
    positions put back from the labels."""
    ids = batch["input_ids"].clone()
    for row in range(ids.shape[0]):
        keep = batch["mlm_labels"][row] != -100
        ids[row, batch["mlm_positions"][row][keep]] = batch["mlm_labels"][row][keep]
    return [tuple(r[m.bool()].tolist()) for r, m in zip(ids, batch["attention_mask"])]


def train_rows(url: str, source: str | None = None) -> Counter:
    """The training pairs of the prep output at `url` (of one named source, or all) as the rows the trainer
    feeds the model ([CLS] A [SEP] B [SEP]), counted."""
    import fsspec
    import pyarrow as pa

    from schemas import Manifest

    manifest, rows = Manifest.read(url), Counter()
    s = manifest.special_tokens
    for shard in manifest.split_shards("train"):
        with fsspec.open(manifest.resolve(shard.path), "rb") as f:
            table = pa.ipc.open_file(pa.BufferReader(f.read())).read_all()
        for a, b, src in zip(*(table.column(n).to_pylist() for n in ("tokens_a", "tokens_b", "source"))):
            if source is None or src == source:
                rows[(s["[CLS]"], *a, s["[SEP]"], *b, s["[SEP]"])] += 1
    return rows


@contextlib.contextmanager
def tmpfs(path, size: str):
    """A tmpfs of `size` (mount's spelling: 1m, 16m) mounted at the existing directory `path` for the block, to
    fill as a full disk; the test is skipped, with the reason, where one cannot be mounted (needs root or
    CAP_SYS_ADMIN)."""
    import pytest

    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or 'not root'}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def wait_for(condition, proc: subprocess.Popen, what: str, bound_s: float = HANG_S, poll_s: float = 0.2) -> None:
    """Poll `condition()` until it holds; fail loudly, naming `what`, if `proc` exits first or `bound_s` passes
    (a guard against hangs, as HANG_S: the test itself is bounded by steps)."""
    import time

    deadline = time.monotonic() + bound_s
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the process exited with status {proc.returncode} before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {bound_s:.0f} s")
        time.sleep(poll_s)


def glue_tsv(path, *, stray_tab_at: int | None = None) -> tuple[str, list[str]]:
    """A file in GLUE's SST-2 layout (sentence<TAB>label, no quoting) whose sentences often open with a double
    quote, as SST-2's do; returns the path and the sentences in order (the stray-tab row's excluded)."""
    sentences = []
    for i in range(40):
        text = f"the film number {i} is fine"
        if i % 4 == 0:
            text = f'" {text} , " he said'  # opens with a quote, closes it later on the line
        elif i % 4 == 1:
            text = f'"{text}'  # a quote never closed on its line
        sentences.append(text)
    lines = ["sentence\tlabel"] + [f"{s}\t{i % 2}" for i, s in enumerate(sentences)]
    if stray_tab_at is not None:  # a row with a tab inside its sentence: three fields
        lines.insert(stray_tab_at - 1, "a stray\ttab in this one\t1")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path), sentences


def random_batches(batch: int, seq: int, masked: int, vocab_size: int, *, count: int, device, seed: int = 0) -> list[dict]:
    """`count` model inputs of random ids, unpadded, with `masked` MLM targets a row and NSP labels, on `device`."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    batches = [{"input_ids": torch.randint(5, vocab_size, (batch, seq), generator=gen),
                "token_type_ids": torch.zeros(batch, seq, dtype=torch.long), "attention_mask": torch.ones(batch, seq, dtype=torch.long),
                "mlm_positions": torch.randint(1, seq, (batch, masked), generator=gen),
                "mlm_labels": torch.randint(5, vocab_size, (batch, masked), generator=gen),
                "next_sentence_label": torch.randint(0, 2, (batch,), generator=gen)} for _ in range(count)]
    return [{k: v.to(device) for k, v in b.items()} for b in batches]


def dispatched_ops(rt, *, preset: str = "tiny", batch: int = 4, seq: int = 16, steps: int = 5, vocab_size: int = 100,
                   grad_clip: float = 0.05) -> dict:
    """The aten ops one optimizer step dispatches, three ways, on three copies of one model: the trainer's engine
    (trainer.builders.build_engine, ZeRO 0, fp32), that engine with DeepSpeed's own stage-0 clipping and one-rank
    all-reduce put back, and a bare step (forward, backward, torch's clip_grad_norm_, AdamW). On a GPU each op
    outside a compiled graph is host work and most are a kernel launch; the counts are the same on every device
    and machine. Also how far apart the three copies' weights end (max abs, against DeepSpeed's own) after
    `steps` + 1 clipped steps (`grad_clip` binds), and how far those moved from the start (so apart ~ 0 means
    something). Needs the job's process group (trainer.run.runtime.start_runtime); counts in fp32 whatever `rt`'s
    precision (the bare step has no autocast)."""
    import copy
    import dataclasses

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from trainer.builders import build_engine
    from trainer.config import TrainConfig
    from trainer.model import BertForPretraining, ModelConfig
    from trainer.optim import adamw

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += 1
            return func(*args, **(kwargs or {}))

    rt = dataclasses.replace(rt, precision="fp32", autocast=False)
    config = TrainConfig(data="d", output="o", batch_size=batch, grad_clip=grad_clip, lr=1e-3, warmup_steps=0,
                         schedule="constant", zero_stage=0)
    batches = random_batches(batch, seq, 3, vocab_size, count=steps + 1, device=rt.device)
    model = BertForPretraining(ModelConfig.preset(preset, vocab_size=vocab_size), seed=0).to(rt.device)
    models = {name: copy.deepcopy(model) for name in ("trainer", "deepspeed", "bare")}
    engines = {"trainer": build_engine(models["trainer"], config, rt), "deepspeed": build_engine(models["deepspeed"], config, rt)}
    engines["deepspeed"].__dict__.pop("clip_fp32_gradients", None)  # DeepSpeed's own stage-0 step, as it comes
    engines["deepspeed"].enable_backward_allreduce = True
    optimizer = adamw(models["bare"], lr=config.lr, weight_decay=config.weight_decay, eps=1e-6)

    def engine_step(engine, batch):
        engine.backward(engine(**batch)["loss"])
        engine.step()

    def bare_step(batch):
        models["bare"](**batch)["loss"].backward()
        torch.nn.utils.clip_grad_norm_(models["bare"].parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step_of = {"trainer": lambda b: engine_step(engines["trainer"], b), "deepspeed": lambda b: engine_step(engines["deepspeed"], b),
               "bare": bare_step}
    ops = {}
    for name, step in step_of.items():
        torch.manual_seed(0)
        step(batches[0])  # the optimizer's state is made at its first step: not counted
        counter = Ops()
        with counter:
            for batch_ in batches[1:]:
                step(batch_)
        ops[name] = counter.count / steps
    state = {name: m.state_dict() for name, m in models.items()}
    apart = {name: max((state[name][k] - state["deepspeed"][k]).abs().max().item() for k in state[name]) for name in state}
    moved = max((state["deepspeed"][k] - model.state_dict()[k]).abs().max().item() for k in state["deepspeed"])
    return {"ops_per_step": ops, "apart": apart, "moved": moved, "parameter_tensors": len(list(model.parameters()))}


RANK_THREADS = r"""
import importlib, json, os, sys

def native_threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended while listed
            pass
    return sorted(names)

entry, teardown, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
owner_name, name = teardown.rsplit(".", 1)
owner = importlib.import_module(owner_name)
real, before = getattr(owner, name), []

def recorded(*args, **kwargs):
    before.extend(native_threads())
    return real(*args, **kwargs)

setattr(owner, name, recorded)
module, function = entry.rsplit(".", 1)
status = getattr(importlib.import_module(module), function)(argv)
from process import exits
print("THREADS " + json.dumps({"before_teardown": before, "at_exit": native_threads(),
                               "past_teardown": exits._past_teardown}), flush=True)
sys.exit(status)
"""


def rank_threads(entry: str, teardown: str, argv: list[str], nproc: int = 2) -> list[dict[str, list[str]]]:
    """Run `nproc` ranks of a command's main (`entry`, "module.function") on this machine, as its launcher starts them,
    and return each rank's native thread names (Linux's /proc/self/task) as its `teardown` ("module.function", the
    name the command calls) begins and once the main has returned (what the interpreter is left to tear down), and
    whether the process would leave past that teardown (process/exits.py)."""
    from process.launch import rank_env

    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", RANK_THREADS, entry, teardown, *argv], cwd=ROOT,
                              env={**rank_env(rank, nproc, port), "PYTHONWARNINGS": "ignore"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(nproc)]
    found = []
    for proc in procs:
        out, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0, (out[-2000:], err[-3000:])
        found.append(json.loads(out.rsplit("THREADS ", 1)[1]))
    return found


GROUP_THREADS = ("gloo", "tcpstore")
"""What torch names the native threads of a gloo process group and of its TCPStore (pt_gloo_runloop, gloo_tcp_loop,
pt_tcpstore_uv)."""


def group_threads(names: list[str]) -> list[str]:
    """The process group's threads among native thread `names` (rank_threads)."""
    return sorted(n for n in names if any(word in n for word in GROUP_THREADS))
