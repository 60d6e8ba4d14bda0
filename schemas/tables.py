"""A user's own table (labelled data, texts to embed) read so that every physical record is kept or dropped with
a counted reason. The one reader of `clozeforge finetune` and `clozeforge embed` (standard library and pyarrow;
fsspec, imported when called, opens the file).

In:  a local path or fsspec URL (compression by suffix: .gz .zst .bz2 .xz) in one of the `table` formats of
     schemas/formats.py: .tsv and .csv (a header line, then records), .jsonl / .json / .ndjson (one JSON object a
     line), .parquet and .arrow (one record a row), .txt (one text a line, the column `text`); a `TableReading` (how delimited fields are quoted, whether a bad record stops the
     read), the text encoding, and the format of a name with none of these suffixes.
Out: `Table`: the (line, row) pairs kept, the file's sha256, and its `Account`: physical lines, records read,
     dropped per reason with the first line numbers of each. A caller that drops more rows records them in the
     same Account, whose `check(kept)` holds `read == kept + Σ dropped` as prep's report does. `read_texts`: the
     texts of one column (embed's input, contextual's --reference and --contexts), blank ones counted drops.

A bad record (a field count other than the header's, a bad quote, a line that is not a JSON object) stops the
read with a TableError, one line naming file and line, unless `skip_bad_rows`: then it is a counted drop at its
line. A blank line is always a counted drop. A problem with the file as a whole (not found, not in the
encoding, binary, not Parquet, a header naming a column twice) is always a TableError.

Quoting: GLUE's, CoNLL's and most exporters' TSV files do not quote, and a sentence may open with a double quote.
Read with RFC 4180 quoting, that quote opens a field that swallows the tabs and newlines of the next rows until
the next quote: a file in SST-2's layout of 360 rows read as 324, two of them holding other rows' text, and
nothing said. So `auto` reads .tsv with no quoting (a line is a record, split at each tab) and .csv with RFC
4180 quoting (a quoted field may hold the delimiter, "" for a quote, and newlines). Either way a record is never
joined to another: a field count other than the header's is a drop at its line, and a record that spans lines
(possible only with quoting) is counted in `multiline_records`, where a runaway quote shows.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import hashlib
import io
from collections.abc import Iterator
from typing import Any, ClassVar

from schemas import formats
from schemas.config import Config, check_choices, flag
from schemas.jsonl import JsonLineError, json_object

QUOTINGS = ("auto", "none", "csv")
SHOWN_LINES = 20
"""Line numbers kept per drop reason in a report (the count is always whole)."""
_BINARY_PROBE = 8192


class TableError(ValueError):
    """A file that cannot be read as given; the message is one line naming file and line."""


class Undecodable(TableError):
    """A byte that does not decode in the file's encoding (the message names line, column and byte)."""


class AccountingError(TableError):
    """read != kept + Σ dropped: a record was lost or counted twice (a bug here, never the user's file)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableReading(Config):
    """How a user's table is read (flags of finetune and embed)."""

    quoting: str = flag(default="auto", choices=QUOTINGS)
    """Quotes in .tsv/.csv files. auto: none for .tsv (as GLUE, CoNLL and most exporters write it: a line is a
    record, a double quote is a character), RFC 4180 for .csv (a quoted field may hold commas, "" and newlines);
    none or csv: that rule for either."""
    skip_bad_rows: bool = False
    """Count a bad row (a field count other than the header's, a bad quote, a line that is not a JSON object) as
    a drop at its line instead of stopping at it."""

    def __post_init__(self) -> None:
        check_choices(self)


@dataclasses.dataclass
class Account:
    """What became of every record of one file."""

    format: str
    quoting: str | None = None
    """The rule delimited fields were read with (none or csv); None for the other formats."""
    lines: int = 0
    """Physical lines, the header's included (rows, for Parquet)."""
    read: int = 0
    """Records read (the header is not one)."""
    dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    dropped_at: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    """The first SHOWN_LINES line numbers of each drop reason."""
    multiline_records: int = 0

    def drop(self, reason: str, line: int) -> None:
        self.dropped[reason] += 1
        shown = self.dropped_at.setdefault(reason, [])
        if len(shown) < SHOWN_LINES:
            shown.append(line)

    def check(self, kept: int, where: str) -> None:
        """AccountingError unless every record read is kept or dropped, once."""
        if self.read != kept + sum(self.dropped.values()):
            raise AccountingError(f"{where}: accounting mismatch: read {self.read} records, kept {kept}, dropped "
                                  f"{sum(self.dropped.values())} {dict(self.dropped)}")

    def report(self, kept: int) -> dict[str, Any]:
        out = {"format": self.format, "lines": self.lines, "read": self.read, "kept": kept,
               "dropped": dict(sorted(self.dropped.items())), "dropped_at": dict(sorted(self.dropped_at.items()))}
        if self.quoting is not None:
            out.update(quoting=self.quoting, multiline_records=self.multiline_records)
        return out


