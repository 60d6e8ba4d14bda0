"""How every clozeforge command ends: with its status, whatever signal arrives while it exits.

In:  the status a command's main() returned. Out: the process exits with it. Standard library only, so
`clozeforge prep` on a Dataflow worker (no torch) and `python -m trainer.pretrain` (no Beam) both use it.
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
