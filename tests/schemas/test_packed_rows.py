"""The packed-row contracts (issue 43): the two row formats of pairs/, the manifest's `packing` (version 2, and
version 1 still read; packed rows' format 4, with the documents' starts (issue 61), and format 2 still read), and the check that refuses to mix NSP pairs with packed rows in one training run."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from schemas import ContractError, Manifest, ShardInfo, validate_pairs_schema
from schemas.manifest import mixing_conflict
from schemas.pairs import NSP_PAIRS, PACKED_ROWS, PACKINGS, pairs_schema


def test_the_nsp_schema_is_what_it_was():
    """The NSP shards stay byte-identical: same fields, types and metadata as pair format 1."""
    schema = pairs_schema(30522)
    assert schema.metadata == {b"clozeforge.schema": b"nsp_pairs", b"clozeforge.format_version": b"1"}
    assert [(f.name, str(f.type), f.nullable) for f in schema] == [
        ("tokens_a", "list<item: uint16>", False), ("tokens_b", "list<item: uint16>", False),
        ("is_random_next", "bool", False), ("num_tokens", "uint16", False), ("source", "string", False),
        ("doc_id", "string", False)]


def test_packed_rows_validate_at_either_id_width_and_say_their_format():
    for size in (50_265, 250_002):  # RoBERTa's vocabulary (uint16), XLM-R's (uint32)
        schema = PACKED_ROWS.schema(size)
        assert validate_pairs_schema(schema, "a.arrow", "packed_rows") is PACKED_ROWS
        assert schema.metadata == {b"clozeforge.schema": b"packed_rows", b"clozeforge.format_version": b"4"}
        assert validate_pairs_schema(PACKED_ROWS.schema(size, 2), "old.arrow", "packed_rows") is PACKED_ROWS  # still read
    assert PACKED_ROWS.schema(250_002).field("tokens").type == pa.list_(pa.uint32())
    assert PACKED_ROWS.schema(100).field("doc_starts").type == pa.list_(pa.uint16())
    assert "doc_starts" not in PACKED_ROWS.schema(100, 2).names
    assert validate_pairs_schema(pairs_schema(100), "b.arrow") is NSP_PAIRS  # NSP is what a reader expects by default


@pytest.mark.parametrize("schema, kind, message", [
    (pairs_schema(100), "packed_rows", "a.arrow: a 'nsp_pairs' shard (pair format 1), expected 'packed_rows'"),
    (PACKED_ROWS.schema(100), "nsp_pairs", "a.arrow: a 'packed_rows' shard (pair format 4), expected 'nsp_pairs'"),
    (PACKED_ROWS.schema(100).with_metadata({b"clozeforge.schema": b"packed_rows", b"clozeforge.format_version": b"1"}),
     "packed_rows", "a.arrow: pair format version '1', this clozeforge reads version 4 or 2"),
    (pa.schema([pa.field("tokens", pa.list_(pa.uint16()))], metadata={b"clozeforge.schema": b"rows"}), "packed_rows",
     "a.arrow: not a clozeforge pair shard (schema tag 'rows', expected 'packed_rows')"),
])
def test_a_shard_of_another_kind_or_version_names_expected_and_found(schema, kind, message):
    with pytest.raises(ContractError) as e:
        validate_pairs_schema(schema, "a.arrow", kind)
    assert str(e.value) == message


def test_a_packed_schema_with_other_fields_shows_both_lists():
    fields = [f.with_type(pa.list_(pa.int32())) if f.name == "tokens" else f for f in PACKED_ROWS.schema(100)]
    found = pa.schema(fields, metadata=PACKED_ROWS.schema(100).metadata)
    with pytest.raises(ContractError) as e:
        validate_pairs_schema(found, "c.arrow", "packed_rows")
    assert str(e.value).splitlines() == [
        "c.arrow: pair schema mismatch",
        "  expected: tokens: list<item: uint32>, num_tokens: uint16, doc_starts: list<item: uint16>, source: string, doc_id: string",
        "  found:    tokens: list<item: int32>, num_tokens: uint16, doc_starts: list<item: uint16>, source: string, doc_id: string",
    ]


def manifest(packing: dict | None = None, url: str = "") -> Manifest:
    body = dict(vocab={"file": "../vocab/vocab.txt", "sha256": "ab" * 32, "size": 100, "lowercase": True},
                special_tokens={"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}, max_seq_len=128,
                shards=(ShardInfo("train-00000-of-00001.arrow", "train", 10, 123, "cd" * 32, {"web": 10}),))
    return Manifest(**body, **({"packing": packing} if packing else {}), url=url)


FULL = {"mode": "full-sentences", "row_format": "packed_rows", "format_version": 4, "separator": {"token": "[SEP]", "id": 3}}
DOC = {"mode": "doc-sentences", "row_format": "packed_rows", "format_version": 4}
OLD_DOC = {**DOC, "format_version": 2}  # a prep run from before format 4: read, but not mixed with format 4's rows


def test_the_packing_round_trips_and_a_version_1_manifest_reads_as_nsp(tmp_path):
    Manifest.read(manifest(FULL).write(str(tmp_path / "full")))
    back = Manifest.read(str(tmp_path / "full"))
    assert back.packing == FULL and back.row_format is PACKED_ROWS and back.separator_id == 3
    old = json.loads(manifest().to_json())
    del old["packing"], old["tokenizer"]  # what version 1 did not have
    old["format_version"] = 1
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    v1 = Manifest.read(str(tmp_path))
    assert v1.packing == {"mode": "nsp", "row_format": "nsp_pairs", "format_version": 1}
    assert v1.row_format is NSP_PAIRS and v1.separator_id is None


@pytest.mark.parametrize("packing, message", [
    ({**FULL, "mode": "blocks"}, 'packing.mode must be one of nsp, full-sentences, doc-sentences, tlm, got "blocks"'),
    ({**FULL, "row_format": "nsp_pairs"}, "packing.row_format must be 'packed_rows' for --packing full-sentences, got \"nsp_pairs\""),
    ({**FULL, "format_version": 3}, "packing.format_version must be 4 or 2 (the packed_rows format this clozeforge reads), got 3"),
    ({k: v for k, v in FULL.items() if k != "separator"}, 'packing.separator must be {"token": ..., "id": an id below the '
     "vocabulary size 100}, got null"),
    ({**FULL, "separator": {"token": "[SEP]", "id": 100}}, 'packing.separator must be {"token": ..., "id": an id below the '
     'vocabulary size 100}, got {"token": "[SEP]", "id": 100}'),
    ({**DOC, "separator": {"token": "[SEP]", "id": 3}}, "packing.separator must be absent for --packing doc-sentences (a row "
     'holds one document), got {"token": "[SEP]", "id": 3}'),
    ("nsp", 'packing must be an object, got "nsp"'),
])
def test_a_bad_packing_is_refused_naming_the_field(tmp_path, packing, message):
    body = json.loads(manifest().to_json())
    body["packing"] = packing
    (tmp_path / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(ContractError) as e:
        Manifest.read(str(tmp_path))
    assert str(e.value) == f"{tmp_path / 'manifest.json'}: {message}"


def test_nsp_pairs_and_packed_rows_never_mix_and_the_two_packed_modes_do():
    nsp, full, doc = manifest(url="a/pairs/manifest.json"), manifest(FULL, "b/pairs/manifest.json"), manifest(DOC, "c/pairs/manifest.json")
    assert mixing_conflict(nsp, full) == (
        "b/pairs/manifest.json holds packed rows (--packing full-sentences, packed_rows v4), a/pairs/manifest.json holds "
        "NSP pairs (--packing nsp, nsp_pairs v1): one training run reads one row format")
    assert mixing_conflict(doc, nsp).startswith("a/pairs/manifest.json holds NSP pairs (--packing nsp, nsp_pairs v1), ")
    assert mixing_conflict(full, doc) is None and mixing_conflict(doc, full) is None
    assert mixing_conflict(full, manifest(OLD_DOC, "e/pairs/manifest.json")) == (
        "e/pairs/manifest.json holds packed rows (--packing doc-sentences, packed_rows v2), b/pairs/manifest.json holds "
        "packed rows (--packing full-sentences, packed_rows v4): one training run reads one row format")
    assert mixing_conflict(nsp, nsp) is None and mixing_conflict(full, full) is None
    other = manifest({**FULL, "separator": {"token": "</s>", "id": 2}}, "d/pairs/manifest.json")
    assert mixing_conflict(full, other) == ("d/pairs/manifest.json separates documents with {'token': '</s>', 'id': 2}, "
                                            "b/pairs/manifest.json with {'token': '[SEP]', 'id': 3}")


def test_every_packing_names_a_row_format_of_the_table():
    assert {name: (p.row_format.kind, p.crosses_documents) for name, p in PACKINGS.items()} == {
        "nsp": ("nsp_pairs", False), "full-sentences": ("packed_rows", True), "doc-sentences": ("packed_rows", False),
        "tlm": ("tlm_pairs", False)}


TLM = {"mode": "tlm", "row_format": "tlm_pairs", "format_version": 3, "languages": ["de", "en", "fr"]}


@pytest.mark.parametrize("packing, message", [
    ({k: v for k, v in TLM.items() if k != "languages"}, "packing.languages must be the sorted, distinct language codes of "
     "the rows (two or more), got null"),
    ({**TLM, "languages": ["en"]}, 'packing.languages must be the sorted, distinct language codes of the rows (two or '
     'more), got ["en"]'),
    ({**TLM, "languages": ["en", "de"]}, 'packing.languages must be the sorted, distinct language codes of the rows (two '
     'or more), got ["en", "de"]'),
    ({**DOC, "languages": ["de", "en"]}, 'packing.languages must be absent for --packing doc-sentences, got ["de", "en"]'),
])
def test_a_tlm_manifest_lists_its_rows_languages_and_no_other_does(tmp_path, packing, message):
    Manifest.read(manifest(TLM).write(str(tmp_path / "tlm")))  # the sound record reads
    body = json.loads(manifest().to_json())
    body["packing"] = packing
    (tmp_path / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(ContractError) as e:
        Manifest.read(str(tmp_path))
    assert str(e.value) == f"{tmp_path / 'manifest.json'}: {message}"


def test_translation_pairs_mix_with_packed_rows_not_with_nsp_pairs():
    nsp, full, tlm = manifest(url="a/pairs/manifest.json"), manifest(FULL, "b/pairs/manifest.json"), manifest(TLM, "t/pairs/manifest.json")
    assert mixing_conflict(full, tlm) is None and mixing_conflict(tlm, full) is None and mixing_conflict(tlm, tlm) is None
    assert mixing_conflict(nsp, tlm) == (
        "t/pairs/manifest.json holds translation pairs (--packing tlm, tlm_pairs v3), a/pairs/manifest.json holds "
        "NSP pairs (--packing nsp, nsp_pairs v1): one training run reads one row format")
