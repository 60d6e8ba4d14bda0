"""The records that flow between prep stages (plain dataclasses, no Beam import).

ReadCorpus emits RawDoc and Drop; CleanDocuments turns a RawDoc into a Doc (or a Drop); Tokenize turns a
Doc into a TokenizedDoc. Every Drop names its file, line and reason, so the run report can account for
every input record.
"""

from __future__ import annotations

import dataclasses
import hashlib


@dataclasses.dataclass(frozen=True)
class RawDoc:
    source: str
    """Name of the --input this came from (`wiki=gs://...` names it 'wiki')."""
    path: str
    """The file it was read from."""
    line: int
    """1-based line (JSON lines, line mode) or record number (parquet); 0 for a whole file."""
    doc_id: str
    text: str
    language: str = ""
    """Its language code when prep identifies languages (--identify-languages; "und" when undetermined), else ""."""
    meta: tuple[tuple[str, str], ...] = ()
    """What the record says of itself, as (key, value) pairs (a web page's url, a wiki page's title and page_id):
    the keys its format's schemas/formats.py row names in `meta`; () for the formats that say nothing."""


@dataclasses.dataclass(frozen=True)
class Doc:
    source: str
    path: str
    doc_id: str
    sentences: tuple[str, ...]
    language: str = ""
    """RawDoc.language, carried on so every later drop and the per-language statistics can name it."""
    meta: tuple[tuple[str, str], ...] = ()
    """RawDoc.meta, carried on to the clean/ shards' meta column."""

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


@dataclasses.dataclass(frozen=True)
class TokenizedDoc:
    source: str
    path: str
    doc_id: str
    sentences: tuple[tuple[int, ...], ...]
    """Word-piece ids per sentence (empty sentences removed)."""
    language: str = ""


@dataclasses.dataclass(frozen=True)
class Drop:
    path: str
    reason: str
    line: int = 0
    sample: str = ""
    """The start of the offending record, for the report."""
    language: str = ""
    """The document's language when prep identifies languages (report.json's per-language accounting)."""


@dataclasses.dataclass(frozen=True)
class Event:
    """Something that happened to a file and is worth counting but is not a dropped record."""

    path: str
    kind: str  # "invalid_utf8_replaced", "truncated_stream"
    line: int = 0


@dataclasses.dataclass(frozen=True)
class Pair:
    """A translation pair (prep --parallel: pipelines/documents/parallel.py)."""

    source_language: str
    target_language: str
    source: str
    target: str
    path: str
    line: int
    """The pair's line (TSV, line-aligned), its msgid's line (.po) or its entry number (.mo)."""

    @property
    def languages(self) -> str:
        """`en-fr`: the direction report.json and the Parquet rows name."""
        return f"{self.source_language}-{self.target_language}"


def make_doc_id(name: str, index: int | str) -> str:
    """A stable id from the file's name and the record's position in it: the same on every runner and worker
    count. `name` is the input's name and the file's path under the input's root (see read_corpus.matched_files),
    not where the corpus lies, so that a corpus copied elsewhere (another folder, a bucket) gets the same ids,
    and with them the same validation split, buckets and pairs."""
    return hashlib.sha1(f"{name}\0{index}".encode()).hexdigest()[:20]
