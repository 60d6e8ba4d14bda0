"""WikiExtractor's output read as documents: one a `<doc id="..." url="..." title="...">` ... `</doc>` block.

In:  a file WikiExtractor wrote (`AA/wiki_00`, extensionless, or compressed as `wiki_00.bz2`); its `--json` form is
     JSON lines (`{"id", "url", "title", "text"}`), which the jsonl reader reads (schemas/formats.py sniffs it).
Out: a RawDoc per block, its text the lines between the tags (WikiExtractor's first line is the title), its id
     made from WikiExtractor's page id, so it is the same wherever the file is cut or copied; a Drop per block that
     is empty (`empty_text`), over --max-record-bytes (`record_too_long`), cut by the end of the file
     (`truncated_stream` if the compressed stream was cut, `unclosed_doc` otherwise), and one per non-blank line
     outside any block (`outside_doc`). A cut compressed stream is also a `truncated_stream` event.
"""

from __future__ import annotations

import re

from pipelines.documents.line_stream import LineStream, TooLong, open_input
from pipelines.documents.records import Drop, Event, RawDoc, make_doc_id

_OPEN = re.compile(rb'^<doc\s([^>]*)>\s*$')
_ATTRIBUTE = re.compile(rb'(\w+)="([^"]*)"')
_SAMPLE = 80


def read(source: str, path: str, ids: str, config, split=None):  # whole files: `split` is always None
    with open_input(path) as f:
        stream = LineStream(f, path, config.max_record_bytes)
        start, attributes, parts, size = 0, {}, [], 0
        for number, line in enumerate(stream, 1):
            if isinstance(line, bytes) and (opened := _OPEN.match(line)):
                if start:  # a block opened before the last one was closed
                    yield Drop(path, "unclosed_doc", start, attributes.get("title", ""))
                start, parts, size = number, [], 0
                attributes = {k.decode(): v.decode(config.encoding, "replace") for k, v in _ATTRIBUTE.findall(opened.group(1))}
            elif start and line == b"</doc>":
                yield from _doc(source, path, ids, config, start, attributes, parts, size)
                start = 0
            elif start:
                size += 1 + (line.size if isinstance(line, TooLong) else len(line))
                if size <= config.max_record_bytes and isinstance(line, bytes):
                    parts.append(line)
            elif isinstance(line, TooLong) or line.strip():  # not WikiExtractor's: each such line is counted
                yield Drop(path, "outside_doc", number, "" if isinstance(line, TooLong) else line[:_SAMPLE].decode(config.encoding, "replace"))
        if start:
            yield Drop(path, "truncated_stream" if stream.truncated else "unclosed_doc", start, attributes.get("title", ""))
        if stream.truncated:
            yield Event(path, "truncated_stream", stream.lines)


def _doc(source, path, ids, config, start, attributes, parts, size):
    if size > config.max_record_bytes:
        yield Drop(path, "record_too_long", start, f"{size} bytes > --max-record-bytes {config.max_record_bytes}")
        return
    raw = b"\n".join(parts)
    try:
        text = raw.decode(config.encoding)
    except UnicodeDecodeError:
        if config.invalid_utf8 == "drop" or config.strict:
            yield Drop(path, "invalid_utf8", start, attributes.get("title", ""))
            return
        text = raw.decode(config.encoding, "replace")
        yield Event(path, "invalid_utf8_replaced", start)
    if not text.strip():
        yield Drop(path, "empty_text", start, attributes.get("title", ""))
        return
    key = f"doc:{attributes['id']}" if "id" in attributes else start
    yield RawDoc(source=source, path=path, line=start, doc_id=make_doc_id(ids, key), text=text.strip("\n"))
