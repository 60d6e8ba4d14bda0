"""Benchmark: prep's MediaWiki dump reader against WikiExtractor on the same dump; resiliparse against trafilatura.

In:  `corpus`, a pages-articles dump (.xml or .xml.bz2), or None for gensim's shortened enwiki dump (206 pages).
Out: one dict of figures:
  - text: per article both keep, the share of WikiExtractor's words (as multisets, edge punctuation aside) that prep's text holds
    (`we_words_kept`) and the share of prep's words WikiExtractor's lacks (`ours_not_in_we`), over all words, with
    the 5 worst pages; `markup_left`: `{{`, `[[`, `<ref`, `|-` in prep's text per word (and in WikiExtractor's).
  - speed: MB of uncompressed XML per CPU second, prep's reader (bz2 decoding, parsing, wikitext to text) and
    WikiExtractor (`--processes 1`, its child processes' CPU time), `ratio` = ours / WikiExtractor.
  - memory: tracemalloc's peak while prep's reader streams the dump's XML written 1x and 4x over (page ids
    renumbered): flat means the reader holds a page, not the dump.
  - parsers: CPU seconds of wikitext to text by wikitextparser (ours) and mwparserfromhell's strip_code on the same
    articles, and markup left, when mwparserfromhell is installed (the measured choice).
  - html: resiliparse's extract_plain_text against trafilatura.extract on the HTML pages of pywb's sample WARCs
    (`--corpus` can't name them: set PYWB_WARCS to the folder of `pip download pywb --no-binary :all:`'s
    sample_archive/warcs) and pydoc's pages of 10 standard modules; MB of HTML per CPU second.
Time is this process's CPU time (process_time; WikiExtractor's: its children's), which the load of other processes
inflates less than wall time. Needs the `wiki` and `web` extras, gensim (the sample), wikiextractor; trafilatura
and mwparserfromhell for their rows.
"""

from __future__ import annotations

import bz2
import collections
import glob
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc

from pipelines.documents.readers import ReadConfig, read_file
from pipelines.documents.records import RawDoc

MARKUP = re.compile(r"\{\{|\[\[|<ref|\|-")
_EDGES = "\"'.,;:!?()[]"


def _default_dump() -> str:
    import importlib.resources

    return str(importlib.resources.files("gensim") / "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")


def _xml(dump: str) -> bytes:
    data = open(dump, "rb").read()
    return bz2.decompress(data) if dump.endswith(".bz2") else data


def _ours(dump: str) -> tuple[dict[str, tuple[str, str]], float]:
    """{page id: (title, text)} of prep's reader, and its CPU seconds."""
    ids = {}
    xml = _xml(dump)
    for match in re.finditer(rb"<title>([^<]*)</title>\s*(?:<ns>\d+</ns>\s*)?<id>(\d+)</id>", xml):
        ids[match.group(1).decode()] = match.group(2).decode()
    started = time.process_time()
    docs = [d for d in read_file("wiki", dump, ReadConfig()) if isinstance(d, RawDoc)]
    seconds = time.process_time() - started
    out = {}
    for d in docs:
        title, _, text = d.text.partition("\n\n")
        out[ids.get(title, title)] = (title, text)
    return out, seconds


def _wikiextractor(dump: str) -> tuple[dict[str, tuple[str, str]], float]:
    with tempfile.TemporaryDirectory() as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "wikiextractor.WikiExtractor", dump, "-o", out, "--json", "-q",
                        "--processes", "1"], check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        records = [json.loads(line) for f in sorted(glob.glob(f"{out}/*/*")) for line in open(f, encoding="utf-8")]
    seconds = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {r["id"]: (r["title"], r["text"]) for r in records}, seconds


def _words(text: str) -> list[str]:
    """Words less the punctuation at their edges: WikiExtractor writes italics as quotes and ends titles with '.'."""
    return [w for w in (w.strip(_EDGES) for w in text.split()) if w]


def _compare(ours: dict, theirs: dict) -> dict:
    common = sorted(set(ours) & set(theirs))
    kept = lacking = their_total = our_total = 0
    pages = []
    for page in common:
        a, b = collections.Counter(_words(ours[page][1])), collections.Counter(_words(theirs[page][1]))
        both = sum((a & b).values())
        kept, their_total = kept + both, their_total + sum(b.values())
        lacking, our_total = lacking + sum((a - b).values()), our_total + sum(a.values())
        if sum(b.values()):
            pages.append((both / sum(b.values()), sum((a - b).values()) / max(1, sum(a.values())), ours[page][0]))
    ours_words = sum(len(t.split()) for _, t in ours.values())
    theirs_words = sum(len(t.split()) for _, t in theirs.values())
    return {
        "pages_ours": len(ours), "pages_we": len(theirs), "pages_compared": len(common),
        "we_words_kept": round(kept / their_total, 4), "ours_not_in_we": round(lacking / our_total, 4),
        "worst_pages": [{"title": t, "we_words_kept": round(k, 3), "ours_not_in_we": round(n, 3)} for k, n, t in sorted(pages)[:5]],
        "markup_left_ours": round(sum(len(MARKUP.findall(t)) for _, t in ours.values()) / ours_words, 6),
        "markup_left_we": round(sum(len(MARKUP.findall(t)) for _, t in theirs.values()) / theirs_words, 6),
    }


