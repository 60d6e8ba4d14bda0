"""process/cpu_sharing.py: the OpenMP defaults reach torch's OpenMP runtime in every process clozeforge starts,
and a user's own setting wins."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from process import cpu_sharing
from tests.helpers import ROOT


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


_FAULTS = """
import resource, sys
import numpy as np
from process import cpu_sharing
print(cpu_sharing.keep_freed_memory() if sys.argv[1] == "keep" else "-")
for i in range(6):
    if i == 1:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = np.ones(10_000_000, dtype=np.float32)  # 40 MB: over the 32 MiB that glibc's own threshold tops out at
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, **extra: str) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k not in cpu_sharing.MALLOC_VARIABLES}
    done = subprocess.run([sys.executable, "-c", _FAULTS, mode], cwd=ROOT, env={**env, "PYTHONPATH": ROOT, **extra},
                          capture_output=True, text=True, timeout=600, check=True)
    setting, faults = done.stdout.split()
    return setting, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_training_process_reuses_freed_blocks_instead_of_faulting_them_in_again():
    # glibc's default: every 40 MB block is mapped fresh and faulted in again, 5 blocks after the first: at least 20
    # faults a block even where numpy asks for 2 MiB pages (numpy 2.0: ~57 a block; 2.4: ~570, the kernel mapping
    # several 4 KiB pages per fault); kept: none after the first
    assert _faults("default")[1] >= 5 * 20
    setting, faults = _faults("keep")
    assert setting == "True" and faults < 50
    # a user's own glibc setting wins: nothing is changed
    setting, faults = _faults("keep", MALLOC_MMAP_THRESHOLD_="131072")
    assert setting == "False" and faults >= 5 * 20
