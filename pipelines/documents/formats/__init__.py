"""Prep's readers of the formats beyond lines and Parquet, one module a row of schemas/formats.FORMATS.

In:  (source, path, ids, ReadConfig) as pipelines/documents/readers.read_file passes them.
Out: RawDoc, Drop (each with its reason; read_file applies --strict) and Event records, streaming.

A reader whose package is an extra (wikitextparser for `wiki`, fastwarc and resiliparse for `web`) imports it when
a file of its format is read, so a Dataflow worker built with `prep` alone still imports prep; a missing one stops the
run with one line naming the extra (extras.require).
"""

from __future__ import annotations

from pipelines.documents.formats import arrow_ipc, delimited, mediawiki, warc, wikiextractor

LEFT_OUT = frozenset({"redirect", "disambiguation", "namespace", "not_content", "http_status", "not_html"})
"""Drop reasons that are a format's records prep does not want (a redirect page, a crawl's request record), not bad
input: --strict does not stop at them."""

READERS = {
    "csv": delimited.read,
    "tsv": delimited.read,
    "arrow": arrow_ipc.read,
    "mediawiki": mediawiki.read,
    "wikiextractor": wikiextractor.read,
    "warc": warc.read,
}
"""{format name: its reader}: txt, jsonl and parquet are read by pipelines/documents/readers.py itself."""
