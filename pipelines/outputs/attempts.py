"""Files written by one attempt of a step, and the final step's commit of the committed attempts' files.

In:  a staging directory under the run's temporary directory (--output/.tmp-<id>/...), the final URL a file is for.
Out: `open_attempt(staging, final)` yields an AttemptSink (outputs/atomic.py's Sink: hashed and measured as
     it is written) over a file no other attempt writes, `<staging>/<name>.<random>`; its `staged()` is the
     Staged record the step emits. `commit(staged)`, in the final step, renames that file to its final name, once:
     a retried final step finds it in place and goes on. `commit_all` does many at once.

This is the pattern of Beam's own file sinks (fileio.WriteToFiles). A runner may retry a bundle, run it twice at
once, or let a zombie attempt go on after the job moved past it, but it passes on the outputs of one attempt,
the committed one. So every attempt writes its own file, only the committed attempt's Staged record reaches
the final step, and the final step renames exactly that file: what lies under clean/, vocab/ and pairs/ is
the committed attempt's bytes, the sha256 in the manifest is theirs, and nothing there is ever half written.
Other attempts' files stay in the staging directory, which the final step removes with the rest of the run's
temporaries (a zombie that writes after that leaves its file under .tmp-<id>/, which the next run removes).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import posixpath
import uuid
from collections.abc import Iterable, Iterator

import fsspec

from pipelines.errors import PrepError, write_failed
from pipelines.outputs.atomic import Sink

_COMMIT_THREADS = 16
"""Renames in flight at once: on an object store a rename is a server-side copy and a delete, a round trip each."""


@dataclasses.dataclass(frozen=True)
class Staged:
    """A file one attempt wrote: where it is, where it goes, and what it holds."""

    final: str
    attempt: str
    bytes: int
    sha256: str


class AttemptSink(Sink):
    """A Sink over one attempt's file for `final`."""

    def __init__(self, f, url: str, final: str):
        super().__init__(f, url)
        self.final = final

    def staged(self) -> Staged:
        """The record of what was written (once the open_attempt block has ended)."""
        return Staged(final=self.final, attempt=self.url, bytes=self.bytes, sha256=self.sha256.hexdigest())


@contextlib.contextmanager
def open_attempt(staging: str, final: str) -> Iterator[AttemptSink]:
    """Yields a sink over a new file of this attempt's own for `final`, under `staging`; the file is closed on the
    way out, also when the block fails (it is then left for the final step's removal of the staging directory)."""
    url = posixpath.join(staging, f"{posixpath.basename(final)}.{uuid.uuid4().hex[:12]}")
    fs, path = fsspec.core.url_to_fs(url)
    try:
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        f = fs.open(path, "wb")
    except OSError as e:
        raise write_failed(url, e) from None
    try:
        yield AttemptSink(f, url, final)
    finally:
        try:
            f.close()  # a full disk can show only here, when the last buffer goes out
        except OSError as e:
            raise write_failed(url, e) from None


def attempt_directory(staging: str) -> str:
    """A new directory of this attempt's own under `staging`, for a step that writes several files (the vocabulary)."""
    return posixpath.join(staging, uuid.uuid4().hex[:12])


def staged_files(attempt: str, final: str) -> tuple[Staged, ...]:
    """The Staged records of every file an attempt wrote in its directory `attempt`, each for `final`/<its name>."""
    fs, root = fsspec.core.url_to_fs(attempt)
    items = []
    for path in sorted(fs.find(root)):
        name = posixpath.relpath(path, root)
        data = fs.cat_file(path)
        items.append(Staged(final=posixpath.join(final, name), attempt=posixpath.join(attempt, name), bytes=len(data),
                            sha256=hashlib.sha256(data).hexdigest()))
    return tuple(items)


def commit(item: Staged) -> bool:
    """Rename the attempt's file to its final name (replacing what is there); False when an earlier try of the final
    step did already (the attempt's file is gone and the final file has its size). Else a PrepError."""
    fs, attempt = fsspec.core.url_to_fs(item.attempt)
    final = fsspec.core.url_to_fs(item.final)[1]
    try:
        fs.makedirs(posixpath.dirname(final), exist_ok=True)
        fs.mv(attempt, final)
        return True
    except FileNotFoundError:
        if fs.exists(final) and fs.size(final) == item.bytes:
            return False
        raise PrepError(f"{item.attempt}: the committed file for {item.final} is gone; was --output's .tmp-* directory "
                        "removed while the run went on? Run again") from None
    except OSError as e:
        raise write_failed(item.final, e) from None


def commit_all(items: Iterable[Staged]) -> int:
    """commit() each item, several at once; returns how many were renamed now (the others were in place)."""
    items = list(items)
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(_COMMIT_THREADS, max(1, len(items)))) as pool:
        return sum(pool.map(commit, items))
