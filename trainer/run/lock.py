"""One trainer per run directory: a lock file in --output, held while the run lives.

In:  the run directory (local or a filesystem every node mounts, NFS included).
Out: RUN/run.lock, created with O_CREAT|O_EXCL (atomic on local filesystems and NFSv3+), holding the
     owner's host, pid and start time as JSON; a daemon thread refreshes its mtime every HEARTBEAT_SECONDS.
     A second trainer is refused with a one-line RunLocked naming the owner. A lock is stale when its
     owner is on this host and its pid is gone, or when its heartbeat is older than STALE_SECONDS (an
     owner on a host that died); a stale lock is taken over with a one-line message. The lock is removed
     when the run ends, however it ends short of kill -9 (which leaves a stale lock for the next run).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator

from trainer.config import TrainError

LOCK_NAME = "run.lock"
HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 600.0
"""A lock whose heartbeat is this old is stale, wherever its owner ran (20 missed heartbeats)."""


class RunLocked(TrainError):
    """Another live trainer holds the run directory."""

    quiet = False
    """True on the ranks that only learnt it from rank 0, which prints the message."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _owner(path: str) -> tuple[dict, float] | None:
    """The lock's body and the age of its heartbeat, or None when there is no lock (any more)."""
    try:
        with open(path) as f:
            text = f.read()
        age = time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return None
    try:
        body = json.loads(text)
    except ValueError:  # written half by an owner that died at once: judged by its age only
        body = {}
    return (body if isinstance(body, dict) else {}), age


def stale_reason(body: dict, age: float, stale_seconds: float = STALE_SECONDS) -> str | None:
    if body.get("host") == socket.gethostname() and isinstance(body.get("pid"), int) and not _pid_alive(body["pid"]):
        return f"pid {body['pid']} on this host is gone"
    if age > stale_seconds:
        return f"its heartbeat is {age:.0f} s old"
    return None


def acquire(run_dir: str, stale_seconds: float = STALE_SECONDS, log=print) -> str:
    """Create RUN/run.lock for this process, taking over a stale one; RunLocked when a live trainer holds it."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, LOCK_NAME)
    body = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for _attempt in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            found = _owner(path)
            if found is None:
                continue  # released between our open and our read
            owner, age = found
            reason = stale_reason(owner, age, stale_seconds)
            who = f"pid {owner.get('pid', '?')} on {owner.get('host', '?')} since {owner.get('started', '?')}"
            if reason is None:
                raise RunLocked(f"{run_dir} is in use by another trainer ({who}; lock file {path}); "
                                "wait for it to finish, stop it, or use another --output") from None
            # NOTE: rename, not unlink: of two trainers taking over at once, only one rename succeeds.
            try:
                os.replace(path, f"{path}.stale-{os.getpid()}")
            except FileNotFoundError:
                continue
            os.unlink(f"{path}.stale-{os.getpid()}")
            log(f"{run_dir}: took over a stale lock ({who}: {reason})")
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(body, f)
            f.flush()
            os.fsync(f.fileno())
        return path
    raise RunLocked(f"{path}: could not take the lock (other trainers are starting on this --output)")


def release(path: str) -> None:
    found = _owner(path)
    if found and found[0].get("pid") == os.getpid() and found[0].get("host") == socket.gethostname():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


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
    """The lock for the duration of the block, taken by rank 0 and its heartbeat refreshed by a daemon thread;
    every rank raises RunLocked when rank 0 could not take it."""
    path, refused = None, None
    if rank == 0:
        try:
            path = acquire(run_dir, log=log)
        except RunLocked as e:
            refused = e
    if _agree(refused is not None):
        if refused is None:
            refused = RunLocked(f"{run_dir}: rank 0 could not take the run lock")
            refused.quiet = True
        raise refused
    if path is None:
        yield
        return
    done = threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            with contextlib.suppress(OSError):
                os.utime(path)

    thread = threading.Thread(target=beat, name="clozeforge-run-lock", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        release(path)
