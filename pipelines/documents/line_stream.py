"""Decoded lines of one file, in bounded memory: the byte layer under pipelines/documents/readers.py.

In:  an open binary file, its path (its suffix names the compression: schemas/formats.py) and the longest line
     to hold in memory.
Out: `LineStream`, an iterator of lines (bytes, newline removed) in which a line longer than the bound
     comes out as `TooLong(size)`: skipped up to its newline, never buffered. `head()` reads ahead the
     first bytes (the binary-file probe) without losing them. After iteration `truncated` says whether a
     compressed stream ended before its end marker, and `tail_cut` whether the last line came from that
     cut (a partial line). A file that cannot be opened, read or decoded at all raises `UnreadableFile`.

Only new bytes are searched for newlines and a partial line is kept as a list of blocks joined once, so
reading is linear in the line length: a 128 MiB line took 10.6 s of CPU when each block was appended to a
pending buffer that was split again whole (quadratic), and takes 0.28 s this way (0.13 s to skip it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Iterator

import fsspec

from pipelines.documents import remote
from schemas import formats

_BLOCK = 1 << 20


class UnreadableFile(Exception):
    """The file cannot be opened, read, or decoded at all (nothing about a single record)."""


class BadStream(Exception):
    """Compressed bytes that do not decode (a corrupt or foreign stream)."""


@dataclasses.dataclass(frozen=True)
class TooLong:
    """A line (or record) over the byte limit, skipped unread; `size` is its length in bytes."""

    size: int


def decoded_blocks(f: io.BufferedIOBase, path: str, size: int = _BLOCK) -> Iterator[bytes]:
    """Decoded bytes of `f`, block by block, by its name's compression (schemas/formats.py: .gz, .zst, .bz2, .xz);
    raises EOFError when a compressed stream is cut short."""
    compression = formats.compression_of(path)
    if compression is None:
        while block := f.read(size):
            yield block
        return
    # One decoder per member (concatenated members are valid gzip, bzip2, xz and zstd); unlike GzipFile.read, this
    # hands out everything decoded before a cut instead of losing the last block to the EOFError.
    frame, fed = compression.decompressor(), False
    while compressed := f.read(size):
        while compressed:
            try:
                out = frame.decompress(compressed)
            except Exception as e:  # zlib.error, OSError (bz2), LZMAError, ZstdError: the bytes, not the store
                raise BadStream(str(e) or type(e).__name__) from None
            if out:
                yield out
            fed = True
            if frame.eof:
                compressed, frame, fed = frame.unused_data, compression.decompressor(), False
            else:
                compressed = b""
    if fed and not frame.eof:
        raise EOFError("compressed stream ended before its end marker")


def _trim_partial_utf8(data: bytes) -> bytes:
    """`data` less a UTF-8 sequence cut short at its end (a cut stream splits characters too)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # a lead byte: its sequence needs 2, 3 or 4 bytes
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data[:-back] if back < need else data
    return data


@contextlib.contextmanager
def open_input(path: str) -> Iterator[io.BufferedIOBase]:
    """`path` opened for reading; a file that cannot be opened is UnreadableFile, a store that fails raises."""
    try:
        f = fsspec.open(path, "rb").open()
    except OSError as e:
        if remote.is_store_failure(e):  # the store's, not the file's: ReadCorpus stops the run naming the input
            raise
        raise UnreadableFile(f"{type(e).__name__}: {e}") from None
    with f:
        yield f


class LineStream:
    """Iterate once: lines as bytes, or TooLong for a line over `max_line_bytes`. See the module docstring."""

    def __init__(self, f: io.BufferedIOBase, path: str, max_line_bytes: int):
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.truncated = False
        self.tail_cut = False
        self.lines = 0
        self._blocks = decoded_blocks(f, path)
        self._ahead: list[bytes] = []
        self._decoded_any = False

    def _next_block(self) -> bytes | None:
        try:
            block = next(self._blocks)
        except StopIteration:
            return None
        except EOFError:
            self.truncated = True
            return None
        except OSError as e:
            if remote.is_store_failure(e):  # the store's, not the file's (pipelines/documents/remote.py)
                raise
            raise UnreadableFile(f"{type(e).__name__}: {e}") from None
        except BadStream as e:
            if not self._decoded_any:  # not a compressed stream at all: the whole file is unreadable
                raise UnreadableFile(f"not a valid {self.path.rsplit('.', 1)[-1]} stream ({e})") from None
            self.truncated = True  # corrupt mid-way: keep what decoded before, as for a cut
            return None
        self._decoded_any = True
        return block

    def head(self, size: int) -> bytes:
        """The first `size` decoded bytes (fewer if the file is shorter), read ahead and kept for iteration."""
        have = sum(map(len, self._ahead))
        while have < size and (block := self._next_block()) is not None:
            self._ahead.append(block)
            have += len(block)
        return b"".join(self._ahead)[:size]

    def blocks(self) -> Iterator[bytes]:
        """The decoded bytes, block by block (those `head` read ahead first): for readers that parse bytes, not lines."""
        return self._all_blocks()

    def as_file(self) -> io.RawIOBase:
        """The decoded bytes as a read-only binary file (a WARC parser's input)."""
        return _BlockFile(self._all_blocks())

    def _all_blocks(self) -> Iterator[bytes]:
        yield from self._ahead
        self._ahead = []
        while (block := self._next_block()) is not None:
            yield block

    def __iter__(self) -> Iterator[bytes | TooLong]:
        for line in self._split():
            self.lines += 1
            yield line

    def _split(self) -> Iterator[bytes | TooLong]:
        limit = self.max_line_bytes
        parts: list[bytes] = []  # the current partial line, block by block (empty while skipping)
        size = 0  # its length so far, counted also while skipping
        for block in self._all_blocks():
            *complete, rest = block.split(b"\n")
            for piece in complete:
                size += len(piece)
                if size > limit:
                    yield TooLong(size)
                else:
                    yield b"".join([*parts, piece]) if parts else piece
                parts, size = [], 0
            size += len(rest)
            if size > limit:
                parts = []
            elif rest:
                parts.append(rest)
        if size:
            self.tail_cut = self.truncated
            if size > limit:
                yield TooLong(size)
            else:
                tail = b"".join(parts)
                yield _trim_partial_utf8(tail) if self.truncated else tail


class _BlockFile(io.RawIOBase):
    """Read-only, forward-only; `tell` and a forward `seek` work (fastwarc asks for them)."""

    def __init__(self, blocks: Iterator[bytes]):
        self._blocks, self._rest, self._at = blocks, b"", 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self._at + offset if whence == io.SEEK_CUR else -1
        if target < self._at:
            raise io.UnsupportedOperation("a decoded stream only seeks forward")
        while self._at < target and self.read(min(target - self._at, _BLOCK)):
            pass
        return self._at

    def readinto(self, buffer) -> int:
        while not self._rest:
            self._rest = next(self._blocks, b"")
            if not self._rest:
                return 0
        n = min(len(buffer), len(self._rest))
        buffer[:n], self._rest = self._rest[:n], self._rest[n:]
        self._at += n
        return n
