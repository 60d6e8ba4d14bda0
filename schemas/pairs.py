"""Arrow schemas of the pair shards under pairs/ (prep writes them, the trainer streams them), one row format a packing.

A row is one pre-training instance *before* masking: masking is online in the trainer, so the shards hold only
token ids and what the objective needs besides. Token ids are stored as uint16 when the vocabulary has at most
65,536 entries (BERT's 30,522 fits), which halves the shard size against uint32; as uint32 otherwise (XLM-R's
250,002). Three row formats, each declared once here (`ROW_FORMATS`), and tagged in every shard's schema metadata:

  nsp_pairs    BERT's NSP instances: two segments and the next-sentence label; the trainer adds
               [CLS] A [SEP] B [SEP] (3 special tokens).
  packed_rows  one segment of whole sentences packed up to the length (RoBERTa's FULL-SENTENCES and
               DOC-SENTENCES, Liu et al. 2019 §4.2); the trainer adds the two special tokens around it
               (<s> ... </s>, or [CLS] ... [SEP]). A document boundary inside a row is the vocabulary's
               separator id, stored in the row; the manifest's `packing.separator` names it (schemas/manifest.py).
  tlm_pairs    XLM's translation language modelling (Lample & Conneau 2019): a translation pair, each side in its
               language; the trainer adds [CLS] A [SEP] B [SEP], gives every token its side's language id and starts
               the positions again at B, and masks both sides. prep writes them from --parallel pairs
               (`--packing tlm`); the manifest's `packing.languages` lists the languages of its rows.

`PACKINGS` says which row format each `prep --packing` writes; `schemas.manifest.mixing_conflict` refuses to
put rows of two formats into one training run.

Format versions (one counter for the pair shards; a kind keeps the version it was introduced or last changed in)
  1  nsp_pairs: tokens_a, tokens_b, is_random_next, num_tokens (len(a) + len(b) + 3), source, doc_id.
  2  packed_rows added (nsp_pairs unchanged, still version 1): tokens, num_tokens (len(tokens) + 2), source,
     doc_id (the document the row starts in).
  3  tlm_pairs added (the others unchanged): tokens_a, tokens_b, language_a, language_b, num_tokens
     (len(a) + len(b) + 3), source (the pair's direction, `en-de`), doc_id (the pair's file and line, `path:line`).
  4  packed_rows gains doc_starts: the offsets in `tokens` where each document after the row's first begins (just
     after its separator; empty for a row of one document), so the trainer attends within each document (ModernBERT's
     packing). Version 2 shards are still read: no boundaries, attention over the whole row as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pyarrow as pa

from schemas.errors import ContractError

_UINT16_MAX_VOCAB = 1 << 16
KIND_KEY, VERSION_KEY = b"clozeforge.schema", b"clozeforge.format_version"


def token_type(vocab_size: int) -> pa.DataType:
    """The narrowest unsigned integer type that holds every id of a vocabulary of `vocab_size`."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return pa.uint16() if vocab_size <= _UINT16_MAX_VOCAB else pa.uint32()


def _nsp_fields(ids: pa.DataType) -> list[pa.Field]:
    return [
        pa.field("tokens_a", ids, nullable=False),  # segment A word pieces, no [CLS]/[SEP]
        pa.field("tokens_b", ids, nullable=False),  # segment B word pieces
        pa.field("is_random_next", pa.bool_(), nullable=False),  # NSP label: B drawn from another doc
        pa.field("num_tokens", pa.uint16(), nullable=False),  # len(a) + len(b) + 3 special tokens
        pa.field("source", pa.string(), nullable=False),  # name of the --input this pair came from
        pa.field("doc_id", pa.string(), nullable=False),  # document of segment A
    ]


def _packed_fields(ids: pa.DataType) -> list[pa.Field]:
    return [
        pa.field("tokens", ids, nullable=False),  # whole sentences; a separator id where two documents meet
        pa.field("num_tokens", pa.uint16(), nullable=False),  # len(tokens) + 2 special tokens
        pa.field("source", pa.string(), nullable=False),  # name of the --input (a row never mixes two)
        pa.field("doc_id", pa.string(), nullable=False),  # the document the row starts in
    ]


def _packed_fields_v4(ids: pa.DataType) -> list[pa.Field]:
    return [*_packed_fields(ids)[:2], pa.field("doc_starts", pa.list_(pa.uint16()), nullable=False),  # later documents' starts
            *_packed_fields(ids)[2:]]


def _tlm_fields(ids: pa.DataType) -> list[pa.Field]:
    return [
        pa.field("tokens_a", ids, nullable=False),  # the source sentence's pieces, no [CLS]/[SEP]
        pa.field("tokens_b", ids, nullable=False),  # its translation's pieces
        pa.field("language_a", pa.string(), nullable=False),  # the source's language code (`en`)
        pa.field("language_b", pa.string(), nullable=False),  # the translation's (`de`, `pt_BR`, ...)
        pa.field("num_tokens", pa.uint16(), nullable=False),  # len(a) + len(b) + 3 special tokens
        pa.field("source", pa.string(), nullable=False),  # the pair's direction, `en-de`
        pa.field("doc_id", pa.string(), nullable=False),  # where the pair was read: `path:line`
    ]


