"""The contracts: pair schema versions and fields, manifest round trip and the errors a bad one gets."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from schemas import (
    ContractError,
    Manifest,
    ShardInfo,
    pairs_schema,
    token_type,
    validate_pairs_schema,
)


def test_token_type_narrowest_that_fits():
    assert token_type(30522) == pa.uint16() and token_type(65536) == pa.uint16() and token_type(65537) == pa.uint32()
    with pytest.raises(ValueError):
        token_type(0)


def test_pair_schema_validates_itself_and_names_the_difference():
    validate_pairs_schema(pairs_schema(30522), "a.arrow")
    validate_pairs_schema(pairs_schema(100_000), "b.arrow")
    old = pairs_schema(100).with_metadata({b"clozeforge.schema": b"nsp_pairs", b"clozeforge.format_version": b"0"})
    with pytest.raises(ContractError, match="a.arrow: pair format version '0', this clozeforge reads version 1"):
        validate_pairs_schema(old, "a.arrow")
    with pytest.raises(ContractError, match="not a clozeforge pair shard"):
        validate_pairs_schema(pa.schema([pa.field("x", pa.int8())]), "c.arrow")
    renamed = pa.schema([f.with_name("label") if f.name == "is_random_next" else f for f in pairs_schema(100)], metadata=pairs_schema(100).metadata)
    with pytest.raises(ContractError, match=r"(?s)expected: .*is_random_next.*found: .*label"):
        validate_pairs_schema(renamed, "d.arrow")


def manifest(**overrides) -> Manifest:
    body = dict(
        vocab={"file": "../vocab/vocab.txt", "sha256": "ab" * 32, "size": 100, "lowercase": True},
        special_tokens={"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4},
        max_seq_len=128,
        shards=(ShardInfo("train-00000-of-00001.arrow", "train", 10, 123, "cd" * 32, {"web": 10}),
                ShardInfo("validation-00000-of-00001.arrow", "validation", 2, 45, "ef" * 32, {"web": 2})),
    )
    return Manifest(**{**body, **overrides})


def test_manifest_round_trip_and_views(tmp_path):
    url = manifest().write(str(tmp_path / "pairs"))
    back = Manifest.read(str(tmp_path / "pairs"))
    assert back == manifest() and back.url == url
    assert back.splits == {"train": 10, "validation": 2} and back.sources == {"web": 12}
    assert back.resolve("../vocab/vocab.txt") == str(tmp_path / "vocab" / "vocab.txt")
    assert back.fingerprint == manifest().fingerprint
    assert not list((tmp_path / "pairs").glob("*.tmp"))


def test_a_version_1_manifest_reads_as_wordpiece_and_roles_name_the_ids(tmp_path):
    body = json.loads(manifest().to_json())
    assert body["format_version"] == 2 and body["tokenizer"] == "wordpiece"
    del body["tokenizer"]
    body["format_version"] = 1
    old = Manifest.from_dict(body, "old/manifest.json")
    assert old.tokenizer == "wordpiece" and old.format_version == 1 and old.special_id("mask_token") == 4
    roberta = manifest(tokenizer="bpe", special_tokens={"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 99})
    back = Manifest.from_dict(json.loads(roberta.to_json()))
    assert back == roberta
    assert [back.special_id(r) for r in ("cls_token", "pad_token", "sep_token", "unk_token", "mask_token")] == [0, 1, 2, 3, 99]
    with pytest.raises(ContractError, match="a bpe vocabulary has no sop_token"):
        back.special_id("sop_token")


def test_object_store_paths_resolve_without_dot_dot():
    m = Manifest.from_dict(json.loads(manifest().to_json()), "s3://bucket/run/pairs/manifest.json")
    assert m.resolve("../vocab/vocab.txt") == "s3://bucket/run/vocab/vocab.txt"


@pytest.mark.parametrize("edit, message", [
    (lambda b: b.update(format_version=3), "manifest format_version 3, this clozeforge reads 1, 2"),
    (lambda b: b.update(tokenizer="sentencepiece"), r'tokenizer must be one of wordpiece, bpe, unigram, got "sentencepiece"'),
    (lambda b: b.update(format_version=1), r'tokenizer must be absent from a version-1 manifest \(WordPiece\), got "wordpiece"'),
    (lambda b: b.update(tokenizer="bpe"), r"special_tokens lacks \['<s>', '<pad>', '</s>', '<unk>', '<mask>'\]"),
    (lambda b: b["special_tokens"].pop("[MASK]"), r"special_tokens lacks \['\[MASK\]'\]"),
    (lambda b: b["splits"].update(train=11), "split 'train' says 11 rows, its shards hold 10"),
    (lambda b: b.pop("shards"), "malformed manifest: no 'shards' field"),
    (lambda b: b.update(max_seq_len="x"), r'max_seq_len must be an integer >= 4, got "x"'),
    (lambda b: b["shards"][1].update(rows="many"), r'shards\[1\].rows must be a non-negative integer, got "many"'),
    (lambda b: b["shards"][0].update(bytes=True), r"shards\[0\].bytes must be a non-negative integer, got true"),
    (lambda b: b["vocab"].update(size=None), "vocab.size must be a positive integer, got null"),
    (lambda b: b.update(shards={}), "shards must be a non-empty list"),
    (lambda b: b.update(shards=[1]), r"shards\[0\] must be an object, got 1"),
])
def test_bad_manifests_are_refused_with_the_reason(tmp_path, edit, message):
    body = json.loads(manifest().to_json())
    edit(body)
    (tmp_path / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(ContractError, match=message):
        Manifest.read(str(tmp_path))


@pytest.mark.parametrize("path", ["../outside.arrow", "/etc/passwd", "s3://other-bucket/x.arrow", "a/../../x.arrow", "..", "", "a\\..\\b"])
def test_shard_paths_must_stay_inside_the_manifest_directory(tmp_path, path):
    body = json.loads(manifest().to_json())
    body["shards"][0]["path"] = path
    (tmp_path / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(ContractError, match=r"shards\[0\].path must be a relative path inside the manifest's directory"):
        Manifest.read(str(tmp_path))


@pytest.mark.parametrize("path, ok", [("../vocab/vocab.txt", True), ("vocab.txt", True), ("../../vocab.txt", False), ("/vocab.txt", False)])
def test_vocabulary_may_sit_beside_the_pairs_but_not_further(tmp_path, path, ok):
    body = json.loads(manifest().to_json())
    body["vocab"]["file"] = path
    (tmp_path / "manifest.json").write_text(json.dumps(body))
    if ok:
        assert Manifest.read(str(tmp_path)).vocab["file"] == path
    else:
        with pytest.raises(ContractError, match="vocab.file must be a relative path inside the prep output"):
            Manifest.read(str(tmp_path))


def test_missing_shards_names_missing_and_resized_files(tmp_path):
    from schemas.manifest import missing_shards

    m = Manifest.read(manifest().write(str(tmp_path / "pairs")))
    (tmp_path / "pairs" / "train-00000-of-00001.arrow").write_bytes(b"x" * 123)
    (tmp_path / "pairs" / "validation-00000-of-00001.arrow").write_bytes(b"x" * 44)
    assert missing_shards(m) == ["validation-00000-of-00001.arrow has 44 bytes, the manifest says 45"]
    (tmp_path / "pairs" / "train-00000-of-00001.arrow").unlink()
    assert missing_shards(m, m.split_shards("train")) == ["train-00000-of-00001.arrow is missing"]


def test_missing_and_unparsable_manifests(tmp_path):
    with pytest.raises(ContractError, match="no manifest here"):
        Manifest.read(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ContractError, match="not valid JSON"):
        Manifest.read(str(tmp_path))
