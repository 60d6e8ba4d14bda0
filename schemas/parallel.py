"""Arrow schema of the translation pairs under DIR/parallel/ (prep --parallel writes them).

A row is one pair that survived reading, cleaning and deduplication (pipelines/documents/parallel.py): the source
text, its translation, both languages, and where it was read. What XLM's translation language modelling trains on:
both sentences concatenated, language ids per token, positions restarting at the second (not yet made by prep).
"""

from __future__ import annotations

import pyarrow as pa

PARALLEL_FORMAT_VERSION = 1
"""1: source_language, target_language, source, target, path, line."""


def parallel_pair_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("source_language", pa.string(), nullable=False),  # `en` for a gettext catalog's msgid
            pa.field("target_language", pa.string(), nullable=False),  # as the catalog or --parallel SRC-TGT= names it
            pa.field("source", pa.string(), nullable=False),  # normalised as documents are, one line
            pa.field("target", pa.string(), nullable=False),
            pa.field("path", pa.string(), nullable=False),  # the file it was read from (the first, for aligned files)
            pa.field("line", pa.int64(), nullable=False),  # its line, or a .mo file's entry number
        ],
        metadata={
            b"clozeforge.schema": b"parallel_pairs",
            b"clozeforge.format_version": str(PARALLEL_FORMAT_VERSION).encode(),
        },
    )
