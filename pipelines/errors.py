"""User-facing errors of prep: raised for bad flags or (in --strict mode) bad input; printed as one line.

A PrepError raised inside a Beam worker comes back to `prep.run` re-raised by the runner: as itself with
one in-memory worker, as a RuntimeError whose text quotes the worker's traceback with several
(multi_threading, multi_processing). `prep_error_in` finds its message in either; `quiet_workers` keeps
the workers' own reports of it (log records, and the traceback that Beam's SDK harness prints straight
to stderr, from a subprocess under multi_processing) off the terminal, so --strict stays one line.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator


class PrepError(Exception):
    """A problem the user can fix (a flag, a path, a malformed record under --strict). Printed without traceback."""


_QUOTED_RE = re.compile(r"PrepError: (.+?)(?: \[while running .*)?$", re.MULTILINE)
_WORKER_LOGGERS = (
    "apache_beam.runners.common",  # in-memory worker: logs the DoFn's exception before re-raising it
    "apache_beam.runners.worker.sdk_worker",  # multi_threading: "Error processing instruction ..."
    "apache_beam.runners.portability.local_job_service",  # multi_processing: relays the workers' log records
)


def prep_error_in(e: BaseException) -> str | None:
    """The message of the PrepError behind `e` (itself, a cause, or quoted in a worker's traceback), or None."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, PrepError):
            return str(seen).split(" [while running")[0]
        seen = seen.__cause__ or seen.__context__
    found = _QUOTED_RE.search(str(e))
    return found.group(1) if found else None


def write_failed(url: str, e: OSError) -> PrepError:
    """The one-line error for an OSError while writing `url`: `URL: cannot write (no space left on device, ENOSPC)`."""
    cause = (e.strerror or str(e) or type(e).__name__).rstrip(".")
    code = f", {errno.errorcode[e.errno]}" if isinstance(e.errno, int) and e.errno in errno.errorcode else ""
    return PrepError(f"{url}: cannot write ({cause[:1].lower() + cause[1:]}{code})")


_OS_ERROR_RE = re.compile(r"(\w*Error): (\[Errno (\d+)\] [^\n\[]*?)\s*(?:\[while running '([^']*)'\])?$", re.MULTILINE)


def os_error_in(e: BaseException, output: str) -> str | None:
    """A one-line message for an I/O error behind `e` that no write site named (an object store's client error,
    a read-only or full disk met outside our writers): the error itself, or quoted in a worker's traceback."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError):
            where = getattr(seen, "filename", None) or f"--output {output}"
            return str(write_failed(where, seen))
        seen = seen.__cause__ or seen.__context__
    found = _OS_ERROR_RE.search(str(e))
    if found is None:
        return None
    step = f" in step {found.group(4)}" if found.group(4) else ""
    return f"--output {output}: I/O error{step}: {found.group(2).strip()}"


@contextlib.contextmanager
def quiet_workers(hold_stderr: bool) -> Iterator[None]:
    """Quiet the Beam worker loggers; with `hold_stderr`, also send file descriptor 2 (inherited by worker
    subprocesses) to a temporary file, written back on exit unless the block raised a PrepError."""
    levels = {name: logging.getLogger(name).level for name in _WORKER_LOGGERS}
    for name in _WORKER_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    held, saved = None, None
    if hold_stderr:
        sys.stderr.flush()
        held, saved = tempfile.TemporaryFile(), os.dup(2)  # noqa: SIM115  (closed in the finally below)
        os.dup2(held.fileno(), 2)
    discard = False
    try:
        yield
    except PrepError:
        discard = True  # the one-line message says it all; the held text is the workers' tracebacks of it
        raise
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        if held is not None and saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not discard:
                held.seek(0)
                with os.fdopen(os.dup(2), "wb") as out:
                    shutil.copyfileobj(held, out)
            held.close()
