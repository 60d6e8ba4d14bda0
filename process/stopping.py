"""How a run stops when asked: every rank at the same step, after one collective checkpoint.

In:  the process's SIGTERM/SIGINT (from a user, a scheduler, a launcher passing its own on, or the
     launcher's death, see `follow_launcher`), and the other ranks' flags.
Out: StopFlag.agreed(), true on every rank at the same step once any rank was signalled, which the loop
     checks between steps; StopFlag.settle() after the last step, which completes the reduction in flight.

A signal lands on the ranks of a job at different moments (or on one rank only). A rank that stopped on
its own flag would enter the collective save while the others start the next step's collectives, and the
job would hang. So each step boundary starts an all-reduce (MAX) of one int, and reads the one the previous
boundary started: every rank reads the same reductions at the same boundaries, so all stop at the same step,
one step after the first boundary that saw a signal. Reading a reduction a step late keeps the host from
waiting on it: on a GPU its result is copied to the host behind the step it follows, and the host waits for
that copy (an event) while the device already runs the next step. The first boundary reads its own reduction
(a signal during start-up stops before the first step).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from typing import Protocol

import torch
import torch.distributed as dist


class Place(Protocol):
    """This process's place in its job, as the trainer's Runtime and fine-tuning's ranks both hold it."""

    rank: int
    world_size: int
    device: torch.device

PR_SET_PDEATHSIG = 1
"""prctl option (linux/prctl.h): the signal this process gets when the thread that started it exits."""
# Processes above a rank that are part of its launch (by the module or script they run): when one of them
# dies, the rank is an orphan.
_LAUNCHERS = {"deepspeed", "deepspeed.launcher.runner", "deepspeed.launcher.launch", "torchrun", "torch.distributed.run",
              "trainer.pretrain", "clozeforge"}


class StopFlag:
    """The first SIGTERM/SIGINT asks the run to checkpoint and exit at the next step boundary that every rank
    agrees on; a second one (an impatient Ctrl-C) stops at once, leaving `latest` on the previous complete
    checkpoint."""

    def __init__(self, rt: Place):
        self.requested, self.rt = False, rt
        self.pending: tuple | None = None  # the reduction the last boundary started, read at the next one
        self.boundaries = 0
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        _stop_following()  # the launcher's death must not count as a second, impatient signal
        print(f"rank {self.rt.rank}: {signal.Signals(signum).name}: checkpointing at the end of this step "
              "(send it again to stop now)", flush=True)

    def agreed(self) -> bool:
        """True on every rank at the same step once any rank has been asked to stop: one int all-reduced (MAX)
        per step boundary, read at the next boundary (the first boundary's at once)."""
        if self.rt.world_size == 1 or not dist.is_initialized():
            return self.requested
        self.boundaries += 1
        earlier, self.pending = self.pending, self._start()
        if self.boundaries == 1:
            earlier, self.pending = self.pending, None
        return earlier is not None and _read(earlier)

    def settle(self) -> None:
        """Complete the reduction still in flight (every rank started it), before the collectives that follow."""
        if self.pending is not None:
            _read(self.pending)
            self.pending = None

    def _start(self) -> tuple:
        flag = torch.full((1,), int(self.requested), dtype=torch.int32, device=self.rt.device)  # no host-to-device copy
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, async_op=True)
        if flag.device.type != "cuda":
            return work, flag, None
        work.wait()  # NCCL: the current stream waits for the reduction, the host does not
        host = flag.to("cpu", non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        return None, host, copied


def _read(pending: tuple) -> bool:
    """The value of a reduction `StopFlag._start` began: waits for it (a step old by now) and nothing else."""
    work, value, copied = pending
    if work is not None:
        work.wait()
    if copied is not None:
        copied.synchronize()
    return bool(value[0])  # a host tensor


def _launched_as(cmdline: list[str]) -> str:
    """The module (`python -m NAME`) or script name a command line runs: `deepspeed`, `trainer.pretrain`, ..."""
    if "-m" in cmdline[:-1]:
        return cmdline[cmdline.index("-m") + 1]
    script = next((a for a in cmdline[1:] if not a.startswith("-")), "") if "python" in os.path.basename(cmdline[0] if cmdline else "") else (cmdline or [""])[0]
    return os.path.basename(script)


def _launcher_ancestors() -> list:
    """The processes above this one that belong to its launch (the launcher, deepspeed's runner above it)."""
    import psutil  # a DeepSpeed dependency

    chain, process = [], psutil.Process().parent()
    while process is not None and process.pid > 1 and len(chain) < 3:
        try:
            if _launched_as(process.cmdline()) not in _LAUNCHERS:
                break
        except psutil.Error:
            break
        chain.append(process)
        process = process.parent()
    return chain


_following = threading.Event()
"""Set while this rank follows its launcher; cleared once a stop was asked for."""


def _prctl_pdeathsig(signum: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def _stop_following() -> None:
    """After the first stop request: no parent-death signal (it fires again each time an orphaned rank's new
    parent exits) and no signal from the watch thread, so the stop keeps its checkpoint."""
    if _following.is_set():
        _following.clear()
        _prctl_pdeathsig(0)


def _alive(process) -> bool:
    import psutil

    try:  # a launcher killed by -9 stays a zombie until its own parent reaps it: that counts as dead
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def follow_launcher(poll_seconds: float = 1.0) -> None:
    """Make this rank stop (SIGTERM to itself, so a checkpoint is written) when its launcher dies, even by
    kill -9, instead of training on as an orphan. The kernel does it for the direct parent (prctl
    PR_SET_PDEATHSIG, Linux); a daemon thread polls the launcher processes above it (deepspeed's runner
    sits above its per-node launcher) and the parent where prctl is not available."""
    parent = os.getppid()
    by_kernel = _prctl_pdeathsig(signal.SIGTERM)  # elsewhere the thread below covers the parent too
    _following.set()
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
        return
    # NOTE: one SIGTERM only: a second one would stop the rank at once, without its checkpoint.
    watched = _launcher_ancestors()[1 if by_kernel else 0:]

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(poll_seconds):
            if not _following.is_set():
                return
            if (not by_kernel and os.getppid() != parent) or not all(_alive(p) for p in watched):
                os.kill(os.getpid(), signal.SIGTERM)
                return

    threading.Thread(target=watch, name="clozeforge-launcher-watch", daemon=True).start()
