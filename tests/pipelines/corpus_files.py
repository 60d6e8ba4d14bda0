"""The real files the format readers are tested on: gensim's shortened enwiki dump, WikiExtractor's two output forms
made from it (WikiExtractor run as a command), and WARC/WET files of real HTML pages (pydoc's pages of standard-library
modules, and Debian's Japanese and French man pages as pages in Shift_JIS and windows-1252) written by warcio's
WARCWriter, the reference writer. No third-party file is copied into the repository."""

from __future__ import annotations

import importlib.resources
import io
import os
import pydoc
import subprocess
import sys

import pytest

ENWIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
"""206 pages of English Wikipedia (April 2016): 106 articles (8 of them disambiguation pages, one a list alone, which
becomes no text), 99 redirects and one page of another namespace."""
MODULES = ("json", "textwrap", "argparse", "csv", "gettext")


def gensim_dump(name: str = ENWIKI) -> str:
    """A dump gensim's wheel ships (gensim/test/test_data); the test skips where gensim is not installed."""
    pytest.importorskip("gensim")
    return str(importlib.resources.files("gensim") / "test" / "test_data" / name)


def wikiextractor(dump: str, out: str, *flags: str) -> list[str]:
    """WikiExtractor's output files of `dump` under `out` (its AA/wiki_00 layout), sorted."""
    pytest.importorskip("wikiextractor")
    subprocess.run([sys.executable, "-m", "wikiextractor.WikiExtractor", dump, "-o", out, "-q", "--processes", "1", *flags],
                   check=True, capture_output=True)
    return sorted(os.path.join(folder, n) for folder, _, names in os.walk(out) for n in names)


def pydoc_page(module: str) -> bytes:
    mod = __import__(module)
    return pydoc.html.page(pydoc.describe(mod), pydoc.html.document(mod, module)).encode("utf-8")


def man_page_html(language: str, charset: str) -> bytes:
    """Prose of Debian's man pages in `language` as an HTML page encoded in `charset` (declared in the HTTP header only)."""
    from tests.pipelines.mixed_text import man_text

    lines = man_text(language, pages=4)
    if not lines:
        pytest.skip(f"no {language} man pages on this machine")
    body = "".join(f"<p>{line}</p>\n" for line in lines)
    return f"<html><head><title>man</title></head><body><article>{body}</article></body></html>".encode(charset, "ignore")


def write_warc(path: str, responses: list[tuple[str, int, str, bytes]], conversions: list[tuple[str, str, str]] = (),
               gzip: bool = True) -> None:
    """A WARC of a warcinfo record, a request and a response per (url, status, content type, body), and a WET
    conversion record per (url, language, text)."""
    pytest.importorskip("warcio")
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=gzip)
        writer.write_record(writer.create_warcinfo_record(os.path.basename(path), {"software": "warcio"}))
        for url, status, content_type, body in responses:
            request = StatusAndHeaders("GET / HTTP/1.1", [("Host", url.split("/")[2])], is_http_request=True)
            writer.write_record(writer.create_warc_record(url, "request", payload=io.BytesIO(b""), http_headers=request))
            http = StatusAndHeaders(f"{status} {'OK' if status == 200 else 'Other'}", [("Content-Type", content_type)],
                                    protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http))
        for url, language, text in conversions:
            writer.write_record(writer.create_warc_record(
                url, "conversion", payload=io.BytesIO(text.encode("utf-8")), warc_content_type="text/plain",
                warc_headers_dict={"WARC-Identified-Content-Language": language}))


def sample_warc(path: str, gzip: bool = True) -> dict[str, int]:
    """The test WARC: pydoc pages (200, HTML), a 404, a stylesheet, a Shift_JIS and a windows-1252 page, and WET
    records of two pages; {reason: count} of what prep drops from it."""
    pages = [(f"https://docs.example/{m}.html", 200, "text/html; charset=utf-8", pydoc_page(m)) for m in MODULES]
    pages += [("https://docs.example/missing.html", 404, "text/html", b"<html><body><p>Not Found</p></body></html>"),
              ("https://docs.example/style.css", 200, "text/css", b"body { color: black }"),
              ("https://ja.example/man.html", 200, "text/html; charset=shift_jis", man_page_html("ja", "shift_jis")),
              ("https://fr.example/man.html", 200, "text/html; charset=windows-1252", man_page_html("fr", "cp1252"))]
    wet = [("https://docs.example/json.html", "eng", "JSON (JavaScript Object Notation) is a subset of JavaScript syntax."),
           ("https://docs.example/csv.html", "eng", "CSV parsing and writing.")]
    write_warc(path, pages, wet, gzip=gzip)
    return {"not_content": 1 + len(pages), "http_status": 1, "not_html": 1}


def multistream_dump(folder, pages: int | None = None) -> str:
    """gensim's dump (its first `pages`) rewritten as Wikipedia writes a multistream dump: a bz2 stream of the header,
    one of every 20 pages, one of the footer, and `-index.txt.bz2` beside it (`offset:page id:title` a page)."""
    import bz2
    import re

    xml = bz2.decompress(open(gensim_dump(), "rb").read())
    first, last = xml.index(b"  <page>"), xml.rindex(b"</page>") + len(b"</page>\n")
    pages = re.findall(rb"  <page>.*?</page>\n", xml[first:last], re.S)[:pages]
    streams = [xml[:first]] + [b"".join(pages[i:i + 20]) for i in range(0, len(pages), 20)] + [xml[last:]]
    path = os.path.join(str(folder), "enwiki-20160407-pages-articles-multistream.xml.bz2")
    index, offset = [], 0
    with open(path, "wb") as f:
        for stream in streams:
            for page in re.finditer(rb"<title>([^<]*)</title>\s*<ns>\d+</ns>\s*<id>(\d+)</id>", stream):
                index.append(f"{offset}:{page.group(2).decode()}:{page.group(1).decode()}\n")
            offset += f.write(bz2.compress(stream))
    with open(path[: -len(".xml.bz2")] + "-index.txt.bz2", "wb") as f:
        f.write(bz2.compress("".join(index).encode()))
    return path
