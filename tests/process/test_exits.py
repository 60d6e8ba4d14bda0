"""process/exits.py: how a command's process ends; past the interpreter's teardown once it joined a process group."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import HANG_S, ROOT

ENDING = r"""
import atexit, sys
from process import exits

class Collected:  # an object the interpreter's teardown collects: its __del__ says the teardown ran
    def __del__(self):
        print("torn down", flush=True)

kept = Collected()
atexit.register(lambda: print("atexit ran", flush=True))
if sys.argv[1] == "past":
    exits.exit_past_teardown()
sys.stdout.write("buffered, not flushed")
exits.exit_with(3)
"""


@pytest.mark.parametrize("mode", ["plain", "past"])
def test_a_process_past_its_teardown_keeps_its_status_output_and_atexit(mode):
    """After exit_past_teardown the process ends with its status, what it wrote (flushed for it) and what atexit
    holds, and without the teardown that collects its objects: a gloo thread finishing a collective then aborted a
    finished rank now and then (exits.py's note). Without it, the teardown runs as ever."""
    done = subprocess.run([sys.executable, "-c", ENDING, mode], cwd=ROOT, capture_output=True, text=True, timeout=HANG_S,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 3, done.stderr[-2000:]
    assert "atexit ran" in done.stdout and "buffered, not flushed" in done.stdout
    assert ("torn down" in done.stdout) == (mode == "plain")
