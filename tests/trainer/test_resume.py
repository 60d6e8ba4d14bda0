"""Resume: N steps, stop, resume for N more ⇒ the same losses at every step as 2N uninterrupted steps.

Runs for real: 2 ranks over gloo under the deepspeed launcher, ZeRO-2, fp32 on CPU, dropout on.
Tolerance: 1e-5 absolute on each logged loss (fp32 reductions over gloo are deterministic here; the bound
leaves room for summation-order noise, not for a different trajectory, which moves losses by >1e-3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import HANG_S, ROOT, free_port

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)


def train(prepped: str, run: str, *extra: str) -> None:
    command = [
        sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", str(free_port()),
        "--module", "trainer.pretrain", "--data", os.path.join(prepped, "pairs"), "--output", run,
        "--max-steps", "8", *extra, "--batch-size", "8", "--log-every", "1", "--eval-every", "0", "--save-every", "100",
        "--num-workers", "1", "--warmup-steps", "2", "--lr", "2e-3",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def losses(run: str) -> dict[int, float]:
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if "split" not in r}


def test_resume_matches_an_uninterrupted_run(prepped, tmp_path):
    straight, interrupted = str(tmp_path / "straight"), str(tmp_path / "interrupted")
    train(prepped, straight)
    train(prepped, interrupted, "--stop-after", "4")
    train(prepped, interrupted)  # the same RUN: resumes from step 4
    a, b = losses(straight), losses(interrupted)
    assert sorted(a) == sorted(b) == list(range(1, 9))
    for step in a:
        assert abs(a[step] - b[step]) <= 1e-5, (step, a[step], b[step])
    assert len(set(a.values())) > 1  # the loss moves, so equality is not trivial
