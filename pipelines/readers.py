"""Read corpus files into documents, streaming, with every bad record turned into a counted Drop.

In:  one file URL (any fsspec protocol) and a ReadConfig.
Out: an iterator of RawDoc (kept) and Drop (with reason, line and a sample) — never an exception for bad
     data, unless `strict` is set, in which case the first bad record raises a one-line PrepError
     naming the file and line.

Formats by suffix: .txt (whole file, blank-line paragraphs or lines as documents), .jsonl / .json /
.jsonl.gz / .jsonl.zst (one JSON object per line), .parquet (row groups streamed). Compressed streams
are decoded incrementally; a truncated stream keeps every complete line before the cut.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zlib
from collections.abc import Iterator

import fsspec

from pipelines.errors import PrepError
from pipelines.records import Drop, RawDoc, make_doc_id

TXT_MODES = ("document", "paragraph", "line")
UTF8_POLICIES = ("replace", "drop")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
_SAMPLE_CHARS = 80
_BINARY_PROBE = 8192


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadConfig:
    text_field: str = "text"
    """JSON / parquet field holding the document text."""
    id_field: str = "id"
    """Field holding the user's document id (optional; the id becomes part of clozeforge's doc_id)."""
    txt_mode: str = "document"
    """.txt files: one document per file ('document'), per blank-line-separated block ('paragraph') or per line."""
    invalid_utf8: str = "replace"
    """Bytes that are not UTF-8: replace them with U+FFFD and keep the record (counted), or drop the record."""
    strict: bool = False
    """Stop at the first bad record with an error naming file and line, instead of counting a drop."""

    def __post_init__(self) -> None:
        if self.txt_mode not in TXT_MODES:
            raise PrepError(f"--txt-mode must be one of {', '.join(TXT_MODES)}, got {self.txt_mode!r}")
        if self.invalid_utf8 not in UTF8_POLICIES:
            raise PrepError(f"--invalid-utf8 must be one of {', '.join(UTF8_POLICIES)}, got {self.invalid_utf8!r}")


@dataclasses.dataclass(frozen=True)
class Event:
    """Something that happened to a file and is worth counting but is not a dropped record."""

    path: str
    kind: str  # "invalid_utf8_replaced", "truncated_stream"
    line: int = 0


def file_format(path: str) -> str:
    name = path.lower()
    for suffix in (".gz", ".zst", ".zstd"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(".txt") or "." not in name.rsplit("/", 1)[-1]:
        return "txt"
    return "unknown"


def read_file(source: str, path: str, config: ReadConfig) -> Iterator[RawDoc | Drop | Event]:
    """Every record of `path` as a RawDoc or a Drop (plus Events). See the module docstring."""
    fmt = file_format(path)
    if fmt == "unknown":
        yield from _bad(config, Drop(path, "unsupported_format", 0, path.rsplit("/", 1)[-1]))
        return
    try:
        if fmt == "parquet":
            yield from _read_parquet(source, path, config)
        else:
            yield from _read_lines(source, path, fmt, config)
    except PrepError:
        raise
    except (OSError, ValueError, EOFError) as e:  # the file itself cannot be opened or decoded at all
        yield from _bad(config, Drop(path, "unreadable_file", 0, f"{type(e).__name__}: {e}"[:_SAMPLE_CHARS]))


def _bad(config: ReadConfig, drop: Drop) -> Iterator[Drop]:
    if config.strict:
        where = f"{drop.path}:{drop.line}" if drop.line else drop.path
        raise PrepError(f"{where}: {drop.reason.replace('_', ' ')} ({drop.sample!r})")
    yield drop


# -- line-oriented formats --------------------------------------------------------------------------


class _Truncated(Exception):
    """A compressed stream ended before its end marker; args[0] holds the undecoded partial last line."""


def _chunks(f: io.BufferedIOBase, path: str, size: int = 1 << 20) -> Iterator[bytes]:
    """Decoded bytes of `f`, block by block; raises EOFError when a compressed stream is cut short."""
    name = path.lower()
    if name.endswith(".gz"):
        # One zlib object per gzip member (concatenated members are valid gzip); unlike GzipFile.read, this
        # hands out everything decoded before a cut instead of losing the last block to the EOFError.
        member, fed = zlib.decompressobj(wbits=31), False
        while compressed := f.read(size):
            while compressed:
                if out := member.decompress(compressed):
                    yield out
                fed = True
                if member.eof:
                    compressed, member, fed = member.unused_data, zlib.decompressobj(wbits=31), False
                else:
                    compressed = b""
        if fed and not member.eof:
            raise EOFError("gzip member ended before its end marker")
    elif name.endswith((".zst", ".zstd")):
        import zstandard  # part of the prep extra

        # NOTE: zstandard's stream_reader reports a frame cut mid-way as a clean EOF, so frames are decoded
        # one by one with decompressobj(), whose `eof` flag says whether the frame's end was reached.
        dctx = zstandard.ZstdDecompressor()
        frame, fed = dctx.decompressobj(), False
        while compressed := f.read(size):
            while compressed:
                if out := frame.decompress(compressed):
                    yield out
                fed = True
                if frame.eof:
                    compressed, frame, fed = frame.unused_data, dctx.decompressobj(), False
                else:
                    compressed = b""
        if fed and not frame.eof:
            raise EOFError("zstd frame ended before its end marker")
    else:
        while block := f.read(size):
            yield block


def _raw_lines(f: io.BufferedIOBase, path: str) -> Iterator[bytes]:
    """Lines as bytes; raises _Truncated(partial_tail) when a compressed stream ends early."""
    pending, decoded_any = b"", False
    try:
        for block in _chunks(f, path):
            pending += block
            decoded_any = True
            *lines, pending = pending.split(b"\n")
            yield from lines
    except EOFError as e:
        raise _Truncated(pending) from e
    except Exception as e:  # zlib.error, or zstandard.ZstdError (derives from Exception only)
        if not isinstance(e, zlib.error) and type(e).__name__ != "ZstdError":
            raise
        if not decoded_any:  # not a compressed stream at all: the whole file is unreadable
            raise ValueError(f"not a valid {path.rsplit('.', 1)[-1]} stream ({e})") from None
        raise _Truncated(pending) from e
    if pending:
        yield pending


def _read_lines(source: str, path: str, fmt: str, config: ReadConfig) -> Iterator[RawDoc | Drop | Event]:
    with fsspec.open(path, "rb") as f:
        lines = _raw_lines(f, path)
        if fmt == "txt" and config.txt_mode == "document":
            records = _whole_file(lines)
        elif fmt == "txt" and config.txt_mode == "paragraph":
            records = _txt_records(lines)
        else:
            records = enumerate(lines, 1)
        line_no, first = 0, True
        try:
            for line_no, raw in records:
                if first and b"\x00" in raw[:_BINARY_PROBE]:
                    yield from _bad(config, Drop(path, "binary_file", line_no, repr(raw[:40])))
                    return
                first = False
                yield from _record(source, path, fmt, line_no, raw, config)
        except _Truncated as cut:
            tail = cut.args[0] if cut.args else b""
            yield Event(path, "truncated_stream", line_no + 1)
            if tail.strip():
                sample = tail[:_SAMPLE_CHARS].decode("utf-8", "replace")
                yield from _bad(config, Drop(path, "truncated_stream", line_no + 1, sample))


def _whole_file(lines: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    body = b"\n".join(lines)  # a whole-file document is one record by definition
    if body:
        yield 1, body


def _txt_records(lines: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    """Blank-line separated paragraphs, each tagged with the line it starts on."""
    block: list[bytes] = []
    start = 0
    for i, line in enumerate(lines, 1):
        if line.strip():
            if not block:
                start = i
            block.append(line)
        elif block:
            yield start, b"\n".join(block)
            block = []
    if block:
        yield start, b"\n".join(block)


def _decode(path: str, line: int, raw: bytes, config: ReadConfig) -> tuple[str | None, list[Drop | Event]]:
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError:
        sample = raw[:_SAMPLE_CHARS].decode("utf-8", "replace")
        if config.invalid_utf8 == "drop" or config.strict:
            return None, [Drop(path, "invalid_utf8", line, sample)]
        return raw.decode("utf-8", "replace"), [Event(path, "invalid_utf8_replaced", line)]


def _record(source: str, path: str, fmt: str, line: int, raw: bytes, config: ReadConfig) -> Iterator[RawDoc | Drop | Event]:
    if fmt == "jsonl" and not raw.strip():
        return  # blank lines between JSON records are not records
    text, notes = _decode(path, line, raw, config)
    for note in notes:
        yield from _bad(config, note) if isinstance(note, Drop) else [note]
    if text is None:
        return
    user_id: object = None
    if fmt == "jsonl":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            yield from _bad(config, Drop(path, "bad_json", line, text[:_SAMPLE_CHARS]))
            return
        if not isinstance(obj, dict):
            yield from _bad(config, Drop(path, "not_an_object", line, text[:_SAMPLE_CHARS]))
            return
        if config.text_field not in obj:
            yield from _bad(config, Drop(path, "missing_text", line, text[:_SAMPLE_CHARS]))
            return
        value = obj[config.text_field]
        if value is None:
            yield from _bad(config, Drop(path, "null_text", line, text[:_SAMPLE_CHARS]))
            return
        if not isinstance(value, str):
            yield from _bad(config, Drop(path, "non_string_text", line, text[:_SAMPLE_CHARS]))
            return
        user_id, text = obj.get(config.id_field), value
    if not text.strip():
        yield from _bad(config, Drop(path, "empty_text", line, text[:_SAMPLE_CHARS]))
        return
    key = f"{line}:{user_id}" if user_id is not None else line
    yield RawDoc(source=source, path=path, line=line, doc_id=make_doc_id(path, key), text=text)


# -- parquet ----------------------------------------------------------------------------------------


def _read_parquet(source: str, path: str, config: ReadConfig) -> Iterator[RawDoc | Drop | Event]:
    import pyarrow.parquet as pq

    with fsspec.open(path, "rb") as f:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        if config.text_field not in names:
            for row in range(1, pf.metadata.num_rows + 1):
                yield from _bad(config, Drop(path, "missing_text", row, f"no column {config.text_field!r} in {names}"))
            return
        columns = [config.text_field] + ([config.id_field] if config.id_field in names else [])
        row = 0
        for batch in pf.iter_batches(columns=columns, batch_size=4096):
            texts = batch.column(0).to_pylist()
            ids = batch.column(1).to_pylist() if batch.num_columns > 1 else [None] * len(texts)
            for text, user_id in zip(texts, ids):
                row += 1
                if text is None:
                    yield from _bad(config, Drop(path, "null_text", row))
                elif not isinstance(text, str):
                    yield from _bad(config, Drop(path, "non_string_text", row, repr(text)[:_SAMPLE_CHARS]))
                elif not text.strip():
                    yield from _bad(config, Drop(path, "empty_text", row))
                else:
                    key = f"{row}:{user_id}" if user_id is not None else row
                    yield RawDoc(source=source, path=path, line=row, doc_id=make_doc_id(path, key), text=text)
