"""Arrow schema of the cleaned documents under DIR/clean/ (prep's first half writes them).

A row is one document that survived reading, cleaning and deduplication, already split into sentences,
so the vocabulary and pair stages (or a user's own tooling) can start from it without re-cleaning.
"""

from __future__ import annotations

import pyarrow as pa

CLEAN_FORMAT_VERSION = 2
"""1: doc_id, source, path, sentences. 2: language (prep --identify-languages; "" when languages are not identified)."""


def clean_doc_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("doc_id", pa.string(), nullable=False),  # stable id: sha1 of (input name/path under its folder, record)
            pa.field("source", pa.string(), nullable=False),  # name of the --input it came from
            pa.field("path", pa.string(), nullable=False),  # the file it was read from
            pa.field("sentences", pa.list_(pa.string()), nullable=False),
            pa.field("language", pa.string(), nullable=False),  # its language code (--identify-languages), else ""
        ],
        metadata={
            b"clozeforge.schema": b"clean_docs",
            b"clozeforge.format_version": str(CLEAN_FORMAT_VERSION).encode(),
        },
    )


CLEAN_DOC_SCHEMA = clean_doc_schema()