@dataclasses.dataclass(frozen=True)
class RowFormat:
    """One kind of pair shard: its tag, version, columns and the special tokens the trainer adds to a row."""

    kind: str
    version: int
    id_columns: tuple[str, ...]
    """The list-of-ids columns (uint16 or uint32 by the vocabulary's size)."""
    special_tokens: int
    """Tokens the trainer adds around a row's ids: `num_tokens` counts them, `max_seq_len` bounds the total."""
    fields: Callable[[pa.DataType], list[pa.Field]] = dataclasses.field(repr=False, compare=False)
    older: tuple[tuple[int, Callable[[pa.DataType], list[pa.Field]]], ...] = dataclasses.field(default=(), repr=False,
                                                                                               compare=False)
    """Earlier versions of this kind still read, with their columns (packed_rows 2: before doc_starts)."""

    @property
    def versions(self) -> tuple[int, ...]:
        """Every version of this kind that is read, the newest (what prep writes) first."""
        return (self.version, *(v for v, _ in self.older))

    def schema(self, vocab_size: int, version: int | None = None) -> pa.Schema:
        """This format's schema (or an older version's) for a vocabulary of `vocab_size`, tagged with its kind and version."""
        fields = self.fields if version in (None, self.version) else dict(self.older)[version]
        return pa.schema(fields(pa.list_(token_type(vocab_size))),
                         metadata={KIND_KEY: self.kind.encode(), VERSION_KEY: str(version or self.version).encode()})


NSP_PAIRS = RowFormat("nsp_pairs", 1, ("tokens_a", "tokens_b"), 3, _nsp_fields)
PACKED_ROWS = RowFormat("packed_rows", 4, ("tokens",), 2, _packed_fields_v4, older=((2, _packed_fields),))
TLM_PAIRS = RowFormat("tlm_pairs", 3, ("tokens_a", "tokens_b"), 3, _tlm_fields)
ROW_FORMATS = {f.kind: f for f in (NSP_PAIRS, PACKED_ROWS, TLM_PAIRS)}
"""Every row format this clozeforge reads and writes, by kind."""
PAIRS_FORMAT_VERSION = max(f.version for f in ROW_FORMATS.values())
"""The newest pair-shard format version (the change log above)."""
SCHEMA_KIND = NSP_PAIRS.kind  # what every reader expected before packed rows existed


@dataclasses.dataclass(frozen=True)
class Packing:
    """What `prep --packing NAME` writes."""

    name: str
    row_format: RowFormat
    crosses_documents: bool
    """Whether a row may hold sentences of two documents (with the separator between them)."""


PACKINGS = {p.name: p for p in (
    Packing("nsp", NSP_PAIRS, crosses_documents=False),  # segment B may come from another document, as NSP's negative
    Packing("full-sentences", PACKED_ROWS, crosses_documents=True),
    Packing("doc-sentences", PACKED_ROWS, crosses_documents=False),
    Packing("tlm", TLM_PAIRS, crosses_documents=False),  # a translation pair a row, from prep --parallel
)}


def pairs_schema(vocab_size: int) -> pa.Schema:
    """The NSP pair schema for a vocabulary of `vocab_size` (NSP_PAIRS.schema)."""
    return NSP_PAIRS.schema(vocab_size)


def validate_pairs_schema(found: pa.Schema, where: str, kind: str = NSP_PAIRS.kind) -> RowFormat:
    """The RowFormat of `found`, which must be a shard of `kind` (the manifest's `packing.row_format`) at the
    version this clozeforge reads; else a ContractError naming `where`, what was expected and what was found."""
    expected_format = ROW_FORMATS[kind]
    meta = found.metadata or {}
    tag = meta.get(KIND_KEY, b"").decode(errors="replace")
    version = meta.get(VERSION_KEY, b"").decode(errors="replace")
    if tag not in ROW_FORMATS:
        raise ContractError(f"{where}: not a clozeforge pair shard (schema tag {tag!r}, expected {kind!r})")
    if tag != kind:
        raise ContractError(f"{where}: a {tag!r} shard (pair format {version}), expected {kind!r}")
    if version not in map(str, expected_format.versions):
        raise ContractError(f"{where}: pair format version {version!r}, this clozeforge reads version "
                            f"{' or '.join(map(str, expected_format.versions))}")
    ids_type = found.field(expected_format.id_columns[0]).type if expected_format.id_columns[0] in found.names else None
    vocab_size = _UINT16_MAX_VOCAB if ids_type == pa.list_(pa.uint16()) else _UINT16_MAX_VOCAB + 1
    expected = expected_format.schema(vocab_size, int(version))
    if not found.remove_metadata().equals(expected.remove_metadata()):
        raise ContractError(f"{where}: pair schema mismatch\n  expected: {_fields(expected)}\n  found:    {_fields(found)}")
    return expected_format


def _fields(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)
