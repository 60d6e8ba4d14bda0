"""One owner and one state per --output directory: the lock, the run file, leftovers and the final sweep.

In:  the --output URL, the run's settings (PrepConfig.to_dict() without where it goes) and --overwrite.
Out: `owned(...)`, held for the whole run: a lock (a second prep into the same directory stops in one line),
     a refusal of a directory that holds another run's outputs unless --overwrite, or that a remote job may
     still write, the leftovers of dead runs (`.tmp-*` directories, `*.tmp-*` files) removed and listed; it
     yields a Claim, which records the run's remote job. At the end of a run, `sweep(...)` removes every file
     under clean/, vocab/ and pairs/ that this run did not write.
     Nothing outside clean/, vocab/, pairs/, report.json and the two dot files below is ever touched.

Whose outputs a directory holds is recorded in RUN_FILE (the settings of the run that last wrote there),
written once the directory is ours: a rerun with the same settings (say after kill -9) carries on, one
with other settings is refused without --overwrite, as is a directory with outputs and no RUN_FILE.

A job on a runner that is not local (pipelines/runners.py: Dataflow, a portable job server) goes on when its
launcher stops, and goes on writing --output. So once it is submitted, RUN_FILE records it (runner, id, where it
runs, state RUNNING) and, once the launcher sees it end, its final state. A run that finds a job recorded as
RUNNING is refused in one line, whatever its settings and --overwrite, unless --ended-job names that job: a rerun
would remove the job's temporaries, and the job's final sweep the rerun's outputs.

The lock is process/lock.py's, the one the trainer's run directory uses: LOCK_FILE created exclusively,
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
from process import lock
from schemas import vocab as vocab_files

LOCK_FILE = ".clozeforge.lock"
RUN_FILE = ".clozeforge-run.json"
AREAS = ("clean", "vocab", "pairs", "parallel")
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


def _read_run_file(fs, root: str) -> tuple[dict | None, dict | None]:
    """(the recorded settings, the recorded job) of RUN_FILE; (None, None) when there is none or it is unreadable."""
    try:
        body = json.loads(fs.cat_file(posixpath.join(root, RUN_FILE)))
    except (FileNotFoundError, ValueError):
        return None, None
    if not isinstance(body, dict):
        return None, None
    if "settings" not in body:  # the settings alone: a prep from before jobs were recorded
        return body, None
    return body.get("settings"), body.get("job")


def running_job(output: str) -> dict | None:
    """The remote job RUN_FILE records as possibly still writing `output`, if any."""
    fs, root = fsspec.core.url_to_fs(output)
    _, job = _read_run_file(fs, root)
    return job if job and job.get("state") == "RUNNING" else None


def _check_job(output: str, job: dict | None, ended_job: str | None) -> None:
    if job is None or job.get("state") != "RUNNING":
        return
    if ended_job is not None and ended_job == job.get("id"):
        return
    from pipelines.runners import cancel_hint, describe

    hint = cancel_hint(job)
    raise PrepError(f"--output {output}: {describe(job)} may still be writing there (a job goes on when its launcher "
                    f"stops){'; to stop it: ' + hint if hint else ''}; once it has ended, rerun with --ended-job "
                    f"{job.get('id')}")


def _check_owner(output: str, settings: dict, overwrite: bool, ended_job: str | None = None) -> None:
    fs, root = fsspec.core.url_to_fs(output)
    previous, job = _read_run_file(fs, root)
    _check_job(output, job, ended_job)
    found = [name for name in (*AREAS, REPORT_FILE) if fs.exists(posixpath.join(root, name))]
    if not found or overwrite:  # nothing of a run's outputs here (a run that failed at once leaves only RUN_FILE)
        return
    if fs.exists(posixpath.join(root, RUN_FILE)):
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
    # The .tmp-<id>/ trees themselves, emptied above or empty already (a run stopped before it wrote a run
    # file, or after it had read them all): listed too, since a file-less tree is still a dead run's.
    trees = []
    for entry in fs.ls(root, detail=False):
        name = posixpath.basename(entry.rstrip("/"))
        if name.startswith(".tmp-") and fs.isdir(entry):
            fs.rm(entry, recursive=True)
            trees.append(name + "/")
    shown = sorted({rel.split("/")[0] + "/" if rel.startswith(".tmp-") else rel for rel in leftovers} | set(trees))
    return Leftovers(paths=tuple(shown), bytes=sum(found[rel] for rel in leftovers))


@dataclasses.dataclass
class Claim:
    """A run's hold on --output (owned's): what its start removed, and the record of its remote job."""

    output: str
    settings: dict
    leftovers: Leftovers = dataclasses.field(default_factory=Leftovers)
    job: dict | None = None

    def write(self) -> None:
        fs, root = fsspec.core.url_to_fs(self.output)
        body = {"settings": self.settings, **({"job": self.job} if self.job else {})}
        fs.pipe_file(posixpath.join(root, RUN_FILE), json.dumps(body, sort_keys=True).encode())

    def job_submitted(self, job: dict | None) -> None:
        """Record a submitted job that can outlive this process (pipelines/runners.job_record; None: a local run)."""
        if job is not None:
            self.job = job
            self.write()

    def job_ended(self, state: str) -> None:
        """Record that the job stopped for good, in Beam's PipelineState `state`: --output is free again."""
        if self.job is not None and self.job.get("state") != state:
            self.job = {**self.job, "state": state}
            self.write()


@contextlib.contextmanager
def owned(output: str, settings: dict, *, overwrite: bool, ended_job: str | None = None) -> Iterator[Claim]:
    """Hold `output` for one run: lock it, check whose outputs it holds and that no remote job may still write
    there (unless `ended_job` names it), remove leftovers, record the run."""
    with _lock(output):
        _check_owner(output, settings, overwrite, ended_job)
        claim = Claim(output, settings, remove_leftovers(output))
        claim.write()
        yield claim


def sweep(output: str, written: Iterable[str]) -> list[str]:
    """Remove every file under clean/, vocab/ and pairs/ except `written` (paths relative to `output`, as
    the manifest lists them), the vocabulary's own files and temporaries (`*.tmp-*`); returns what was removed,
    relative to `output`."""
    fs, root = fsspec.core.url_to_fs(output)
    keep = set(written) | {posixpath.join("vocab", name) for name in vocab_files.FILES}
    removed = []
    for area in AREAS:
        if not fs.exists(posixpath.join(root, area)):
            continue
        for path in sorted(fs.find(posixpath.join(root, area))):
            rel = _relative(root, path)
            # another attempt of the final step may be writing a temporary: the next run removes a dead one's
            if rel not in keep and not is_leftover(rel):
                fs.rm(path)
                removed.append(rel)
    return removed
