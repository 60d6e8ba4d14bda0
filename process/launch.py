"""`clozeforge train --nproc-per-node N`: start N ranks of trainer.pretrain on this machine and look after them.

In:  N (trainer.pretrain parses --nproc-per-node and calls `launch` when no launcher started it) and the flags,
     passed to every rank as they are. Standard library only.
Out: N `python -m trainer.pretrain` ranks (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT set as torchrun sets
     them); this process stays their parent until all have exited, and returns the job's status:
     - SIGTERM/SIGINT to it (a scheduler, Ctrl-C) is passed on once to every rank, which checkpoint at the
       step they agree on and exit 0; it waits GRACE_SECONDS for them, then kills what is left. A second
       signal is passed on too (the ranks then stop at once, without a checkpoint).
     - a rank that fails ends the others the same way, and the exit status is the first failure's.
     - kill -9 of this process leaves no orphans: each rank gets SIGTERM from the kernel (process/stopping.py).
     The ranks run in their own process group, so a terminal's Ctrl-C reaches them once, through here.
Multi-node jobs use `deepspeed` or `torchrun` (deploy/).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from process.ports import free_port

GRACE_SECONDS = 120.0
"""How long the ranks have, after a forwarded signal or a failed rank, to checkpoint and exit before SIGKILL."""


SETTLE_SECONDS = 10.0
"""After one rank fails, how long the others have to exit on their own (a user error ends every rank) before
they are asked to stop."""


def module_command(module: str) -> list[str]:
    """`python -m MODULE` that imports this installation's packages whatever the working directory holds (a folder
    named `clozeforge` or `trainer` there would otherwise shadow them): -P (3.11+) keeps the working directory off
    sys.path; 3.10 drops it by hand."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return [sys.executable, "-c", "import runpy, sys; del sys.path[0]; runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)", module]


def rank_env(rank: int, nproc: int, port: str) -> dict[str, str]:
    """The environment of rank `rank` of `nproc` on this machine, as torchrun sets it."""
    return {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
            "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}


def start_ranks(nproc: int, argv: list[str], module: str = "trainer.pretrain") -> list[subprocess.Popen]:
    port = str(free_port())
    return [subprocess.Popen([*module_command(module), *argv], env=rank_env(rank, nproc, port), start_new_session=True)
            for rank in range(nproc)]


def supervise(ranks: list[subprocess.Popen], grace: float = GRACE_SECONDS, prog: str = "clozeforge train") -> int:
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
        print(f"{prog}: {signal.Signals(signum).name}: passed on to {len(ranks)} ranks", file=sys.stderr, flush=True)
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
                print(f"{prog}: a rank exited with status {status}; stopping the others", file=sys.stderr, flush=True)
                ask_to_stop(signal.SIGTERM)
            if deadline and time.monotonic() > deadline[0]:
                for p in ranks:
                    if p.poll() is None:
                        print(f"{prog}: rank pid {p.pid} still running {grace:.0f} s after the stop request: killed",
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


def launch(nproc: int, argv: list[str], module: str = "trainer.pretrain", prog: str = "clozeforge train") -> int:
    """Start `nproc` ranks of `python -m module argv` on this machine and supervise them to the end.

    argv goes to every rank as it is, --nproc-per-node included: a rank sees RANK set and trains. `clozeforge
    finetune` starts its ranks here too (module downstream.finetune.ranks)."""
    sys.stdout.flush()
    return supervise(start_ranks(nproc, argv, module), prog=prog)
