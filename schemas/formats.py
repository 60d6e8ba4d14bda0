"""The one table of input formats and compressions: how a file is recognised, decompressed, split and where its text is.

In:  a file's URL (its name) and, for a name that does not say, its first decoded bytes.
Out: `format_of(url, head)`: the FORMATS row of a file (None: not a format clozeforge reads); `compression_of(url)`:
     its COMPRESSIONS row (None: stored plain), whose `decompressor()` decodes a stream incrementally and says
     where each compressed member ends (so a cut stream is told from a whole one); `decompress(url, data)`.

Read by prep's inputs (pipelines/documents/readers.py: one reader per row, by name), by --decontaminate's files
(pipelines/documents/decontaminate.py) and by fine-tuning's and embed's tables (schemas/tables.py: the rows marked
`table`). A name is recognised by its suffix once compression suffixes are taken off; a name whose suffix is not a
format's (WikiExtractor's `AA/wiki_00`, a dump named `...xml-p10p30302.bz2`) by its first bytes (`sniff`): a
MediaWiki export, WikiExtractor's `<doc>` blocks, a WARC record, a JSON object; an extensionless name is text.
Standard library only: zstandard is imported when a .zst stream is opened (it is in the `prep` extra).
"""

from __future__ import annotations

import bz2
import dataclasses
import json
import lzma
import re
import zlib
from collections.abc import Callable

SNIFF_BYTES = 4096
"""Decoded bytes a sniff looks at."""


@dataclasses.dataclass(frozen=True)
class Compression:
    name: str
    suffixes: tuple[str, ...]
    magic: bytes
    fsspec: str
    """fsspec's name for it (`compression=` of fsspec.open)."""

    def decompressor(self):
        """A fresh decoder of one member: `.decompress(bytes)`, `.eof` (the member's end marker was read) and
        `.unused_data` (the bytes after it: the next member of a multi-member file)."""
        if self.name == "gzip":
            return zlib.decompressobj(wbits=31)
        if self.name == "bzip2":
            return bz2.BZ2Decompressor()
        if self.name == "xz":
            return lzma.LZMADecompressor()
        import zstandard  # the prep extra

        # NOTE: zstandard's stream_reader reports a frame cut mid-way as a clean EOF; decompressobj's `eof` does not
        return zstandard.ZstdDecompressor().decompressobj()


COMPRESSIONS = (
    Compression("gzip", (".gz",), b"\x1f\x8b", "gzip"),
    Compression("zstd", (".zst", ".zstd"), b"\x28\xb5\x2f\xfd", "zstd"),
    Compression("bzip2", (".bz2",), b"BZh", "bz2"),
    Compression("xz", (".xz",), b"\xfd7zXZ\x00", "xz"),
)
"""Every compression, decoded the same way (member by member, a cut counted), wherever a file is read."""


def _starts(*prefixes: bytes) -> Callable[[bytes], bool]:
    return lambda head: head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(prefixes)


def _json_object_line(head: bytes) -> bool:
    first = head.lstrip().split(b"\n", 1)
    if not first[0].startswith(b"{"):
        return False
    try:
        return isinstance(json.loads(first[0]), dict)
    except ValueError:
        return len(first) == 1  # the first line runs past the sniffed bytes: a long JSON object


def _mediawiki(head: bytes) -> bool:
    return b"<mediawiki" in head[:1024]  # after an optional <?xml ...?> declaration

@dataclasses.dataclass(frozen=True)
class Format:
    name: str
    suffixes: tuple[str, ...]
    doc: str
    """What a record is, and its text."""
    text_field: str | None
    """The field or column holding the text (--text-field's default applies); None: the format says where."""
    split: str
    """How one file is cut for several workers: `lines` (byte ranges at line starts, uncompressed files),
    `row_groups`, `streams` (a multistream .bz2 by the bz2 streams its index lists), `members` (a .gz written a gzip
    member a record, at member starts; other files whole), or `whole` (one worker a file; parallelism comes from many
    files)."""
    extra: str | None = None
    """The clozeforge extra its reader needs beyond `prep`."""
    table: bool = False
    """Read as a table by finetune, embed and --decontaminate (schemas/tables.py)."""
    sniff: Callable[[bytes], bool] | None = None
    """Recognises the format from a file's first decoded bytes, for names that do not say."""
    meta: tuple[str, ...] = ()
    """The per-document metadata its records keep (RawDoc.meta's keys; the clean/ shards' meta column)."""


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("txt", (".txt",), "the whole file, its blank-line paragraphs or its lines (--txt-mode)", None, "lines", table=True),
    Format("jsonl", (".jsonl", ".json", ".ndjson"), "one JSON object a line (WikiExtractor --json too)", "text", "lines",
           table=True, sniff=_json_object_line),
    Format("csv", (".csv",), "a header line, then one record a row; RFC 4180 quotes", "text", "whole", table=True),
    Format("tsv", (".tsv",), "a header line, then one record a line; no quoting", "text", "whole", table=True),
    Format("parquet", (".parquet",), "one record a row", "text", "row_groups", table=True),
    Format("arrow", (".arrow",), "one record a row of an Arrow IPC stream (datasets' save_to_disk)", "text", "whole",
           table=True),
    Format("mediawiki", (".xml",), "a <page> of a MediaWiki XML export (pages-articles dumps): its wikitext as plain text",
           None, "streams", extra="wiki", sniff=_mediawiki, meta=("title", "page_id")),
    Format("wikiextractor", (), "a <doc id url title> block of WikiExtractor's output", None, "whole",
           sniff=_starts(b"<doc id=")),
    Format("warc", (".warc", ".wet", ".warc.wet"), "a WET conversion record, or a WARC response's HTML as text", None,
           "members", extra="web", sniff=_starts(b"WARC/1."), meta=("url", "language")),
)}
"""Every format clozeforge reads, by name."""

_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")


def compression_of(url: str) -> Compression | None:
    name = url.rsplit("/", 1)[-1].lower()
    return next((c for c in COMPRESSIONS if name.endswith(c.suffixes)), None)


def plain_name(url: str) -> str:
    """The file's name, lower-cased, less its compression suffix."""
    name = url.rsplit("/", 1)[-1].lower()
    found = compression_of(name)
    return name[: -len(next(s for s in found.suffixes if name.endswith(s)))] if found else name


def by_suffix(url: str) -> Format | None:
    name = plain_name(url)
    return next((f for f in FORMATS.values() if f.suffixes and name.endswith(f.suffixes)), None)


def needs_sniff(url: str) -> bool:
    """Whether the name leaves the format open (then `format_of` wants the file's first decoded bytes)."""
    return by_suffix(url) is None


def format_of(url: str, head: bytes | None = None) -> Format | None:
    """The file's row: by suffix; else by `head` (its first decoded bytes); else text for an extensionless name."""
    found = by_suffix(url)
    if found is not None:
        return found
    if head is not None:
        found = next((f for f in FORMATS.values() if f.sniff is not None and f.sniff(head[:SNIFF_BYTES])), None)
        if found is not None:
            return found
    return None if _EXTENSION.search(plain_name(url)) else FORMATS["txt"]


def decompress(url: str, data: bytes) -> bytes:
    """A whole file's bytes decoded by its suffix (every member); EOFError if the stream is cut short."""
    compression = compression_of(url)
    if compression is None:
        return data
    out = []
    while data:
        member = compression.decompressor()
        out.append(member.decompress(data))
        if not member.eof:
            raise EOFError(f"{url}: the {compression.name} stream ends before its end marker")
        data = member.unused_data
    return b"".join(out)
