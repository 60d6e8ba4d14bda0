"""WARC and WET files (Common Crawl's `.warc.gz` and `.warc.wet.gz`, any WARC/1.x) read as documents, streaming.

In:  a WARC file, plain or compressed as any of schemas/formats.COMPRESSIONS (a .warc.gz is a gzip member a
     record; the members are decoded one after another as for any .gz).
Out: a RawDoc per WET `conversion` record (its text, UTF-8 as Common Crawl writes it) and per WARC `response` whose
     HTTP status is 200 and whose body is HTML, extracted to text by resiliparse (`html_text`); its id made from
     the record's WARC-Record-ID, its `line` the record's number in the file, its `meta` the record's URL (and a
     WET record's WARC-Identified-Content-Language, as `language`). Dropped with their own reasons:
     `not_content` (warcinfo, request, metadata, revisit, resource and other records), `http_status` (a response
     other than 200), `not_html` (another content type), `empty_text`, `record_too_long`, and `bad_warc` (a record
     whose header or length does not parse: the parser cannot find the next record after it, so the rest of the file
     goes with it). A cut compressed stream is a `truncated_stream` event.

Splitting: a `.warc.gz` written a gzip member a record (as Common Crawl writes them) is read by several workers, each
a byte range of whole members (pipelines/documents/splits.py); records are numbered from the records before the
range, so a record's `line`, its id and its drops are those of the whole file's reading.

HTML's encoding: the HTTP header's charset, else the page's own <meta> or byte statistics (resiliparse's
detect_encoding); undecodable bytes become U+FFFD. Why fastwarc and resiliparse (the `web` extra): one maintained
project, compiled parsers; on 35 real pages (pywb's sample WARCs, pydoc's) resiliparse extracted text 12x faster than
trafilatura 2.3 (7.9 against 0.65 MB of HTML a CPU second, about as many words; bench/README.md, "wiki").
"""

from __future__ import annotations

from pipelines.documents.formats.extras import require
from pipelines.documents.line_stream import LineStream, open_input
from pipelines.documents.records import Drop, Event, RawDoc, make_doc_id
from pipelines.documents.splits import ByteRange

_HTML_TYPES = ("text/html", "application/xhtml+xml")


def html_text(body: bytes, charset: str | None) -> str:
    """The main text of an HTML page, as resiliparse's extract_plain_text gives it (main_content=True)."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import detect_encoding
    from resiliparse.parse.html import HTMLTree

    encoding = charset if charset and _known(charset) else detect_encoding(body)
    return extract_plain_text(HTMLTree.parse_from_bytes(body, encoding), main_content=True)


def _known(codec: str) -> bool:
    import codecs

    try:
        codecs.lookup(codec)
        return True
    except LookupError:
        return False


def read(source: str, path: str, ids: str, config, split=None):
    """The records of `path`, or of `split`'s gzip members (splits.py: a .warc.gz's, `before` records ahead)."""
    warc = require("fastwarc.warc", "web", path)
    require("resiliparse.extract.html2text", "web", path)
    kinds = warc.WarcRecordType
    with open_input(path) as f:
        if split is not None:
            f.seek(split.start)
            f = ByteRange(f, split.end - split.start)
        stream = LineStream(f, path, config.max_record_bytes)
        records = warc.ArchiveIterator(stream.as_file(), parse_http=True, stream_detect=False)
        number = 0 if split is None else split.before
        try:
            for record in records:
                number += 1
                yield _record(source, path, ids, config, record, number, kinds)
        except OSError as e:  # fastwarc: a header or a length that does not parse; it cannot resynchronise
            yield Drop(path, "bad_warc", number + 1, str(e)[:80])
        if stream.truncated:
            yield Event(path, "truncated_stream", number + 1)


def _record(source, path, ids, config, record, number, kinds) -> RawDoc | Drop:
    url = record.headers.get("WARC-Target-URI", "") or ""
    if record.record_type not in (kinds.conversion, kinds.response):
        return Drop(path, "not_content", number, f"{str(record.record_type).rsplit('.', 1)[-1]} {url}"[:80])
    if record.content_length > config.max_record_bytes:
        return Drop(path, "record_too_long", number, f"{record.content_length} bytes: {url}"[:80])
    meta = (("url", url),)
    if record.record_type == kinds.conversion:
        text = record.reader.read().decode("utf-8", "replace")
        language = record.headers.get("WARC-Identified-Content-Language", "") or ""
        meta += (("language", language),) if language else ()
    else:
        status = record.http_headers.status_code if record.http_headers is not None else None
        if status != 200:
            return Drop(path, "http_status", number, f"{status} {url}"[:80])
        content_type = (record.http_content_type or "").lower()
        if not content_type.startswith(_HTML_TYPES):
            return Drop(path, "not_html", number, f"{content_type or '?'} {url}"[:80])
        text = html_text(record.reader.read(), record.http_charset)
    if not text.strip():
        return Drop(path, "empty_text", number, url[:80])
    key = record.record_id or number
    return RawDoc(source=source, path=path, line=number, doc_id=make_doc_id(ids, f"warc:{key}"), text=text.strip(),
                  meta=meta)
