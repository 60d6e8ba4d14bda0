"""One trainer per run directory: RUN/run.lock, held while the run lives (process/lock.py, the lock prep uses too).

In:  the run directory (local or a filesystem every node mounts, NFS included) and this process's rank.
Out: `held(...)`: rank 0 takes the lock; a second trainer is refused on every rank with a one-line RunLocked
     naming the owner; a stale lock (a dead owner's) is taken over with a one-line message. The lock is
     removed when the run ends, however it ends short of kill -9 (which leaves a stale lock for the next run).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from process import lock
from trainer.config import TrainError

LOCK_NAME = "run.lock"


class RunLocked(TrainError):
    """Another live trainer holds the run directory."""

    quiet = False
    """True on the ranks that only learnt it from rank 0, which prints the message."""


def _refusal(run_dir: str, e: lock.Locked) -> RunLocked:
    return RunLocked(f"{run_dir} is in use by another trainer ({lock.describe(e.owner)}; lock file {e.path}); "
                     "wait for it to finish, stop it, or use another --output")


def acquire(run_dir: str, stale_seconds: float = lock.STALE_SECONDS, log=print) -> str:
    """Take RUN/run.lock for this process (see process/lock.py); RunLocked when a live trainer holds it."""
    try:
        return lock.acquire(run_dir, LOCK_NAME, stale_seconds=stale_seconds, log=log)
    except lock.Locked as e:
        raise _refusal(run_dir, e) from None


def release(path: str) -> None:
    """Remove the lock file at `path` (what `acquire` returned) when this process holds it."""
    lock.release(*path.rsplit("/", 1))


def _agree(failed: bool) -> bool:
    """True on every rank when any rank failed (rank 0 is the only one that tries)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return failed
    flag = torch.tensor([int(failed)], dtype=torch.int32, device="cuda" if torch.cuda.is_available() else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


@contextlib.contextmanager
def held(run_dir: str, rank: int = 0, log=print) -> Iterator[None]:
    """The lock for the duration of the block, taken by rank 0 (with its heartbeat); every rank raises RunLocked
    when rank 0 could not take it."""
    refused = None
    with contextlib.ExitStack() as stack:
        if rank == 0:
            try:
                stack.enter_context(lock.held(run_dir, LOCK_NAME, log=log))
            except lock.Locked as e:
                refused = _refusal(run_dir, e)
        if _agree(refused is not None):
            if refused is None:
                refused = RunLocked(f"{run_dir}: rank 0 could not take the run lock")
                refused.quiet = True
            raise refused
        yield
