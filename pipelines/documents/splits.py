"""Splits: the parts of one input file that separate workers read, so that parallelism follows bytes, not files.

In:  a file URL and a ReadConfig (`split_bytes`, the text mode).
Out: `plan(path, config)`: None (read the file whole) or its Splits. An uncompressed line file (.jsonl, or
     .txt with --txt-mode line) over `split_bytes` is cut into byte ranges of that size; a record belongs to
     the range where its first byte lies, so a reader skips the partial line it starts in and reads past
     its end to finish its last line. A Parquet file with several row groups is cut into its row groups.
     A gzip WARC written a member a record (Common Crawl's .warc.gz and .warc.wet.gz) is cut at member starts
     (`_members`), each range's `before` the records ahead of it. Whole, by nature of the format: other compressed
     streams (they cannot be entered mid-way), the formats whose
     schemas/formats.py row says `whole`, .txt in document or paragraph mode (a record spans lines), small files,
     and files the binary probe rejects.

Line numbers stay those of the whole file (documents/keys and doc ids are derived from them, and errors
name them): a range's first line number comes from the newlines before it, which `count_newlines` counts
range by range, in parallel, before the ranges are read (`number_ranges`); a Parquet row group's first row
comes from the file's footer.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Iterable

import fsspec

from schemas import formats

_SCAN = 1 << 20
_BINARY_PROBE = 8192


@dataclasses.dataclass(frozen=True)
class Split:
    """Bytes [start, end) of a line file, or row groups [start, end) of a Parquet file; `before` lines (or
    rows) of the file precede it (for a byte range: the newlines before `start`, 0 until numbered)."""

    start: int
    end: int
    before: int = 0


def _is_compressed(path: str) -> bool:
    return formats.compression_of(path) is not None


def plan(path: str, fmt: str, split_bytes: int, txt_mode: str) -> list[Split] | None:
    """The Splits of `path` (format `fmt`, as readers.file_format gives it), or None to read it whole."""
    row = formats.FORMATS.get(fmt)
    if row is not None and row.split == "streams":
        try:
            return _streams(path, split_bytes)
        except Exception:  # noqa: BLE001 - an index that cannot be read: the dump is read whole, which says what is wrong
            return None
    if row is not None and row.split == "members":
        try:
            return _members(path, split_bytes)
        except Exception:  # noqa: BLE001 - a stream that does not scan: the whole-file reader counts what is wrong
            return None
    if _is_compressed(path) or row is None or row.split == "whole" or (fmt == "txt" and txt_mode != "line"):
        return None
    try:
        if fmt == "parquet":
            return _row_groups(path)
        fs, local = fsspec.core.url_to_fs(path)
        size = fs.size(local)
        if size <= split_bytes:
            return None
        with fs.open(local, "rb") as f:
            if b"\x00" in f.read(_BINARY_PROBE):  # the whole-file reader makes it one binary_file drop
                return None
    except Exception:  # noqa: BLE001 - unreadable here is unreadable for the whole-file reader, which says why
        return None
    return [Split(start, min(start + split_bytes, size)) for start in range(0, size, split_bytes)]


def _row_groups(path: str) -> list[Split] | None:
    import pyarrow.parquet as pq

    with fsspec.open(path, "rb") as f:
        metadata = pq.ParquetFile(f).metadata
    if metadata.num_row_groups < 2:
        return None
    splits, before = [], 0
    for index in range(metadata.num_row_groups):
        splits.append(Split(index, index + 1, before))
        before += metadata.row_group(index).num_rows
    return splits


def multistream_index(path: str) -> str | None:
    """The index beside a multistream dump (`...-multistream.xml.bz2` → `...-multistream-index.txt.bz2`), if any."""
    if not path.endswith(".xml.bz2"):
        return None
    index = path[: -len(".xml.bz2")] + "-index.txt.bz2"
    fs, local = fsspec.core.url_to_fs(index)
    return index if fs.exists(local) else None


def _streams(path: str, split_bytes: int) -> list[Split] | None:
    """Byte ranges of whole bz2 streams of a multistream dump, each at least `split_bytes` (the last aside), from the
    stream offsets its index lists (`offset:page id:title` a line); None without an index or for one range."""
    index = multistream_index(path)
    if index is None:
        return None
    with fsspec.open(index, "rb", compression="bz2") as f:
        offsets = sorted({int(line.split(b":", 1)[0]) for line in f if line.strip()})
    fs, local = fsspec.core.url_to_fs(path)
    size = fs.size(local)
    starts = [0]
    for offset in offsets:
        if offset - starts[-1] >= split_bytes:
            starts.append(offset)
    if len(starts) < 2:
        return None
    return [Split(a, b) for a, b in zip(starts, starts[1:] + [size])]


_CONTENT_LENGTH = re.compile(rb"\r\nContent-Length:[ \t]*(\d+)", re.I)
_HEAD = 1 << 16  # a member's first decoded bytes kept: enough for a WARC record's header


def _members(path: str, split_bytes: int) -> list[Split] | None:
    """Byte ranges of whole gzip members of a `.warc.gz`, each at least `split_bytes` (the last aside), `before` the
    records ahead of it; None for a file not over `split_bytes`, not gzip, not one WARC record a member (one member
    for the whole file, say), or cut short. One pass decodes the file member by member (memory: a block and a
    member's first 64 KiB), checking that each member is a record: `WARC/` first, and its header's Content-Length
    plus the header is the member's decoded length."""
    if getattr(formats.compression_of(path), "name", None) != "gzip":
        return None
    fs, local = fsspec.core.url_to_fs(path)
    size = fs.size(local)
    if size <= split_bytes:
        return None
    starts, members, at = [(0, 0)], 0, 0  # (offset, records before) of each range; compressed bytes consumed
    member, head, length = zlib.decompressobj(31), b"", 0
    with fs.open(local, "rb") as f:
        while block := f.read(_SCAN):
            while block:
                out = member.decompress(block, _SCAN)
                while True:  # memory stays flat: a member's decoded bytes are counted, its first 64 KiB kept
                    head += out[: _HEAD - len(head)]
                    length += len(out)
                    if not member.unconsumed_tail or member.eof:
                        break
                    out = member.decompress(member.unconsumed_tail, _SCAN)
                if not member.eof:
                    at += len(block)
                    break
                at += len(block) - len(member.unused_data)
                if not _one_record(head, length):
                    return None
                members += 1
                if at < size and at - starts[-1][0] >= split_bytes:
                    starts.append((at, members))
                block, member, head, length = member.unused_data, zlib.decompressobj(31), b"", 0
    if length or head or at != size or len(starts) < 2:  # a member cut short, or nothing to split
        return None
    return [Split(a, b, before) for (a, before), (b, _) in zip(starts, starts[1:] + [(size, 0)])]


def _one_record(head: bytes, length: int) -> bool:
    """Whether a member's decoded bytes (`head` of them kept, `length` in all) are one WARC record."""
    end = head.find(b"\r\n\r\n")
    found = _CONTENT_LENGTH.search(head, 0, end) if head.startswith(b"WARC/") and end >= 0 else None
    return found is not None and length == end + 4 + int(found.group(1)) + 4  # the record's closing CRLF CRLF


class ByteRange:
    """Bytes [0, size) of a file from where it stands: one worker's run of whole bz2 streams or gzip members."""

    def __init__(self, f, size: int):
        self.f, self.left = f, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.f.read(n) if n > 0 else b""
        self.left -= len(data)
        return data


def count_newlines(path: str, split: Split) -> int:
    """Newline bytes in [split.start, split.end) of `path`."""
    fs, local = fsspec.core.url_to_fs(path)
    count, at = 0, split.start
    with fs.open(local, "rb") as f:
        f.seek(at)
        while at < split.end and (block := f.read(min(_SCAN, split.end - at))):
            count += block.count(b"\n")
            at += len(block)
    return count


def number_ranges(counted: Iterable[tuple[Split, int]]) -> list[Split]:
    """One file's byte ranges with their newline counts → the ranges with `before` set, in file order."""
    numbered, before = [], 0
    for split, newlines in sorted(counted, key=lambda sc: sc[0].start):
        numbered.append(dataclasses.replace(split, before=before))
        before += newlines
    return numbered


def first_line_start(f, start: int) -> int:
    """The offset of the first line that starts at or after `start` (the file's size if none); `f` is left there."""
    if start == 0:
        f.seek(0)
        return 0
    at = start - 1
    f.seek(at)
    while block := f.read(_SCAN):
        newline = block.find(b"\n")
        if newline >= 0:
            at += newline + 1
            f.seek(at)
            return at
        at += len(block)
    return at
