"""Read corpus files into documents, streaming, with every bad record turned into a counted Drop.

In:  one file URL (any fsspec protocol) and a ReadConfig.
Out: an iterator of RawDoc (kept), Drop (with reason, line and a sample) and Event (counted, not a
     record) — never an exception for bad data, unless `strict` is set, in which case the first bad record
     (or a truncated stream) raises a one-line PrepError naming the file and line.

Formats come from schemas/formats.py's table (by suffix, else by the file's first bytes). Read here: .txt (whole file,
blank-line paragraphs or lines as documents), .jsonl / .json / .ndjson (one JSON object per line), .parquet (row
groups streamed); the others (CSV/TSV, Arrow, MediaWiki dumps, WikiExtractor output, WARC/WET) by
pipelines/documents/formats/, whose drops pass through --strict here. Any compression of the table (.gz .zst .bz2
.xz). With a Split (pipelines/documents/splits.py), only that byte range's lines or those row groups are read,
numbered as in the whole file, so the records, their ids and their drops are the same however a file is split. Bytes come from
pipelines/documents/line_stream.py: compressed streams are decoded incrementally; a truncated stream keeps every
complete line before the cut (in .txt document and paragraph modes, also the cut record's decoded part)
and counts a `truncated_stream` event. A NUL in the first 8 KiB of decoded bytes makes the whole file one
`binary_file` drop; a record over `max_record_bytes` is a `record_too_long` drop, skipped unbuffered.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator

from pipelines.documents import remote
from pipelines.documents.formats import LEFT_OUT, READERS
from pipelines.documents.line_stream import LineStream, TooLong, UnreadableFile, open_input
from pipelines.documents.records import Drop, Event, RawDoc, make_doc_id
from pipelines.documents.splits import Split, first_line_start
from pipelines.errors import PrepError
from schemas import formats
from schemas.config import check_choices, flag

TXT_MODES = ("document", "paragraph", "line")
UTF8_POLICIES = ("replace", "drop")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
_SAMPLE_CHARS = 80
_BINARY_PROBE = 8192


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadConfig:
    """Reading input files"""

    text_field: str = flag("text", metavar="NAME", aliases=("--text-column",))
    """JSON field or CSV / TSV / Parquet / Arrow column holding the document text (--text-column: the same flag)."""
    id_field: str = flag("id", metavar="NAME")
    """Field holding the user's document id (optional; the id becomes part of clozeforge's doc_id)."""
    txt_mode: str = flag("document", choices=TXT_MODES)
    """.txt files: one document per file ('document'), per blank-line-separated block ('paragraph') or per line."""
    encoding: str = flag("utf-8", metavar="CODEC")
    """Encoding of the text inputs (a Python codec that keeps ASCII as is: utf-8, latin-1, cp1252, ...). It is
    stated, not guessed: charset-normalizer 3.5.3 read French and German latin-1 text as cp1250 ("naïve" ->
    "naďve"), which would keep wrong letters without a trace."""
    invalid_utf8: str = flag("drop", choices=UTF8_POLICIES)
    """A record whose bytes do not decode under --encoding: drop it (counted as `invalid_utf8`), or replace the
    bad bytes with U+FFFD and keep it (counted as an event; cleaning then removes the U+FFFD, and the letters
    they stood for are lost: "Café" in latin-1 becomes "Caf")."""
    wiki_namespaces: str = flag("0", metavar="N,N")
    """MediaWiki dumps: the namespaces whose pages are kept (0: articles; e.g. 0,14 adds categories); pages of the
    others are `namespace` drops."""
    strict: bool = False
    """Stop at the first bad record with an error naming file and line, instead of counting a drop."""
    max_record_bytes: int = flag(64 << 20, metavar="N")
    """Longest record (a JSON line, a .txt line, paragraph or whole file) read into memory; a longer one is
    dropped as `record_too_long` and skipped without being buffered. Ours: 64 MiB is far above any real
    document (Gopher's 100k-word cap is ~600 kB) and bounds a worker's memory against a corrupt or
    newline-free file."""
    split_bytes: int = flag(64 << 20, metavar="N")
    """Uncompressed .jsonl files (and .txt with --txt-mode line) larger than this are read in line-aligned byte
    ranges of this size by several workers; Parquet files by row group. Compressed (.gz, .zst) files, and .txt
    in document or paragraph mode, are read whole by one worker."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_record_bytes, int) or self.max_record_bytes < 1:
            raise PrepError(f"--max-record-bytes must be a positive number of bytes, got {self.max_record_bytes!r}")
        if not isinstance(self.split_bytes, int) or self.split_bytes < 1:
            raise PrepError(f"--split-bytes must be a positive number of bytes, got {self.split_bytes!r}")
        check_choices(self, PrepError)
        try:
            self.namespaces()
        except ValueError:
            raise PrepError(f"--wiki-namespaces {self.wiki_namespaces}: not a comma-separated list of numbers") from None
        try:
            ascii_safe = "\n a".encode(self.encoding) == b"\n a"
        except LookupError:
            raise PrepError(f"--encoding {self.encoding}: no such codec (e.g. utf-8, latin-1, cp1252)") from None
        except UnicodeError:
            ascii_safe = False
        if not ascii_safe:  # lines are split at b"\n" before decoding: UTF-16 and the like cannot be read so
            raise PrepError(f"--encoding {self.encoding}: not an ASCII-compatible codec (convert the files to UTF-8)")

    def namespaces(self) -> frozenset[int]:
        return frozenset(int(n) for n in self.wiki_namespaces.split(","))


def file_format(path: str) -> str:
    """The name of `path`'s row in schemas/formats.FORMATS ("unknown": none), from its name, else its first bytes."""
    head = None
    if formats.needs_sniff(path):
        try:
            with open_input(path) as f:
                head = LineStream(f, path, _BINARY_PROBE).head(formats.SNIFF_BYTES)
        except UnreadableFile:
            head = b""
    found = formats.format_of(path, head)
    return found.name if found is not None else "unknown"


def keeps_meta(paths: Iterable[str]) -> bool:
    """Whether a file of `paths` is of a format whose records keep per-document metadata (schemas/formats.py's
    `meta`; then the run's clean/ shards have the meta column): by name, by the first bytes where a name does not say."""
    return any(formats.FORMATS[fmt].meta for fmt in map(file_format, paths) if fmt in formats.FORMATS)


def read_file(source: str, path: str, config: ReadConfig, split: Split | None = None,
              name: str | None = None) -> Iterator[RawDoc | Drop | Event]:
    """Every record of `path` (of `split` only, if given) as a RawDoc or a Drop (plus Events). See the module
    docstring. Document ids are made from `name` (default: `source` and the path), see make_doc_id."""
    ids = f"{source}/{path}" if name is None else name
    fmt = file_format(path)
    if fmt == "unknown":
        yield from _bad(config, Drop(path, "unsupported_format", 0, path.rsplit("/", 1)[-1]))
        return
    try:
        if fmt == "parquet":
            yield from _read_parquet(source, path, ids, config, split)
        elif fmt in ("txt", "jsonl"):
            yield from _read_lines(source, path, ids, fmt, config, split)
        else:  # the readers of pipelines/documents/formats/: their drops go through --strict here
            for item in READERS[fmt](source, path, ids, config, split):
                yield from _bad(config, item) if isinstance(item, Drop) and item.reason not in LEFT_OUT else [item]
    except UnreadableFile as e:  # only the file as a whole: per-record problems are drops where they occur
        yield from _bad(config, Drop(path, "unreadable_file", 0, str(e)[:_SAMPLE_CHARS]))


def _bad(config: ReadConfig, drop: Drop) -> Iterator[Drop]:
    if config.strict:
        where = f"{drop.path}:{drop.line}" if drop.line else drop.path
        raise PrepError(f"{where}: {drop.reason.replace('_', ' ')} ({drop.sample!r})")
    yield drop


# -- line-oriented formats --------------------------------------------------------------------------


def _read_lines(source: str, path: str, ids: str, fmt: str, config: ReadConfig, split: Split | None) -> Iterator[RawDoc | Drop | Event]:
    limit = config.max_record_bytes
    with open_input(path) as f:
        if split is not None:  # planned by splits.plan: uncompressed, one record per line, not binary
            start = first_line_start(f, split.start)
            first = split.before + 1 + (start > split.start)  # a partial line skipped: its newline was in range
            stream = LineStream(f, path, limit)
            yield from _records(source, path, ids, fmt, config, _owned(stream, start, split.end, first))
            return
        stream = LineStream(f, path, limit)
        head = stream.head(_BINARY_PROBE)
        if b"\x00" in head:  # the file's bytes, not its first record: a PNG's first "line" has no NUL
            yield from _bad(config, Drop(path, "binary_file", 0, repr(head[:40])))
            return
        per_line = fmt != "txt" or config.txt_mode == "line"
        records = enumerate(stream, 1) if per_line else _joined(stream, limit, config.txt_mode == "paragraph")
        yield from _records(source, path, ids, fmt, config, records, stream, per_line)


def _owned(lines: Iterator[bytes | TooLong], start: int, end: int, first: int) -> Iterator[tuple[int, bytes | TooLong]]:
    """(line number, line) for the lines that start in [start, end), `lines` being read from `start`."""
    at = start
    for number, line in enumerate(lines, first):
        if at >= end:
            return
        yield number, line
        at += (line.size if isinstance(line, TooLong) else len(line)) + 1


def _records(source, path, ids, fmt, config, records, stream: LineStream | None = None, per_line: bool = True):
    """RawDoc / Drop / Event for numbered raw records; `stream` (a whole file's) reports a cut at its end."""
    limit = config.max_record_bytes
    for line, raw in records:
        if isinstance(raw, TooLong):
            yield from _bad(config, Drop(path, "record_too_long", line, f"{raw.size} bytes > --max-record-bytes {limit}"))
        elif per_line and stream is not None and stream.tail_cut:  # the partial last line of a cut stream
            if raw.strip():
                sample = raw[:_SAMPLE_CHARS].decode("utf-8", "replace")
                yield from _bad(config, Drop(path, "truncated_stream", line, sample))
        else:
            yield from _record(source, path, ids, fmt, line, raw, config)
    if stream is not None and stream.truncated:
        cut = stream.lines if stream.tail_cut else stream.lines + 1
        yield Event(path, "truncated_stream", cut)
        if config.strict:
            raise PrepError(f"{path}:{cut}: truncated stream (the compressed stream ends before its end marker)")


def _joined(lines: Iterator[bytes | TooLong], limit: int, by_paragraph: bool) -> Iterator[tuple[int, bytes | TooLong]]:
    """Lines joined into records tagged with their first line: the whole file, or blank-line separated
    paragraphs. A record past `limit` bytes becomes TooLong; its remaining lines are read, not kept."""
    parts: list[bytes] = []
    size, start = -1, 0  # -1: n lines are joined by n - 1 newlines
    for i, line in enumerate(lines, 1):
        if by_paragraph and isinstance(line, bytes) and not line.strip():
            if start:
                yield start, TooLong(size) if size > limit else b"\n".join(parts)
            parts, size, start = [], -1, 0
            continue
        start = start or i
        size += 1 + (line.size if isinstance(line, TooLong) else len(line))
        if size > limit:
            parts = []
        elif isinstance(line, bytes):
            parts.append(line)
    if start and (by_paragraph or size > 0):  # a file of one empty line is no document, as an empty file
        yield start, TooLong(size) if size > limit else b"\n".join(parts)


def _decode(path: str, line: int, raw: bytes, config: ReadConfig) -> tuple[str | None, list[Drop | Event]]:
    try:
        return raw.decode(config.encoding), []
    except UnicodeDecodeError as e:
        # the sample shows where the bad bytes are, escaped, so that a reader can tell their encoding
        sample = raw[max(0, e.start - 20): e.start + 20].decode(config.encoding, "backslashreplace")[:_SAMPLE_CHARS]
        if config.invalid_utf8 == "drop" or config.strict:
            return None, [Drop(path, "invalid_utf8", line, sample)]
        return raw.decode(config.encoding, "replace"), [Event(path, "invalid_utf8_replaced", line)]


def _record(source: str, path: str, ids: str, fmt: str, line: int, raw: bytes, config: ReadConfig) -> Iterator[RawDoc | Drop | Event]:
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
        # NOTE: not only JSONDecodeError: a 200,000-deep array raises RecursionError and a 5,000-digit
        # integer ValueError (Python's int-string limit); both are this line's problem, not the file's.
        except (ValueError, RecursionError):
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
    yield RawDoc(source=source, path=path, line=line, doc_id=make_doc_id(ids, key), text=text)


# -- parquet ----------------------------------------------------------------------------------------


def _read_parquet(source: str, path: str, ids: str, config: ReadConfig, split: Split | None) -> Iterator[RawDoc | Drop | Event]:
    import pyarrow.parquet as pq

    with open_input(path) as f:
        pf = _unreadable_if_failing(lambda: pq.ParquetFile(f))
        groups = range(pf.metadata.num_row_groups) if split is None else range(split.start, split.end)
        first = 1 if split is None else split.before + 1
        names = pf.schema_arrow.names
        if config.text_field not in names:
            rows = sum(pf.metadata.row_group(g).num_rows for g in groups)
            for row in range(first, first + rows):
                yield from _bad(config, Drop(path, "missing_text", row, f"no column {config.text_field!r} in {names}"))
            return
        columns = [config.text_field] + ([config.id_field] if config.id_field in names else [])
        batches = pf.iter_batches(columns=columns, batch_size=4096, row_groups=list(groups))
        row = first - 1
        while (batch := _unreadable_if_failing(lambda: next(batches, None))) is not None:
            texts = batch.column(0).to_pylist()
            user_ids = batch.column(1).to_pylist() if batch.num_columns > 1 else [None] * len(texts)
            for text, user_id in zip(texts, user_ids):
                row += 1
                if text is None:
                    yield from _bad(config, Drop(path, "null_text", row))
                elif not isinstance(text, str):
                    yield from _bad(config, Drop(path, "non_string_text", row, repr(text)[:_SAMPLE_CHARS]))
                elif not text.strip():
                    yield from _bad(config, Drop(path, "empty_text", row))
                else:
                    key = f"{row}:{user_id}" if user_id is not None else row
                    yield RawDoc(source=source, path=path, line=row, doc_id=make_doc_id(ids, key), text=text)


def _unreadable_if_failing(step):
    """Run one file-level parquet step (open, next row group); Arrow's errors there mean the file is unreadable."""
    import pyarrow as pa

    try:
        return step()
    except (OSError, ValueError, pa.ArrowException) as e:
        if remote.is_store_failure(e):
            raise
        raise UnreadableFile(f"{type(e).__name__}: {e}") from None
