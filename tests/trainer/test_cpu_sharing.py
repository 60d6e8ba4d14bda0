"""trainer/cpu_sharing.py: the OpenMP defaults reach torch's OpenMP runtime in every process clozeforge starts,
and a user's own setting wins."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT
from trainer import cpu_sharing


def test_apply_sets_only_what_the_user_left_unset():
    env = {"OMP_WAIT_POLICY": "ACTIVE", "PATH": "/bin"}
    assert cpu_sharing.apply(env) == {}
    assert env["OMP_WAIT_POLICY"] == "ACTIVE"
    env = {"PATH": "/bin"}
    assert cpu_sharing.apply(env) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert env == {"PATH": "/bin", "OMP_WAIT_POLICY": "PASSIVE"}


def test_intra_op_threads_split_the_usable_cores():
    cores = cpu_sharing.usable_cores()
    assert cpu_sharing.intra_op_threads(1) == cores
    assert cpu_sharing.intra_op_threads(cores + 1) == 1  # never 0, never more threads than cores
    assert cpu_sharing.intra_op_threads(2) == max(1, cores // 2)


def _gomp_settings(code: str, **extra: str) -> dict[str, str]:
    """The wait policy and spin count that torch's libgomp reports (OMP_DISPLAY_ENV) in a fresh interpreter that
    runs `code` with none of the threading variables set unless given in `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in cpu_sharing.DEFAULTS and k != "GOMP_SPINCOUNT"}
    env.update({"PYTHONPATH": ROOT, "OMP_DISPLAY_ENV": "VERBOSE", **extra})
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    settings = {}
    for line in done.stderr.splitlines():
        name, _, value = line.strip().partition(" = ")
        if name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
            settings[name] = value.strip("'")
    return settings


def test_torch_loaded_through_the_trainer_package_sleeps_instead_of_spinning():
    # torch alone: libgomp spins 300,000 times before a waiting thread sleeps
    assert _gomp_settings("import torch")["GOMP_SPINCOUNT"] != "0"
    # through any trainer module (every entry point imports one before torch): no spinning
    assert _gomp_settings("import trainer.model")["GOMP_SPINCOUNT"] == "0"
    # and the ranks a launcher starts inherit it from the launching process's environment
    child = ("import os, subprocess, sys; import trainer.pretrain; "
             "sys.exit(subprocess.run([sys.executable, '-c', 'import torch']).returncode)")
    assert _gomp_settings(child)["GOMP_SPINCOUNT"] == "0"
    # a user's own choice is kept
    assert _gomp_settings("import trainer.model", OMP_WAIT_POLICY="ACTIVE")["OMP_WAIT_POLICY"] == "ACTIVE"
