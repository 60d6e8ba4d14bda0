"""A study's stages: each the `clozeforge` command a user would type, in its own process.

In:  the command's arguments, the study's log file and its name. Out: the stage's seconds and output (also appended
     to the log after the command line); a failed stage ends the study in one line naming the log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def clozeforge(*args: str, log: str, study: str) -> tuple[float, str]:
    """Run `clozeforge ARGS` from the repository root; (its wall seconds, what it printed, both streams)."""
    command = [sys.executable, "-m", "clozeforge", *args]
    started = time.time()
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(command)}\n")
        f.flush()
        offset = f.tell()
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                              env={**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"})
    if done.returncode:
        raise SystemExit(f"experiments {study}: {args[0]} failed (exit {done.returncode}); see {log}")
    with open(log, encoding="utf-8") as f:
        f.seek(offset)
        said = f.read()
    elapsed = time.time() - started
    print(f"   {args[0]}: {elapsed:.0f} s", flush=True)
    return elapsed, said
