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

The lock is schemas/lock.py's, the one the trainer's run directory uses: LOCK_FILE created exclusively,
naming its owner, kept fresh by a heartbeat, taken over once its owner is gone (kill -9 on this host) or its
heartbeat is stale; on an object store it catches a second run started later, not two in the same instant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import posixpath
from collections.abc import Iterable, Iterator

import fsspec

from pipelines.errors import PrepError
from schemas import lock
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


@contextlib.contextmanager
def _lock(output: str) -> Iterator[None]:
    try:
        with lock.held(output, LOCK_FILE, log=lambda line: print(f"clozeforge prep: {line}", flush=True)):
            yield
    except lock.Locked as e:
        remedy = "" if "://" not in output else f" (if that run is dead, its lock goes stale in {lock.STALE_SECONDS:.0f} s, or delete {e.path})"
        raise PrepError(f"--output {output}: in use by prep {lock.describe(e.owner)}; wait for it or choose another directory{remedy}") from None


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
