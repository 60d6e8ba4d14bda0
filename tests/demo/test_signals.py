"""`clozeforge demo` under signals, run as a user runs it: Ctrl-C (SIGINT to the demo) during training keeps the
trainer's checkpoint and exits 130 with no traceback; a trainer stopped alone is never reported as done; the
same command then continues from the checkpoint. Every run starts in a folder whose `clozeforge/`, `trainer/`
and `pipelines/` would shadow the real packages for a child that put the working directory on sys.path.

Bounded by steps: the demo trains STEPS steps and logs every STEPS // 20, so the first metrics record appears
long before the end; the time-outs only stop a hung test."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import psutil
import pytest

from tests.helpers import HANG_S, ROOT, wait_for

pytestmark = pytest.mark.integration  # starts the demo and its stages

STEPS = 200
FLAGS = ["--corpus-mb", "0.1", "--steps", str(STEPS), "--ranks-check-steps", "0", "--finetune-seeds", "1"]
"""One fine-tuning seed: the continued demo runs its last stage (pretrained and scratch) in a third of the time."""


@pytest.fixture
def shadowing_cwd(tmp_path):
    """A working directory holding packages named like ours that fail on import."""
    for name in ("clozeforge", "trainer", "pipelines"):
        (tmp_path / "cwd" / name).mkdir(parents=True)
        (tmp_path / "cwd" / name / "__init__.py").write_text(f"raise SystemExit('the working directory shadowed {name}')\n")
    return tmp_path / "cwd"


def start_demo(cwd, work) -> subprocess.Popen:
    # the script, not -m: its own directory (the checkout) goes first on sys.path, whatever the working directory holds
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "clozeforge.py"), "demo", "--workdir", str(work), *FLAGS],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"})


def trained(work) -> bool:
    path = os.path.join(work, "run", "metrics.jsonl")
    return os.path.exists(path) and any("split" not in json.loads(line) for line in open(path) if line.strip())


def saved_step(work) -> int:
    with open(os.path.join(work, "run", "checkpoints", "latest")) as f:
        return int(f.read().strip().removeprefix("step_"))


def trainer_of(demo: subprocess.Popen) -> psutil.Process:
    return next(p for p in psutil.Process(demo.pid).children() if "trainer.pretrain" in p.cmdline())


def test_ctrl_c_during_training_keeps_the_checkpoint_and_exits_130(shadowing_cwd, tmp_path):
    work = tmp_path / "demo"
    demo = start_demo(shadowing_cwd, work)
    wait_for(lambda: trained(work), demo, "the first training steps")
    demo.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C does: the stage runs in its own session
    out, err = demo.communicate(timeout=HANG_S)
    assert demo.returncode == 130, err[-3000:]
    step = saved_step(work)
    assert 0 < step < STEPS
    assert "Traceback" not in err and "done in" not in out
    assert f"train stopped before its end (SIGINT); checkpoint at step {step} of {STEPS}" in err
    assert f"Run `clozeforge demo --workdir {work} {' '.join(FLAGS)}` to continue." in err
    assert not os.path.exists(work / "hf")


def test_a_trainer_stopped_alone_is_not_done_and_the_demo_continues(shadowing_cwd, tmp_path):
    work = tmp_path / "demo"
    demo = start_demo(shadowing_cwd, work)
    wait_for(lambda: trained(work), demo, "the first training steps")
    trainer_of(demo).send_signal(signal.SIGINT)  # it checkpoints and exits 0 with fewer steps than asked
    out, err = demo.communicate(timeout=HANG_S)
    assert demo.returncode == 130, err[-3000:]
    step = saved_step(work)
    assert 0 < step < STEPS and "done in" not in out and not os.path.exists(work / "hf")
    assert f"train stopped before its end; checkpoint at step {step} of {STEPS}" in err

    again = start_demo(shadowing_cwd, work)  # the same command continues
    out, err = again.communicate(timeout=HANG_S)
    assert again.returncode == 0, out[-3000:] + err[-3000:]
    assert f"resumed from step_{step:08d} at step {step}" in out
    assert "== prep: reusing" in out and "$ " + sys.executable + " -P -m pipelines.prep" not in out  # not redone
    assert saved_step(work) == STEPS and "done in" in out and "[MASK] 1:" in out
    assert re.search(r"exported .* -> ", out) and os.path.exists(work / "hf" / "model.safetensors")
    # each arm's rate is whichever of the demo's grid (1e-3, 3e-3) validated best: a numerical outcome, not a constant
    assert re.search(r"pretrained +test accuracy [0-9.]+ ± 0\.00 +\(lr 0\.00[13] of its grid 0\.001/0\.003, [0-9]+ epochs, 1 seeds?\) +gain", out), out[-3000:]
    for task in ("man-sections", "info-pairs", "licences"):  # the built-in tasks' gains, then their mean
        assert re.search(rf"\| {task} \| accuracy \| [0-9.]+ ± 0\.0 \(lr 0\.00[13]\) \| [0-9.]+ ± 0\.0 \(lr 0\.00[13]\) \| [-+][0-9.]+ ± 0\.0 \|", out), out[-3000:]
    assert re.search(r"\| \*\*mean of 3\*\* \| \| \| \| \*\*[-+][0-9.]+ ± 0\.0\*\* \|", out)
    assert os.path.exists(work / "finetune" / "gains.md")
