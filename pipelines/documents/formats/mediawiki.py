"""MediaWiki XML exports (Wikipedia's `pages-articles*.xml[.bz2]` dumps) read as documents, one a page, streaming.

In:  an XML export of any schema version (0.3 to 0.11: the namespace of the tags is ignored; a page's namespace is
     its <ns>, or for exports older than <ns>, its title's prefix among <siteinfo>'s namespaces), in the encoding its
     XML declaration names; plain, or compressed as any of schemas/formats.COMPRESSIONS (a multistream .bz2 is a run
     of bz2 streams and reads the same).
Out: a RawDoc per kept page: its title, a blank line, then its wikitext as plain text (`plain_text`); its id made
     from the page id, its `line` the page's number in the file. Dropped with their own reasons: `redirect`,
     `disambiguation` (an English disambiguation template), `namespace` (a namespace not in --wiki-namespaces),
     `empty_text`, `record_too_long`, a page cut by the end of a cut stream (`truncated_stream`, also an event) and
     XML that does not parse (`bad_xml`, the rest of the file with it).

Wikitext to text (as WikiExtractor does, and as BERT's authors describe their Wikipedia text: "we extract only the text
passages and ignore lists, tables, and headers"): templates, <ref>, <math>, <gallery> and their kin, tables, list
items (`*`, `#`), file and image links, category links and magic words go; a link keeps its label; a section title becomes a
paragraph of its own when text follows it before the next title.
The parser is wikitextparser (the `wiki` extra): on the 106 articles of gensim's enwiki sample it took 5.7 s of CPU
and left 8 pieces of markup in 474,778 words, mwparserfromhell 27 s and 50 (bench/README.md, "wiki").

Memory: each page's element is cleared once read (XMLPullParser fed block by block), so a reader holds one page.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from pipelines.documents.formats.extras import require
from pipelines.documents.line_stream import LineStream, open_input
from pipelines.documents.records import Drop, Event, RawDoc, make_doc_id

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


def read(source: str, path: str, ids: str, config):
    wtp = require("wikitextparser", "wiki", path)
    keep = config.namespaces()
    prefixes: dict[str, int] = {}  # <siteinfo>'s namespace names, for exports without <ns>
    with open_input(path) as f:
        stream = LineStream(f, path, config.max_record_bytes)
        parser = ET.XMLPullParser(events=("start", "end"))
        root, number, started = None, 0, 0
        try:
            for block in stream.blocks():
                parser.feed(block)
                for event, element in parser.read_events():
                    if root is None:
                        root = element
                    if event != "end":
                        started += _local(element.tag) == "page"
                        continue
                    tag = _local(element.tag)
                    if tag == "namespace" and element.get("key") and element.text:
                        prefixes[element.text.strip().lower()] = int(element.get("key"))
                    elif tag == "page":
                        number += 1
                        yield _page(source, path, ids, config, element, number, keep, prefixes, wtp)
                        root.clear()  # the page and everything before it: memory stays one page
            if not stream.truncated:
                parser.close()
        except ET.ParseError as e:
            yield Drop(path, "bad_xml", number + 1, str(e)[:80])
        if stream.truncated:  # the page being read when the stream stopped, if one had started
            if started > number:
                yield Drop(path, "truncated_stream", number + 1, "a page cut by the end of the stream")
            yield Event(path, "truncated_stream", number + 1)


def _page(source, path, ids, config, page, number, keep, prefixes, wtp) -> RawDoc | Drop:
    title = (_child(page, "title").text or "") if _child(page, "title") is not None else ""
    page_id = _child(page, "id")
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
    key = f"page:{page_id.text.strip()}" if page_id is not None and page_id.text else number
    return RawDoc(source=source, path=path, line=number, doc_id=make_doc_id(ids, key), text=f"{title}\n\n{text}")
