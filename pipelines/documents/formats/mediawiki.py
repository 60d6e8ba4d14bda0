"""MediaWiki XML exports (Wikipedia's `pages-articles*.xml[.bz2]` dumps) read as documents, one a page, streaming.

In:  an XML export of any schema version (0.3 to 0.11: the namespace of the tags is ignored; a page's namespace is
     its <ns>, or for exports older than <ns>, its title's prefix among <siteinfo>'s namespaces), in the encoding its
     XML declaration names; plain, or compressed as any of schemas/formats.COMPRESSIONS (a multistream .bz2 is a run
     of bz2 streams and reads the same).
Out: a RawDoc per kept page: its title, a blank line, then its wikitext as plain text (`plain_text`); its id made
     from the page id, its `line` the page id (its number in the file where it has none). Dropped with their own reasons: `redirect`,
     `disambiguation` (an English disambiguation template), `namespace` (a namespace not in --wiki-namespaces),
     `empty_text`, `record_too_long`, a page cut by the end of a cut stream (`truncated_stream`, also an event) and
     XML that does not parse (`bad_xml`, the rest of the file with it).

Wikitext to text (as WikiExtractor does, and as BERT's authors describe their Wikipedia text: "we extract only the text
passages and ignore lists, tables, and headers"): templates, <ref>, <math>, <gallery> and their kin, tables, list
items (`*`, `#`), file and image links, category links and magic words go; a link keeps its label; a section title becomes a
paragraph of its own when text follows it before the next title.
The parser is wikitextparser (the `wiki` extra): on the articles of gensim's enwiki sample (5.7 MB of wikitext) it took
6.0 s of CPU with these removals and left no markup; mwparserfromhell took 27 s with the same removals (its bare
strip_code 8.0 s, leaving 1.5 pieces of markup in 10,000 words) (bench/README.md, "wiki").

Memory: each page's element is cleared once read (XMLPullParser fed block by block), so a reader holds one page.
Splitting: a multistream dump (`...-multistream.xml.bz2` with its `-index.txt.bz2` beside it) is read by several
workers, each a run of whole bz2 streams (splits.py): the streams after the first hold pages only, and are read inside
a document element given here.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from pipelines.documents.formats.extras import require
from pipelines.documents.line_stream import LineStream, open_input
from pipelines.documents.records import Drop, Event, RawDoc, make_doc_id
from pipelines.documents.splits import ByteRange

DROPPED_TAGS = frozenset({"ref", "references", "math", "chem", "ce", "gallery", "timeline", "imagemap", "score", "graph",
                          "mapframe", "maplink", "templatedata", "templatestyles", "syntaxhighlight", "source", "nowiki"})
"""Tags whose content is not running text (WikiExtractor drops these too, or turns math into placeholders)."""
_DROPPED_LINKS = re.compile(r"^\s*:?\s*(file|image|category|media)\s*:", re.I)
_DISAMBIGUATION = re.compile(r"\{\{\s*(disambig(uation)?|dab|disamb|hndis|geodis|numberdis|[\w -]*disambiguation)\s*(\||\}\})", re.I)
_HEADING = re.compile(r"^(={1,6})\s*(.+?)\s*\1\s*$", re.M)
_LIST_ITEM = re.compile(r"^[*#].*$", re.M)
_INDENT = re.compile(r"^[:;]+\s*", re.M)  # indented and definition lines are prose (quotes, terms): kept
_TITLE = "\x00"  # marks a section title until the titles with no text under them are left out
_MAGIC = re.compile(r"__[A-Z]+__")
_BLANK_LINES = re.compile(r"\n\s*\n\s*")


def plain_text(wikitext: str, wtp) -> str:
    """`wikitext` as running text: paragraphs separated by a blank line (see the module docstring)."""
    parsed = wtp.parse(wikitext)
    for tag in reversed(parsed.get_tags()):  # innermost last: deleting an outer one kills the inner objects
        try:
            if tag.name.lower() in DROPPED_TAGS:
                del tag.string
        except Exception:  # noqa: BLE001 - wikitextparser's DeadIndexError: inside a tag deleted already
            continue
    for link in reversed(parsed.wikilinks):
        try:
            if _DROPPED_LINKS.match(link.title):
                del link.string
        except Exception:  # noqa: BLE001 - wikitextparser's DeadIndexError: inside a link deleted already
            continue
    text = _INDENT.sub("", _LIST_ITEM.sub("", _MAGIC.sub("", parsed.plain_text(replace_tables=lambda table: ""))))
    blocks = _BLANK_LINES.split(_HEADING.sub(lambda m: f"\n\n{_TITLE}{m.group(2)}\n\n", text))
    paragraphs = ["\n".join(" ".join(line.split()) for line in block.splitlines() if line.strip()) for block in blocks]
    paragraphs = [p for p in paragraphs if p]
    kept = [p for p, after in zip(paragraphs, paragraphs[1:] + [_TITLE]) if not (p.startswith(_TITLE) and after.startswith(_TITLE))]
    return "\n\n".join(p.removeprefix(_TITLE) for p in kept)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(element: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in element if _local(c.tag) == name), None)


def read(source: str, path: str, ids: str, config, split=None):
    """The pages of `path`, or of `split`'s bz2 streams (pipelines/documents/splits.py: a multistream dump's)."""
    wtp = require("wikitextparser", "wiki", path)
    keep = config.namespaces()
    prefixes: dict[str, int] = {}  # <siteinfo>'s namespace names, for exports without <ns>
    with open_input(path) as f:
        parser = ET.XMLPullParser(events=("start", "end"))
        if split is not None:
            f.seek(split.start)
            f = ByteRange(f, split.end - split.start)
            if split.start:  # a stream after the first holds pages only: they get their document element here
                parser.feed(b"<mediawiki>")
        stream = LineStream(f, path, config.max_record_bytes)
        root, pages, started, closed, last = None, 0, 0, False, 0
        try:
            for block in stream.blocks():
                parser.feed(block)
                for event, element in parser.read_events():
                    root = element if root is None else root
                    tag = _local(element.tag)
                    if event == "start":
                        started += tag == "page"
                    elif element is root:
                        closed = True
                    elif tag == "namespace" and element.get("key") and element.text:
                        prefixes[element.text.strip().lower()] = int(element.get("key"))
                    elif tag == "page":
                        pages += 1
                        record = _page(source, path, ids, config, element, pages, keep, prefixes, wtp)
                        last = record.line
                        yield record
                        root.clear()  # the page and everything before it: memory stays one page
            if not stream.truncated:
                if split is not None and not closed:  # a run of streams before the last: no </mediawiki>
                    parser.feed(b"</mediawiki>")
                parser.close()
        except ET.ParseError as e:
            yield Drop(path, "bad_xml", last, f"after page {last}: {e}"[:80])
        if stream.truncated:  # the page being read when the stream stopped, if one had started
            if started > pages:
                yield Drop(path, "truncated_stream", last, f"the page after page {last}, cut by the end of the stream")
            yield Event(path, "truncated_stream", last)


def _page(source, path, ids, config, page, ordinal, keep, prefixes, wtp) -> RawDoc | Drop:
    title = (_child(page, "title").text or "") if _child(page, "title") is not None else ""
    page_id = (_child(page, "id").text or "").strip() if _child(page, "id") is not None else ""
    number = int(page_id) if page_id.isdigit() else ordinal  # the page's own id, the same however the dump is split
    revisions = [c for c in page if _local(c.tag) == "revision"]
    text_element = _child(revisions[-1], "text") if revisions else None
    wikitext = (text_element.text or "") if text_element is not None else ""
    ns = _child(page, "ns")
    if ns is not None and (ns.text or "").strip().lstrip("-").isdigit():
        namespace = int(ns.text)
    else:
        namespace = prefixes.get(title.split(":", 1)[0].strip().lower(), 0) if ":" in title else 0
    if namespace not in keep:
        return Drop(path, "namespace", number, f"{namespace}: {title}"[:80])
    if _child(page, "redirect") is not None or wikitext.lstrip()[:9].lower() == "#redirect":
        return Drop(path, "redirect", number, title[:80])
    if _DISAMBIGUATION.search(wikitext):
        return Drop(path, "disambiguation", number, title[:80])
    if len(wikitext.encode("utf-8", "surrogatepass")) > config.max_record_bytes:
        return Drop(path, "record_too_long", number, f"{title[:40]}: over --max-record-bytes {config.max_record_bytes}")
    text = plain_text(wikitext, wtp)
    if not text:
        return Drop(path, "empty_text", number, title[:80])
    key = f"page:{page_id}" if page_id.isdigit() else ordinal
    return RawDoc(source=source, path=path, line=number, doc_id=make_doc_id(ids, key), text=f"{title}\n\n{text}",
                  meta=(("title", title), ("page_id", page_id)))
