"""Arrow schema of the cleaned documents under DIR/clean/ (prep's first half writes them).

A row is one document that survived reading, cleaning and deduplication, already split into sentences,
so the vocabulary and pair stages (or a user's own tooling) can start from it without re-cleaning.
"""

from __future__ import annotations

import pyarrow as pa

CLEAN_FORMAT_VERSION = 3
"""1: doc_id, source, path, sentences. 2: language (prep --identify-languages; "" when languages are not identified).
3: meta, only in a run with an input whose format keeps per-document metadata (schemas/formats.py's `meta`: a web
page's URL, a wiki page's title); a run without one writes version 2's schema, byte for byte as before."""


def clean_doc_schema(meta: bool = False) -> pa.Schema:
    """The clean/ shards' schema; `meta`: with the meta column (what the record said of itself: {key: value},
    empty for a document whose format says nothing), version 3; without, version 2."""
    fields = [
            pa.field("doc_id", pa.string(), nullable=False),  # stable id: sha1 of (input name/path under its folder, record)
            pa.field("source", pa.string(), nullable=False),  # name of the --input it came from
            pa.field("path", pa.string(), nullable=False),  # the file it was read from
            pa.field("sentences", pa.list_(pa.string()), nullable=False),
            pa.field("language", pa.string(), nullable=False),  # its language code (--identify-languages), else ""
    ]
    if meta:
        fields.append(pa.field("meta", pa.map_(pa.string(), pa.string()), nullable=False))
    return pa.schema(
        fields,
        metadata={
            b"clozeforge.schema": b"clean_docs",
            b"clozeforge.format_version": str(CLEAN_FORMAT_VERSION if meta else 2).encode(),
        },
    )


CLEAN_DOC_SCHEMA = clean_doc_schema()
