"""One writer per directory, for every command that writes one (prep's --output, the trainer's run directory).

In:  a directory (local path or fsspec URL) and the lock file's name in it.
Out: `held(...)`: the lock for the duration of a block. The lock file is created exclusively (O_CREAT|O_EXCL
     on a local or NFS disk; on an object store, created when absent: a check that catches a second writer
     started later, not two started in the same instant), holds the owner's host, pid and start time as JSON,
     and a daemon thread refreshes it every HEARTBEAT_SECONDS. A second writer gets `Locked`, naming the
     owner. A lock is stale when its owner is on this host and its pid is gone (kill -9), or when its
     heartbeat is older than STALE_SECONDS (an owner on a host that died); a stale lock is taken over with a
     one-line message. The lock file is removed when the block ends, however it ends short of kill -9.
Standard library only (fsspec where the directory is not local), so both halves use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import socket
import threading
import time
from collections.abc import Callable, Iterator

HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 600.0
"""A lock whose heartbeat is this old is stale, wherever its owner ran (20 missed heartbeats)."""


class Locked(Exception):
    """Another live owner holds the directory; `owner` is its lock's body, `path` the lock file."""

    def __init__(self, path: str, owner: dict):
        self.path, self.owner = path, owner
        super().__init__(f"{path}: held by {describe(owner)}")


def describe(owner: dict) -> str:
    return f"pid {owner.get('pid', '?')} on {owner.get('host', '?')} since {owner.get('started', '?')}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def stale_reason(owner: dict, age: float, stale_seconds: float = STALE_SECONDS) -> str | None:
    if owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int) and not _pid_alive(owner["pid"]):
        return f"pid {owner['pid']} on this host is gone"
    if age > stale_seconds:
        return f"its heartbeat is {age:.0f} s old"
    return None


class _Store:
    """The lock file's operations on a local disk (atomic) or through fsspec (an object store)."""

    def __init__(self, directory: str, name: str):
        self.local = "://" not in directory or directory.startswith("file://")
        if self.local:
            self.fs, root = None, directory.removeprefix("file://")
            self.path = os.path.join(root, name)
        else:
            import fsspec

            self.fs, root = fsspec.core.url_to_fs(directory)
            self.path = posixpath.join(root, name)
        self.shown = self.path if self.local else posixpath.join(directory.rstrip("/"), name)
        self.root = root

    def create(self, body: bytes) -> bool:
        """Write the lock file if there is none; False when one exists."""
        if self.local:
            os.makedirs(self.root, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            return True
        if self.fs.exists(self.path):
            return False
        self.fs.pipe_file(self.path, body)
        return True

    def read(self) -> tuple[dict, float] | None:
        """The lock's body and the age of its heartbeat, or None when there is no lock (any more)."""
        try:
            if self.local:
                with open(self.path, "rb") as f:
                    data = f.read()
                age = time.time() - os.stat(self.path).st_mtime
            else:
                data = self.fs.cat_file(self.path)
                try:
                    age = time.time() - self.fs.modified(self.path).timestamp()
                except (NotImplementedError, AttributeError, OSError, ValueError):  # no mtime: judged by its pid only
                    age = 0.0
        except FileNotFoundError:
            return None
        try:
            body = json.loads(data)
        except ValueError:  # written half by an owner that died at once: judged by its age only
            body = {}
        return (body if isinstance(body, dict) else {}), age

    def take_over(self) -> bool:
        """Remove a stale lock; False when another writer removed it first."""
        if self.local:
            # NOTE: rename, not unlink: of two writers taking over at once, only one rename succeeds.
            aside = f"{self.path}.stale-{os.getpid()}"
            try:
                os.replace(self.path, aside)
            except FileNotFoundError:
                return False
            os.unlink(aside)
            return True
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.path)
        return True

    def touch(self, body: bytes) -> None:
        if self.local:
            os.utime(self.path)
        else:
            self.fs.pipe_file(self.path, body)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            if self.local:
                os.unlink(self.path)
            else:
                self.fs.rm(self.path)


def acquire(directory: str, name: str, *, stale_seconds: float = STALE_SECONDS, log: Callable[[str], None] = print) -> str:
    """Take the lock `directory`/`name` for this process (a stale one is taken over); `Locked` when a live owner
    holds it. Returns the lock file's path, for `release`."""
    store = _Store(directory, name)
    body = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                       "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode()
    for _attempt in range(3):
        if store.create(body):
            return store.shown
        found = store.read()
        if found is None:
            continue  # released between our create and our read
        owner, age = found
        reason = stale_reason(owner, age, stale_seconds)
        if reason is None:
            raise Locked(store.shown, owner)
        if store.take_over():
            log(f"{directory}: took over a stale lock ({describe(owner)}: {reason})")
    raise Locked(store.shown, {})  # other writers are starting on this directory at the same moment


def release(directory: str, name: str) -> None:
    """Remove the lock when this process holds it."""
    store = _Store(directory, name)
    found = store.read()
    if found and found[0].get("pid") == os.getpid() and found[0].get("host") == socket.gethostname():
        store.remove()


@contextlib.contextmanager
def held(directory: str, name: str, *, log: Callable[[str], None] = print) -> Iterator[str]:
    """The lock for the duration of the block, its heartbeat refreshed by a daemon thread."""
    path = acquire(directory, name, log=log)
    store, done = _Store(directory, name), threading.Event()
    body = store.read()

    def beat() -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            with contextlib.suppress(OSError):
                store.touch(json.dumps(body[0] if body else {}).encode())

    threading.Thread(target=beat, name="clozeforge-lock-heartbeat", daemon=True).start()
    try:
        yield path
    finally:
        done.set()
        release(directory, name)
