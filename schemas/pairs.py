"""Arrow schema of the NSP pair shards (prep writes them, the trainer streams them).

One row is one BERT pre-training instance *before* masking: masking is online in the trainer, so the
shards hold only the two segments and the next-sentence label. Token ids are stored as uint16 when the
vocabulary has at most 65,536 entries (BERT's 30,522 fits), which halves the shard size against uint32.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.errors import ContractError

PAIRS_FORMAT_VERSION = 1
SCHEMA_KIND = "nsp_pairs"
_UINT16_MAX_VOCAB = 1 << 16


def token_type(vocab_size: int) -> pa.DataType:
    """The narrowest unsigned integer type that holds every id of a vocabulary of `vocab_size`."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return pa.uint16() if vocab_size <= _UINT16_MAX_VOCAB else pa.uint32()


def pairs_schema(vocab_size: int) -> pa.Schema:
    """The pair schema for a vocabulary of `vocab_size`, with the format version in its metadata."""
    ids = pa.list_(token_type(vocab_size))
    return pa.schema(
        [
            pa.field("tokens_a", ids, nullable=False),  # segment A word pieces, no [CLS]/[SEP]
            pa.field("tokens_b", ids, nullable=False),  # segment B word pieces
            pa.field("is_random_next", pa.bool_(), nullable=False),  # NSP label: B drawn from another doc
            pa.field("num_tokens", pa.uint16(), nullable=False),  # len(a) + len(b) + 3 special tokens
            pa.field("source", pa.string(), nullable=False),  # name of the --input this pair came from
            pa.field("doc_id", pa.string(), nullable=False),  # document of segment A
        ],
        metadata={
            b"clozeforge.schema": SCHEMA_KIND.encode(),
            b"clozeforge.format_version": str(PAIRS_FORMAT_VERSION).encode(),
        },
    )


def validate_pairs_schema(found: pa.Schema, where: str) -> None:
    """Raise ContractError naming `where` unless `found` is a pair schema this version can read."""
    meta = found.metadata or {}
    kind = meta.get(b"clozeforge.schema", b"").decode()
    version = meta.get(b"clozeforge.format_version", b"").decode()
    if kind != SCHEMA_KIND:
        raise ContractError(f"{where}: not a clozeforge pair shard (schema tag {kind!r}, expected {SCHEMA_KIND!r})")
    if version != str(PAIRS_FORMAT_VERSION):
        raise ContractError(
            f"{where}: pair format version {version!r}, this clozeforge reads version {PAIRS_FORMAT_VERSION}"
        )
    ids_type = found.field("tokens_a").type if "tokens_a" in found.names else None
    vocab_size = _UINT16_MAX_VOCAB if ids_type == pa.list_(pa.uint16()) else _UINT16_MAX_VOCAB + 1
    expected = pairs_schema(vocab_size)
    if not found.remove_metadata().equals(expected.remove_metadata()):
        raise ContractError(f"{where}: pair schema mismatch\n  expected: {_fields(expected)}\n  found:    {_fields(found)}")


def _fields(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)
