"""CSV and TSV files read as documents: a header line, then one document a record, streaming.

In:  a .csv / .tsv file (any compression of schemas/formats.py), --text-field naming the text's column (--id-field,
     optionally, the user's id column), --encoding.
Out: a RawDoc per record (`line`: the record's first line; its id from that line, and the id column's value when
     there is one). The quoting is fine-tuning's `auto` rule (schemas/tables.py): .tsv unquoted (a line is a record, a
     double quote is a character), .csv RFC 4180 (a quoted field may hold commas, "" and newlines). Dropped with their
     own reasons: `field_count` (other than the header's), `bad_quoting`, `invalid_utf8`, `empty_text`,
     `record_too_long`. Blank lines are not records. A header without the text column is a PrepError naming the
     file, its line and its columns. A cut compressed stream is a `truncated_stream` event.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator

from pipelines.documents.line_stream import LineStream, TooLong, open_input
from pipelines.documents.records import Drop, Event, RawDoc, make_doc_id
from pipelines.errors import PrepError
from schemas.tables import TABLE_FORMATS


def read(source: str, path: str, ids: str, config, split=None):  # whole files: `split` is always None
    fmt = TABLE_FORMATS["tsv" if path.lower().rstrip("/").split("/")[-1].split(".")[-1] == "tsv" else "csv"]
    with open_input(path) as f:
        stream = LineStream(f, path, config.max_record_bytes)
        events: list[Event] = []
        lines = _decoded(stream, path, config, events)
        rows = _quoted(lines, fmt.delimiter) if fmt.default_quoting == "csv" else _unquoted(lines, fmt.delimiter)
        header: list[str] | None = None
        for first, fields in rows:
            yield from events
            events.clear()
            if isinstance(fields, _Unreadable):
                yield Drop(path, str(fields), first)
                continue
            if not any(field.strip() for field in fields):
                continue  # blank lines are not records
            if header is None:
                header = fields
                if config.text_field not in header:
                    raise PrepError(f"{path}:{first}: no column {config.text_field!r} (columns: {', '.join(header)}; "
                                    "name yours with --text-field)")
                text_at = header.index(config.text_field)
                id_at = header.index(config.id_field) if config.id_field in header else None
                continue
            if len(fields) != len(header):
                yield Drop(path, "field_count", first, f"{len(fields)} fields, the header has {len(header)}")
            elif not fields[text_at].strip():
                yield Drop(path, "empty_text", first)
            else:
                key = f"{first}:{fields[id_at]}" if id_at is not None else first
                yield RawDoc(source=source, path=path, line=first, doc_id=make_doc_id(ids, key), text=fields[text_at])
        yield from events
        if stream.truncated:
            yield Event(path, "truncated_stream", stream.lines)


class _Unreadable(str):
    """A line that cannot become a field (over --max-record-bytes, or not in --encoding): its reason."""


def _decoded(stream: LineStream, path: str, config, events: list[Event]) -> Iterator[tuple[int, str]]:
    for number, raw in enumerate(stream, 1):
        if isinstance(raw, TooLong):
            yield number, _Unreadable("record_too_long")
            continue
        try:
            yield number, raw.decode(config.encoding)
        except UnicodeDecodeError:
            if config.invalid_utf8 == "drop" or config.strict:
                yield number, _Unreadable("invalid_utf8")
            else:
                events.append(Event(path, "invalid_utf8_replaced", number))
                yield number, raw.decode(config.encoding, "replace")


def _unquoted(lines, delimiter: str):
    for number, line in lines:
        yield number, line if isinstance(line, _Unreadable) else line.removesuffix("\r").split(delimiter)


def _quoted(lines, delimiter: str):
    """(first line, fields or an _Unreadable reason) per RFC 4180 record; a record never runs past an unreadable
    line (the csv reader starts again after it)."""
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))  # a long text is data, not a bad quote
    state = {"read": 0, "unreadable": None}

    def feed():
        for number, line in lines:
            if isinstance(line, _Unreadable):
                state["unreadable"] = (number, line)
                return
            state["read"] = number
            yield line + "\n"

    while True:
        reader = csv.reader(feed(), delimiter=delimiter, strict=True)
        while True:
            first = state["read"] + 1
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error:
                yield first, _Unreadable("bad_quoting")
                continue
            yield first, fields
        if state["unreadable"] is None:
            return
        yield state["unreadable"]
        state["read"], state["unreadable"] = state["unreadable"][0], None
