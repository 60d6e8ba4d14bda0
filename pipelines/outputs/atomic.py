"""Files that appear whole or not at all, on any fsspec filesystem (local disk, gs://, s3://).

In:  a destination URL, and the bytes written to it.
Out: the file under its name once complete: data goes to `<name>.tmp-<random>` and is renamed into place,
     so a retried worker or a killed run never leaves half a file under a final name (a failed write
     removes its temporary; one a kill -9 leaves is removed by the next run, outputs/ownership.py); the sink measures
     and hashes what passes through it (a shard's size and sha256 go in the manifest).
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
import uuid

import fsspec

from pipelines.errors import write_failed


class Sink:
    """A binary file being written under a temporary name, hashed and measured as it goes."""

    def __init__(self, f, url: str):
        self.f, self.url, self.sha256, self.bytes, self.closed = f, url, hashlib.sha256(), 0, False

    def write(self, data) -> int:
        self.sha256.update(data)
        self.bytes += len(data)
        try:
            return self.f.write(data)
        except OSError as e:
            raise write_failed(self.url, e) from None

    def tell(self) -> int:
        return self.bytes

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.closed = True  # the owner closes the underlying file


@contextlib.contextmanager
def open_atomically(url: str):
    """Yields a Sink for writing `url`; the file appears under its name only once it is complete."""
    fs, path = fsspec.core.url_to_fs(url)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        f = fs.open(tmp, "wb")
    except OSError as e:
        raise write_failed(url, e) from None
    try:
        yield Sink(f, url)  # the caller's own errors (reading its input, say) pass through as they are
    except BaseException:
        with contextlib.suppress(OSError):  # a failed write leaves no half file under either name
            f.close()
            fs.rm(tmp)
        raise
    try:
        f.close()  # a full disk can show only here, when the last buffer goes out
        fs.mv(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            fs.rm(tmp)
        raise write_failed(url, e) from None


def put_atomically(url: str, data: bytes) -> None:
    with open_atomically(url) as sink:
        sink.write(data)
