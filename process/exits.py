"""How every clozeforge command ends: with its status, whatever signal arrives while it exits.

In:  the status a command's main() returned, or what went wrong. Out: the process exits with it (`exit_with`);
     `fail` says an error in one line. Standard library only, so `clozeforge prep` on a Dataflow worker (no torch)
     and `python -m trainer.pretrain` (no Beam) both use it.
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn


def exit_with(status: int) -> NoReturn:
    """Exit this process with `status`, also when a SIGTERM/SIGINT arrives while it exits.

    Schedulers and launchers signal a job as it ends (a time limit reached in the last step, a launcher passing
    its own signal on after the run completed). By then the command has finished and the signal has nothing
    left to stop, but Python puts the default handlers back while the interpreter shuts down, so the process
    would die of the signal: status 143 for a complete run, which a scheduler reports as a failure."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(status)


def fail(command: str, message: str, status: int = 2) -> int:
    """Say what went wrong in one line, `clozeforge COMMAND: error: MESSAGE`, on stderr; return `status` (2: the
    user's input or flags, as argparse exits) for the command's main() to return."""
    print(f"clozeforge {command}: error: {message}", file=sys.stderr, flush=True)
    return status


def one_line(error: BaseException) -> str:
    """The message of an error, also when a DataLoader worker raised it: torch re-raises a worker's exception
    in the main process with the worker's whole traceback in the message, whose last line is the error."""
    text = str(error).strip()
    if "Original Traceback" not in text:
        return text
    last = text.splitlines()[-1]
    name = f"{type(error).__module__}.{type(error).__qualname__}: "
    return last[len(name):] if last.startswith(name) else last.split(": ", 1)[-1]
