"""Inputs on an object store (gs://, s3://, ...): is it reachable at all, asked once, with a deadline; and, once
listed, whether an error while reading a file is the store's (it failed) or the file's (it is unreadable).

In:  an fsspec filesystem, the folder an --input glob lists, and the flag as typed (for the message); an
     exception raised while a worker reads a listed file.
Out: nothing when the store answers; else a one-line PrepError naming the --input: the client's own error
     when it gives up in time, or "no answer in N s" when it does not. `is_store_failure(e)`: the error is the
     store's or the network's (a connection refused or reset, a timeout, a storage client's own error type),
     which `store_failed` makes a PrepError naming the --input and the file: the run stops in one line (exit
     2) instead of a worker's traceback, or a corpus silently short of every file read after the failure.

Why a deadline of our own: the clients retry a refused connection for a long time, printing a traceback per
try: gcsfs 6 times with backoff (35 s against a closed loopback port, measured), s3fs 5 times on top of
botocore's own retries (14 s); with no network at all a gs:// input took 81 s and 4 tracebacks before
prep said anything. Their retry counts are class constants (gcsfs) or per-instance options that the workers'
filesystems would not share, so the first request is run in a daemon thread and abandoned at the deadline.
A listing that does answer is never cut short, however long a large bucket takes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from pipelines.errors import PrepError

PROBE_SECONDS = 10.0
"""How long the first request to an object store may take before prep gives up on that --input."""
_CLIENT_LOGGERS = ("gcsfs", "s3fs", "aiobotocore", "botocore", "fsspec", "urllib3", "google")
"""Loggers of the storage clients, which log a traceback for every retried request."""


def describe(e: BaseException) -> str:
    """`Type: first line of the message`, at most 200 characters."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


@contextlib.contextmanager
def quiet_clients() -> Iterator[None]:
    """The storage clients' loggers silenced in the block: a failure becomes prep's own one line."""
    levels = {name: logging.getLogger(name).level for name in _CLIENT_LOGGERS}
    for name in _CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


_CLIENT_PACKAGES = frozenset({"botocore", "aiobotocore", "boto3", "s3fs", "gcsfs", "google", "aiohttp", "requests",
                              "urllib3", "adlfs", "azure"})
"""Packages whose exception types mean the store or the network failed, not the file (a file that is not
there or not readable is a FileNotFoundError or PermissionError, a plain OSError: a counted drop)."""


def is_store_failure(e: BaseException) -> bool:
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    return any(cls.__module__.split(".")[0] in _CLIENT_PACKAGES for cls in type(e).__mro__)


def store_failed(flag: str, path: str, e: BaseException) -> PrepError:
    return PrepError(f"{flag}: reading {path} failed after the listing ({describe(e)}); nothing is final: rerun "
                     "when the store answers")


def check_reachable(fs, folder: str, flag: str, seconds: float = PROBE_SECONDS) -> None:
    """Ask `fs` about `folder` within `seconds`; a PrepError naming `flag` if the request fails or never answers.
    A folder that does not exist is an answer (the glob then matches nothing, and says so)."""
    if isinstance(fs, (LocalFileSystem, MemoryFileSystem)):
        return
    answer: dict[str, BaseException] = {}

    def ask() -> None:
        try:
            fs.info(folder)  # NOTE: not exists(), which s3fs answers False on any error, after its retries
        except FileNotFoundError:
            pass
        except BaseException as e:  # noqa: BLE001  (reported by the caller's thread)
            answer["error"] = e

    worker = threading.Thread(target=ask, name="clozeforge-probe", daemon=True)  # abandoned if it never answers
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise PrepError(f"{flag}: no answer from {fs.unstrip_protocol(folder)} in {seconds:.0f} s (network, endpoint or "
                        "credentials?)")
    if "error" in answer:
        raise PrepError(f"{flag}: cannot reach {fs.unstrip_protocol(folder)} ({describe(answer['error'])})")
