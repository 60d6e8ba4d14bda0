"""One owner and one state per --output directory: the lock, the run file, leftovers and the final sweep.

In:  the --output URL, the run's settings (PrepConfig.to_dict() without where it goes) and --overwrite.
Out: `owned(...)`, held for the whole run: a lock (a second prep into the same directory stops in one line),
     a refusal of a directory that holds another run's outputs unless --overwrite, the leftovers of dead
     runs (`.tmp-*` directories, `*.tmp-*` files) removed and listed; and, at the end of a run,
     `sweep(...)`, which removes every file under clean/, vocab/ and pairs/ that this run did not write.
     Nothing outside clean/, vocab/, pairs/, report.json and the two dot files below is ever touched.

Whose outputs a directory holds is recorded in RUN_FILE (the settings of the run that last wrote there),
written once the directory is ours: a rerun with the same settings (say after kill -9) carries on, one
with other settings is refused without --overwrite, as is a directory with outputs and no RUN_FILE.

NOTE: on a local disk the lock is an flock(2) on LOCK_FILE, which the kernel releases when its process
dies, kill -9 included. An object store has no such lock: there LOCK_FILE is created at start and deleted
at the end, a check that catches a second run started later but not two started in the same instant, and
one that a killed launcher leaves behind (the message says to delete it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import posixpath
import socket
import time
from collections.abc import Iterable, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from pipelines.errors import PrepError
from schemas import vocab as vocab_files

LOCK_FILE = ".clozeforge.lock"
RUN_FILE = ".clozeforge-run.json"
AREAS = ("clean", "vocab", "pairs")
"""The directories of a run's outputs (with report.json beside them): the only places a sweep removes from."""
REPORT_FILE = "report.json"


@dataclasses.dataclass(frozen=True)
class Leftovers:
    """What the start of a run removed: paths relative to --output, and their bytes."""

    paths: tuple[str, ...] = ()
    bytes: int = 0

    def describe(self) -> str:
        return f"removed {len(self.paths)} leftovers of an interrupted run ({self.bytes / 1e6:.1f} MB): " + ", ".join(self.paths[:5]) + (
            ", ..." if len(self.paths) > 5 else "")


def _holder() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _busy(output: str, holder: bytes, remedy: str) -> PrepError:
    try:
        who = json.loads(holder)
        by = f" by prep pid {who['pid']} on {who['host']} since {who['since']}"
    except (ValueError, KeyError, TypeError):
        by = ""
    return PrepError(f"--output {output}: in use{by}; wait for it or choose another directory{remedy}")


@contextlib.contextmanager
def _lock(output: str) -> Iterator[None]:
    fs, root = fsspec.core.url_to_fs(output)
    path = posixpath.join(root, LOCK_FILE)
    if isinstance(fs, LocalFileSystem):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides, as for every other file
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0)
            os.close(fd)
            raise _busy(output, holder, "") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        try:
            yield
        finally:
            os.close(fd)  # releases the lock; the file stays (unlinking it would race with the next run's open)
        return
    if fs.exists(path):
        raise _busy(output, fs.cat_file(path), f" (if that run is dead, delete {posixpath.join(output, LOCK_FILE)})")
    fs.pipe_file(path, json.dumps(_holder()).encode())
    try:
        yield
    finally:
        fs.rm(path)


def _relative(root: str, path: str) -> str:
    return posixpath.relpath(path, root) if root else path


def _check_owner(output: str, settings: dict, overwrite: bool) -> None:
    fs, root = fsspec.core.url_to_fs(output)
    run_file = posixpath.join(root, RUN_FILE)
    found = [name for name in (*AREAS, REPORT_FILE) if fs.exists(posixpath.join(root, name))]
    if not found or overwrite:  # nothing of a run's outputs here (a run that failed at once leaves only RUN_FILE)
        return
    if fs.exists(run_file):
        try:
            previous = json.loads(fs.cat_file(run_file))
        except ValueError:
            previous = None
        if previous == settings:
            return
        differ = sorted(k for k in set(settings) | set(previous or {}) if (previous or {}).get(k) != settings.get(k))
        raise PrepError(f"--output {output}: holds the outputs of a prep run with other settings ({', '.join(differ[:6])}"
                        f"{', ...' if len(differ) > 6 else ''}); pass --overwrite to replace them, or choose another directory")
    raise PrepError(f"--output {output}: holds outputs of an earlier run ({', '.join(found)}); pass --overwrite "
                    "to replace them, or choose another directory")


def is_leftover(relative: str) -> bool:
    """A dead run's temporary: its shuffle directory `.tmp-<id>/...`, or a `<name>.tmp-<id>` file being written."""
    parts = relative.split("/")
    return parts[0].startswith(".tmp-") or ".tmp-" in parts[-1]


PROBE_PREFIX = ".clozeforge-probe-"
"""The file prep.check_output writes and removes at start, to see that --output is writable."""


def is_prep_file(relative: str) -> bool:
    """A path (relative to --output) that prep writes or ever wrote there: its outputs, the lock, the run file,
    a write probe, or a temporary. An --input glob that reaches into --output leaves these out."""
    first = relative.split("/")[0]
    return (first in AREAS or relative in (REPORT_FILE, LOCK_FILE, RUN_FILE) or first.startswith(PROBE_PREFIX)
            or is_leftover(relative))


def remove_leftovers(output: str) -> Leftovers:
    """Remove every `.tmp-*` directory and `*.tmp-*` file under `output` (call with the lock held)."""
    fs, root = fsspec.core.url_to_fs(output)
    if not fs.exists(root):
        return Leftovers()
    found = {_relative(root, path): info.get("size") or 0 for path, info in fs.find(root, detail=True).items()}
    leftovers = sorted(rel for rel in found if is_leftover(rel))
    for rel in leftovers:
        fs.rm(posixpath.join(root, rel))
    for entry in fs.ls(root, detail=False):  # the emptied .tmp-<id>/ trees themselves
        if posixpath.basename(entry.rstrip("/")).startswith(".tmp-") and fs.isdir(entry):
            fs.rm(entry, recursive=True)
    shown = sorted({rel.split("/")[0] + "/" if rel.startswith(".tmp-") else rel for rel in leftovers})
    return Leftovers(paths=tuple(shown), bytes=sum(found[rel] for rel in leftovers))


@contextlib.contextmanager
def owned(output: str, settings: dict, *, overwrite: bool) -> Iterator[Leftovers]:
    """Hold `output` for one run: lock it, check whose outputs it holds, remove leftovers, record the run."""
    with _lock(output):
        _check_owner(output, settings, overwrite)
        leftovers = remove_leftovers(output)
        fs, root = fsspec.core.url_to_fs(output)
        fs.pipe_file(posixpath.join(root, RUN_FILE), json.dumps(settings, sort_keys=True).encode())
        yield leftovers


def sweep(output: str, written: Iterable[str]) -> list[str]:
    """Remove every file under clean/, vocab/ and pairs/ except `written` (paths relative to `output`, as
    the manifest lists them) and the vocabulary's own files; returns what was removed, relative to `output`."""
    fs, root = fsspec.core.url_to_fs(output)
    keep = set(written) | {posixpath.join("vocab", name) for name in vocab_files.FILES}
    removed = []
    for area in AREAS:
        if not fs.exists(posixpath.join(root, area)):
            continue
        for path in sorted(fs.find(posixpath.join(root, area))):
            rel = _relative(root, path)
            if rel not in keep:
                fs.rm(path)
                removed.append(rel)
    return removed
