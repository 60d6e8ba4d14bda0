"""One demo stage as its own process: the command a user would type, supervised until it ends.

In:  a title, a command line (`stage_command(module)`'s interpreter and flags), and what an unfinished stage kept.
Out: the stage's exit, or `Interrupted` (a signal to the demo or to the stage alone stopped it: the message says
     what it saved) or SystemExit (it failed: its exit status). Ctrl-C and SIGTERM to the demo reach the stage once.

The child runs in its own session so that a terminal's Ctrl-C reaches it once, through here (twice would stop a
trainer at once, without its checkpoint), and gets SIGTERM when the demo dies, even by kill -9 (Linux's
parent-death signal), so a trainer checkpoints and exits instead of running on unseen in its own session.
"""

from __future__ import annotations

import ctypes
import os
import signal
import site
import subprocess
import sys
import time
from collections.abc import Callable

from process.launch import module_command  # standard library only
from schemas import run_dir


class Interrupted(Exception):
    """A stage stopped before its end (a signal to the demo or to the stage's own process); the message says
    what it saved."""


def stage_command(module: str) -> list[str]:
    """`python -m MODULE` whatever the working directory holds (process/launch.py's module_command, as a stage's
    own ranks start); PYTHONPATH (see _child_env) names where ours are."""
    return module_command(module)


def _child_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where this package and its siblings were imported from
    if here not in site.getsitepackages() + [site.getusersitepackages()]:  # a checkout, or an editable install
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def _die_with_parent() -> None:
    """In the child, before exec (Linux): SIGTERM when the demo dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_stage(title: str, command: list[str], saved: Callable[[], str | None] = lambda: None) -> None:
    """Run one stage as its own process and wait for it; SIGINT/SIGTERM to the demo is passed on to it. `saved()`
    says what an unfinished stage kept (None: the stage is complete); a stage stopped by a signal, to the demo or
    to the child alone, raises Interrupted instead of reporting success."""
    print(f"\n== {title}\n$ {' '.join(command)}", flush=True)
    started, signals, child = time.time(), [], []

    def forward(signum, _frame) -> None:
        signals.append(signum)
        print(f"\nclozeforge demo: {signal.Signals(signum).name}: passed on to {title}; waiting for it to save and exit",
              file=sys.stderr, flush=True)
        if child:
            child[0].send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        child.append(subprocess.Popen(command, env=_child_env(), start_new_session=True, preexec_fn=_die_with_parent))
        if signals:  # arrived while it was starting
            child[0].send_signal(signals[-1])
        status = child[0].wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    kept = saved()
    if signals or status in (130, -signal.SIGINT, -signal.SIGTERM) or (status == 0 and kept):
        raise Interrupted(f"{title} stopped before its end{f' ({signal.Signals(signals[0]).name})' if signals else ''}; "
                          + (kept or "nothing of it is kept"))
    if status != 0:
        raise SystemExit(f"clozeforge demo: {title} failed with exit status {status}")
    print(f"-- {title}: {time.time() - started:.0f} s", flush=True)


def training_kept(run: str, steps: int) -> Callable[[], str | None]:
    """For run_stage: None once the run's checkpoint is at `steps`, else what is kept. `clozeforge train` stopped
    by a signal exits 0 after its checkpoint, like a complete run: the step of RUN/checkpoints/latest (the newest
    complete checkpoint, schemas/run_dir.py) tells them apart."""
    def kept() -> str | None:
        step = run_dir.latest_step(run)
        if step == steps:
            return None
        return f"checkpoint at step {step} of {steps} in {run}" if step else f"no checkpoint yet in {run}"
    return kept
