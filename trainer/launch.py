"""`clozeforge train`: run trainer.pretrain here, or start N ranks of it on this machine and look after them.

In:  trainer.pretrain's flags, plus --nproc-per-node N (default 1).
Out: with N = 1, or when already inside a launcher (RANK is set), the training runs in this process. With
     N > 1 this process starts N `python -m trainer.pretrain` ranks (RANK, WORLD_SIZE, LOCAL_RANK,
     MASTER_ADDR/PORT set as torchrun sets them) and stays their parent until all have exited:
     - SIGTERM/SIGINT to it (a scheduler, Ctrl-C) is passed on once to every rank, which checkpoint at the
       step they agree on and exit 0; it waits GRACE_SECONDS for them, then kills what is left. A second
       signal is passed on too (the ranks then stop at once, without a checkpoint).
     - a rank that fails ends the others the same way, and the exit status is the first failure's.
     - kill -9 of this process leaves no orphans: each rank gets SIGTERM from the kernel (trainer/stopping.py).
     The ranks run in their own process group, so a terminal's Ctrl-C reaches them once, through here.
Multi-node jobs use `deepspeed` or `torchrun` (deploy/).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import NoReturn

GRACE_SECONDS = 120.0
"""How long the ranks have, after a forwarded signal or a failed rank, to checkpoint and exit before SIGKILL."""


SETTLE_SECONDS = 10.0
"""After one rank fails, how long the others have to exit on their own (a user error ends every rank) before
they are asked to stop."""


def exit_with(status: int) -> NoReturn:
    """Exit this process with `status`, also when a SIGTERM/SIGINT arrives while it exits.

    Schedulers and launchers signal a job as it ends (a time limit reached in the last step, a launcher passing
    its own signal on after the run completed). By then the command has finished and the signal has nothing
    left to stop, but Python puts the default handlers back while the interpreter shuts down, so the process
    would die of the signal: status 143 for a complete run, which a scheduler reports as a failure."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(status)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def split_nproc(argv: list[str]) -> tuple[int, list[str]]:
    """(N of --nproc-per-node N, the other flags); ValueError for a value that is not a positive integer."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg.startswith("--nproc-per-node"):
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"--nproc-per-node must be a positive integer, got {value!r}")
            del argv[i : i + (1 if "=" in arg else 2)]
            return int(value), argv
    return 1, argv


def start_ranks(nproc: int, argv: list[str]) -> list[subprocess.Popen]:
    port = str(_free_port())
    ranks = []
    for rank in range(nproc):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
               "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        ranks.append(subprocess.Popen([sys.executable, "-m", "trainer.pretrain", *argv], env=env, start_new_session=True))
    return ranks


def supervise(ranks: list[subprocess.Popen], grace: float = GRACE_SECONDS) -> int:
    """Wait for every rank; pass signals on; end the others when one fails; kill what outlives the grace period."""
    deadline: list[float] = []  # set once the ranks were asked to stop

    def ask_to_stop(signum: int) -> None:
        for p in ranks:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except ProcessLookupError:
                    pass
        if not deadline:
            deadline.append(time.monotonic() + grace)

    def forward(signum, _frame) -> None:
        print(f"clozeforge train: {signal.Signals(signum).name}: passed on to {len(ranks)} ranks", file=sys.stderr, flush=True)
        ask_to_stop(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    status, failed_at = 0, 0.0
    try:
        while any(p.poll() is None for p in ranks):
            failed = [p.returncode for p in ranks if p.returncode not in (None, 0)]
            if failed and not status:
                status = failed[0] if failed[0] > 0 else 128 - failed[0]  # killed by signal s: 128 + s, as a shell says
                failed_at = time.monotonic()
            if status and not deadline and time.monotonic() > failed_at + SETTLE_SECONDS:  # not an error they all share
                print(f"clozeforge train: a rank exited with status {status}; stopping the others", file=sys.stderr, flush=True)
                ask_to_stop(signal.SIGTERM)
            if deadline and time.monotonic() > deadline[0]:
                for p in ranks:
                    if p.poll() is None:
                        print(f"clozeforge train: rank pid {p.pid} still running {grace:.0f} s after the stop request: killed",
                              file=sys.stderr, flush=True)
                        p.kill()
                deadline[0] = float("inf")
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for p in ranks:
        if p.returncode and not status:
            status = p.returncode if p.returncode > 0 else 128 - p.returncode
    return status


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        nproc, argv = split_nproc(argv)
    except ValueError as e:
        print(f"clozeforge train: error: {e}", file=sys.stderr)
        return 2
    if nproc == 1 or "RANK" in os.environ:
        from trainer.pretrain import main as pretrain_main

        return pretrain_main(argv)
    from trainer.preflight import problem
    from trainer.pretrain import TrainError, checked_config, parser

    try:  # a bad flag or file: one line here, before any rank starts, not one per rank
        found = problem(checked_config(parser().parse_args(argv)))
    except TrainError as e:
        found = str(e)
    if found:
        print(f"clozeforge train: error: {found}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    return supervise(start_ranks(nproc, argv))


if __name__ == "__main__":
    sys.exit(main())