@dataclasses.dataclass
class Table:
    url: str
    sha256: str
    rows: list[tuple[int, dict[str, Any]]]
    """(line number, or row number for Parquet; the row) for every record kept."""
    account: Account


@dataclasses.dataclass(frozen=True)
class _Bad:
    """A record that is dropped: `reason`, and `message` when it is a bad record (an error without skip_bad_rows)."""

    line: int
    reason: str
    message: str | None = None


class _Format:
    name: ClassVar[str]
    """Its row in schemas/formats.FORMATS (which says the suffixes)."""
    text: ClassVar[bool] = True

    def records(self, url: str, data: Any, reading: TableReading, account: Account) -> Iterator[tuple[int, dict] | _Bad]:
        """(line, row) per record, or _Bad; `data` is the decoded text (bytes for a binary format). Counts lines."""
        raise NotImplementedError


def _lines(text: str) -> list[str]:
    """The physical lines: a newline ends one (a final one ends the last line, it does not start another)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


class _Txt(_Format):
    name = "txt"

    def records(self, url, data, reading, account):
        lines = _lines(data)
        account.lines = len(lines)
        for number, line in enumerate(lines, 1):
            yield _Bad(number, "blank_line") if not line.strip() else (number, {"text": line})


class _JsonLines(_Format):
    name = "jsonl"

    def records(self, url, data, reading, account):
        lines = _lines(data)
        account.lines = len(lines)
        for number, line in enumerate(lines, 1):
            if not line.strip():
                yield _Bad(number, "blank_line")
                continue
            try:
                yield number, json_object(line, url, number)
            except JsonLineError as e:
                yield _Bad(number, e.reason, str(e))


class _Delimited(_Format):
    delimiter: ClassVar[str]
    default_quoting: ClassVar[str]

    def records(self, url, data, reading, account):
        account.quoting = self.default_quoting if reading.quoting == "auto" else reading.quoting
        numbered = self._unquoted(data) if account.quoting == "none" else self._quoted(data, account)
        header: list[str] | None = None
        for first, last, fields in numbered:
            account.lines = last
            if isinstance(fields, csv.Error):  # a quote where RFC 4180 allows none, or one never closed
                where = f"{url}:{first}" if first == last else f"{url}:{first}-{last}"
                message = f"{where}: {fields} (--quoting none reads quotes as characters)"
                if header is None:  # no later line can stand in for the header
                    raise TableError(f"{message}; this is the header")
                yield _Bad(first, "bad_quoting", message)
                continue
            blank = not any(f.strip() for f in fields)
            if header is None:
                if not blank:  # blank lines before the header are not records
                    header = self._header(url, first, fields)
                continue
            if fields in ([], [""]) or (blank and len(fields) != len(header)):
                yield _Bad(first, "blank_line")
            elif len(fields) != len(header):
                where = f"{url}:{first}" if first == last else f"{url}:{first}-{last}"
                yield _Bad(first, "field_count", f"{where}: {len(fields)} fields, the header has {len(header)}"
                           + (" (a quote opened at this line runs on: --quoting none?)" if last > first else ""))
            else:
                yield first, dict(zip(header, fields))

    def _unquoted(self, text: str) -> Iterator[tuple[int, int, list[str]]]:
        for number, line in enumerate(_lines(text), 1):
            yield number, number, line.split(self.delimiter)

    def _quoted(self, text: str, account: Account) -> Iterator[tuple[int, int, list[str] | csv.Error]]:
        # NOTE: the csv module refuses a field over 131,072 characters by default (a process-wide limit): a long
        # context is a user's data, not a bad quote
        csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=self.delimiter, strict=True)
        while True:
            first = reader.line_num + 1
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as e:  # the reader goes on at the next line
                fields = e  # type: ignore[assignment]
            if reader.line_num > first:
                account.multiline_records += 1
            yield first, reader.line_num, fields

    @staticmethod
    def _header(url: str, line: int, fields: list[str]) -> list[str]:
        twice = sorted({f for f in fields if fields.count(f) > 1})
        if twice:
            raise TableError(f"{url}:{line}: the header names column {twice[0]!r} twice")
        return fields


class _Tsv(_Delimited):
    name, delimiter, default_quoting = "tsv", "\t", "none"


class _Csv(_Delimited):
    name, delimiter, default_quoting = "csv", ",", "csv"


class _Parquet(_Format):
    name, text = "parquet", False

    def records(self, url, data, reading, account):
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(io.BytesIO(data)).to_pylist()
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a file that is not Parquet
            raise TableError(f"{url}: not a Parquet file ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        account.lines = len(rows)
        yield from enumerate(rows, 1)


class _Arrow(_Format):
    name, text = "arrow", False

    def records(self, url, data, reading, account):
        import pyarrow as pa

        try:
            rows = pa.ipc.open_stream(io.BytesIO(data)).read_all().to_pylist()
        except (pa.ArrowInvalid, OSError):
            try:
                rows = pa.ipc.open_file(io.BytesIO(data)).read_all().to_pylist()
            except (pa.ArrowInvalid, OSError) as e:
                raise TableError(f"{url}: not an Arrow IPC file ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        account.lines = len(rows)
        yield from enumerate(rows, 1)


TABLE_FORMATS: dict[str, _Format] = {f.name: f for f in (_Tsv(), _Csv(), _JsonLines(), _Parquet(), _Arrow(), _Txt())}
"""The readers of schemas/formats.FORMATS' `table` rows, by the row's name."""


def format_of(url: str, default: str = "jsonl") -> _Format:
    """The table reader of `url`'s format (schemas/formats.py, by suffix); `default`'s for a name that says none."""
    found = formats.by_suffix(url)
    return TABLE_FORMATS[found.name] if found is not None and found.table else TABLE_FORMATS[default]


def _decode(url: str, raw: bytes, encoding: str) -> str:
    if b"\0" in raw[:_BINARY_PROBE] and not encoding.lower().replace("-", "").startswith("utf16"):
        raise TableError(f"{url}: a binary file (NUL bytes), not text")
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        label = "UTF-8" if codec_name(encoding) == "utf-8" else encoding
        raise Undecodable(f"{url}:{line}: invalid {label} at byte column {column}") from None
    return text.removeprefix("\ufeff")


def codec_name(encoding: str) -> str:
    import codecs

    return codecs.lookup(encoding).name


def read_bytes(url: str) -> bytes:
    """The file's bytes, decompressed by its suffix (schemas/formats.COMPRESSIONS); TableError when it cannot be read."""
    import fsspec

    compression = formats.compression_of(url)
    try:
        with fsspec.open(url, "rb", compression=compression.fsspec if compression else None) as f:
            return f.read()
    except FileNotFoundError:
        raise TableError(f"{url}: no such file") from None
    except IsADirectoryError:
        raise TableError(f"{url}: a directory, not a file") from None
    except (OSError, EOFError) as e:  # no permission, a truncated .gz
        raise TableError(f"{url}: cannot read ({type(e).__name__}: {e})") from None


