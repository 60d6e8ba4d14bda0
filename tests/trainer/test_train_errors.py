"""`clozeforge train` refuses a bad flag or referenced file in one line, exit 2, before any rank starts and
before DeepSpeed is imported; DeepSpeed's accelerator-detection warning stays out of the terminal unless
--verbose. Each case is the real command in its own process (a few seconds of imports, no training)."""

from __future__ import annotations

import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.integration  # starts the CLI


def one_line_error(result, message: str) -> None:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr[-3000:]
    assert "rank" not in result.stdout + result.stderr  # no rank started


@pytest.mark.parametrize("nproc", ["1", "2"])
def test_a_negative_mixture_weight_is_one_line(tmp_path, nproc):
    result = run_cli("train", "--data", str(tmp_path / "pairs"), "--output", str(tmp_path / "run"), "--nproc-per-node", nproc,
                     "--mix", f"a={tmp_path / 'pairs'},weight=-1")
    one_line_error(result, "--mix: component")
    assert "weight must be a positive number, got -1.0" in result.stderr


def test_a_bad_mix_under_the_deepspeed_launcher_is_said_once(tmp_path):
    """Issue 26's closing note: under `deepspeed`, which starts the ranks itself, every rank checked --mix and
    printed the same line. Rank 0 says it now; the others exit with it quietly."""
    import os
    import subprocess
    import sys

    from tests.helpers import HANG_S, ROOT, free_port

    pytest.importorskip("deepspeed")
    command = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", str(free_port()),
               "--module", "trainer.pretrain", "--data", str(tmp_path / "pairs"), "--output", str(tmp_path / "run"),
               "--mix", f"a={tmp_path / 'pairs'},weight=-1"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_S,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    said = [line for line in (result.stdout + result.stderr).splitlines() if "--mix: component" in line]
    assert result.returncode != 0 and len(said) == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert said[0].startswith("clozeforge train: error: --mix: ") and "weight must be a positive number, got -1.0" in said[0]


def test_files_are_checked_before_the_ranks_start(tmp_path):
    result = run_cli("train", "--data", str(tmp_path / "pairs"), "--output", str(tmp_path / "run"), "--nproc-per-node", "2",
                     "--deepspeed-config", str(tmp_path / "missing.json"))
    one_line_error(result, "--deepspeed-config")
    result = run_cli("train", "--data", str(tmp_path / "no-pairs"), "--output", str(tmp_path / "run"), "--nproc-per-node", "2")
    one_line_error(result, "no-pairs")


def test_an_output_under_a_file_is_a_user_error(tmp_path):
    (tmp_path / "a-file").write_text("")
    result = run_cli("train", "--data", str(tmp_path / "pairs"), "--output", str(tmp_path / "a-file" / "run"))
    one_line_error(result, f"--output {tmp_path / 'a-file' / 'run'}: {tmp_path / 'a-file'} is a file, not a directory")


def test_deepspeed_start_up_lines_only_with_verbose(tmp_path):
    flags = ("train", "--data", str(tmp_path / "no-pairs"), "--output", str(tmp_path / "run"))  # fails after DeepSpeed starts
    quiet, verbose = run_cli(*flags), run_cli(*flags, "--verbose")
    assert quiet.returncode == verbose.returncode == 2
    assert quiet.stderr.count("\n") == 1 and "no-pairs" in quiet.stderr and "accelerator" not in quiet.stdout + quiet.stderr
    import torch

    if not torch.cuda.is_available():  # DeepSpeed says so only where it finds no accelerator
        assert "Setting accelerator to CPU" in verbose.stdout + verbose.stderr