def _peak_mb(xml: bytes, times: int) -> float:
    head, _, rest = xml.partition(b"<page>")
    body, _, tail = ("<page>".encode() + rest).rpartition(b"</page>")
    body += b"</page>"
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "dump.xml")
        with open(path, "wb") as f:
            f.write(head)
            for k in range(times):  # page ids made distinct per copy
                f.write(re.sub(rb"(<page>\s*<title>[^<]*</title>\s*<ns>\d+</ns>\s*<id>)(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + k * 10**7).encode(), body))
            f.write(tail)
        tracemalloc.start()
        for _ in read_file("wiki", path, ReadConfig()):
            pass
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return round(peak / 1e6, 1)


def _parsers(ours: dict, dump: str) -> dict:
    try:
        import mwparserfromhell
    except ImportError:
        return {}
    import wikitextparser

    from pipelines.documents.formats.mediawiki import plain_text

    texts = [t.decode() for t in re.findall(rb"<text[^>]*>(.*?)</text>", _xml(dump), re.S)]
    import html

    texts = [html.unescape(t) for t in texts if not t.lstrip().lower().startswith("#redirect")]
    out = {}
    for name, convert in (("wikitextparser", lambda t: plain_text(t, wikitextparser)),
                          ("mwparserfromhell", lambda t: mwparserfromhell.parse(t).strip_code(normalize=True, collapse=True))):
        started = time.process_time()
        done = [convert(t) for t in texts]
        words = sum(len(d.split()) for d in done)
        out[name] = {"cpu_s": round(time.process_time() - started, 2), "words": words,
                     "markup_left": round(sum(len(MARKUP.findall(d)) for d in done) / words, 6)}
    return out


def _html(quick: bool) -> dict:
    import pydoc

    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import detect_encoding
    from resiliparse.parse.html import HTMLTree

    pages = []
    for path in sorted(glob.glob(os.path.join(os.environ.get("PYWB_WARCS", "/nonexistent"), "*.warc*"))):
        import fastwarc.warc as warc

        try:
            for r in warc.ArchiveIterator(open(path, "rb"), parse_http=True):
                if r.record_type == warc.WarcRecordType.response and r.http_headers and r.http_headers.status_code == 200 \
                        and (r.http_content_type or "").startswith("text/html"):
                    pages.append(r.reader.read())
        except OSError:  # pywb's example.warc holds a record with a wrong length (on purpose)
            pass
    for name in ("json", "textwrap", "argparse", "csv", "gettext", "email", "os", "re", "typing", "collections")[: 3 if quick else 10]:
        module = __import__(name)
        pages.append(pydoc.html.page(pydoc.describe(module), pydoc.html.document(module, name)).encode())
    mb = sum(map(len, pages)) / 1e6
    started = time.process_time()
    ours = [extract_plain_text(HTMLTree.parse_from_bytes(p, detect_encoding(p)), main_content=True) for p in pages]
    out = {"pages": len(pages), "mb": round(mb, 2), "resiliparse_mb_s": round(mb / (time.process_time() - started), 2),
           "resiliparse_words": sum(len(t.split()) for t in ours)}
    try:
        import trafilatura
    except ImportError:
        return out
    started = time.process_time()
    theirs = [trafilatura.extract(p.decode("utf-8", "replace")) or "" for p in pages]
    out.update(trafilatura_mb_s=round(mb / (time.process_time() - started), 2), trafilatura_words=sum(len(t.split()) for t in theirs))
    out["ratio"] = round(out["resiliparse_mb_s"] / out["trafilatura_mb_s"], 1)
    return out


def main(corpus: str | None, quick: bool) -> dict:
    dump = corpus or _default_dump()
    xml_mb = len(_xml(dump)) / 1e6
    ours, our_s = _ours(dump)
    theirs, their_s = _wikiextractor(dump)
    figures = {"dump": os.path.basename(dump), "xml_mb": round(xml_mb, 2), "text": _compare(ours, theirs),
               "speed": {"ours_mb_s": round(xml_mb / our_s, 2), "wikiextractor_mb_s": round(xml_mb / their_s, 2),
                         "ratio": round(their_s / our_s, 2)}}
    xml = _xml(dump)
    figures["memory_peak_mb"] = {"1x": _peak_mb(xml, 1), "4x": _peak_mb(xml, 1 if quick else 4)}
    if not quick:
        figures["parsers"] = _parsers(ours, dump)
    figures["html"] = _html(quick)
    return figures