def read_table(url: str, reading: TableReading = TableReading(), *, encoding: str = "utf-8",  # noqa: B008 - frozen
               default_format: str = "jsonl") -> Table:
    """Every record of `url` kept or dropped (see the module docstring)."""
    raw = read_bytes(url)
    fmt = format_of(url, default_format)
    account = Account(format=fmt.name)
    data = _decode(url, raw, encoding) if fmt.text else raw
    rows = []
    for record in fmt.records(url, data, reading, account):
        account.read += 1
        if isinstance(record, _Bad):
            if record.message is not None and not reading.skip_bad_rows:
                raise TableError(f"{record.message} (--skip-bad-rows counts such rows as drops instead)")
            account.drop(record.reason, record.line)
        else:
            rows.append(record)
    account.check(len(rows), url)
    return Table(url=url, sha256=hashlib.sha256(raw).hexdigest(), rows=rows, account=account)


def read_texts(path: str, encoding: str, column: str = "text",
               reading: TableReading = TableReading()) -> tuple[list[str], list[int], Account]:  # noqa: B008 - frozen
    """The texts of `path` (a text file's lines, or a table's `column`), their line numbers, and the account of
    every record (blank and empty ones are counted drops). Decoded strictly with `encoding`: a byte that does
    not decode is a TableError naming the line, never a silently changed text."""
    table = read_table(path, reading, encoding=encoding, default_format="txt")
    texts, lines = [], []
    for line, row in table.rows:
        if column not in row:
            raise TableError(f"{path}:{line}: no column {column!r} (columns: {', '.join(map(str, row))}; name yours with --text-column)")
        text = row[column]
        if text is None or (isinstance(text, str) and not text.strip()):
            table.account.drop("empty_text", line)
        elif not isinstance(text, str):
            if not reading.skip_bad_rows:
                raise TableError(f"{path}:{line}: column {column!r} holds {type(text).__name__}, not text "
                                 "(--skip-bad-rows counts such rows as drops instead)")
            table.account.drop("not_text", line)
        else:
            texts.append(text)
            lines.append(line)
    table.account.check(len(texts), path)
    return texts, lines, table.account
