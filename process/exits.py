"""How every clozeforge command ends: with its status, whatever signal arrives while it exits.

In:  the status a command's main() returned, or what went wrong. Out: the process exits with it (`exit_with`);
     `fail` says an error in one line. Standard library only, so `clozeforge prep` on a Dataflow worker (no torch)
     and `python -m trainer.pretrain` (no Beam) both use it.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from typing import NoReturn

_past_teardown = False


def exit_past_teardown() -> None:
    """Have `exit_with` end this process without the interpreter's teardown: atexit's functions run and the standard
    streams are flushed, then os._exit, as multiprocessing ends its children. For a process that joined a
    torch.distributed process group (trainer/run/runtime.py, downstream/finetune/ranks.py).

    NOTE: a gloo worker thread that drops a tensor once the interpreter has begun to finalize wants the GIL it can no
    longer have: the thread is unwound through C++ code that may not throw, and the process aborts ("terminate called
    without an active exception", status 134) after a run that finished and saved everything; seen in CI now and then
    on a loaded machine (a 2-rank ZeRO-2 and a ZeRO-3 run). Ending the group early (destroy_process_group) is not
    enough while anything still holds it: DeepSpeed's ZeRO-3 keeps the model, and through its parameters the group,
    to the process's end."""
    global _past_teardown
    _past_teardown = True


def exit_with(status: int) -> NoReturn:
    """Exit this process with `status`, also when a SIGTERM/SIGINT arrives while it exits.

    Schedulers and launchers signal a job as it ends (a time limit reached in the last step, a launcher passing
    its own signal on after the run completed). By then the command has finished and the signal has nothing
    left to stop, but Python puts the default handlers back while the interpreter shuts down, so the process
    would die of the signal: status 143 for a complete run, which a scheduler reports as a failure."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    if _past_teardown:
        atexit._run_exitfuncs()  # what was registered to run at exit (logging's flush, ...), in this whole interpreter
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed or broken pipe: nothing more can be said on it
                pass
        os._exit(status)
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
