"""A manifest's JSON, checked field by field before a Manifest is built from it (schemas/manifest.py's `from_dict`).

In:  the parsed body of a manifest.json (anything `json.loads` gives) and where it was read from.
Out: nothing when every field has the type and range it must have; else a ContractError naming the first field that
     does not, what it must be and what it is, in one line. `contained` is the path rule: a shard's path stays inside
     the manifest's directory, the vocabulary's inside the prep output around it (pairs/../vocab/); no absolute path,
     no URL, no `..` beyond that. Nothing a user hands the trainer leads it to read outside the run.
"""

from __future__ import annotations

import itertools
import json
import posixpath
from typing import Any

from schemas.errors import ContractError
from schemas.pairs import PACKINGS, TLM_PAIRS
from schemas.tokenizer_formats import TOKENIZER_FORMATS


def _is_int(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def contained(relative: Any, ups: int = 0) -> bool:
    """Whether `relative` is a relative path that climbs at most `ups` directories and stays below them."""
    if not isinstance(relative, str) or not relative or "://" in relative or relative.startswith(("/", "\\")) or "\\" in relative:
        return False
    parts = posixpath.normpath(relative).split("/")
    climbs = len(parts) - len(list(itertools.dropwhile(lambda p: p == "..", parts)))
    return climbs <= ups and ".." not in parts[climbs:] and parts[climbs:] not in ([], ["."])


def check_body(body: Any, where: str) -> None:
    """Every field of a manifest's JSON has the type and range it must have; a ContractError naming the first
    that does not. Shards must lie inside the manifest's directory, the vocabulary inside the directory above."""
    def need(ok: bool, field: str, what: str, value: Any) -> None:
        if not ok:
            raise ContractError(f"{where}: {field} must be {what}, got {json.dumps(value)[:80]}")

    need(isinstance(body, dict), "the manifest", "a JSON object", body)
    missing = [key for key in ("vocab", "special_tokens", "max_seq_len", "shards") if key not in body]
    if missing:
        raise ContractError(f"{where}: malformed manifest: no {missing[0]!r} field")
    vocab = body["vocab"]
    need(isinstance(vocab, dict), "vocab", "an object", vocab)
    for key in ("file", "token_counts"):
        if key in vocab or key == "file":
            need(contained(vocab.get(key), ups=1), f"vocab.{key}", "a relative path inside the prep output", vocab.get(key))
    need(isinstance(vocab.get("sha256"), str) and len(vocab["sha256"]) == 64, "vocab.sha256", "a sha256 hex digest", vocab.get("sha256"))
    need(_is_int(vocab.get("size"), 1), "vocab.size", "a positive integer", vocab.get("size"))
    need(isinstance(vocab.get("lowercase"), bool), "vocab.lowercase", "true or false", vocab.get("lowercase"))
    tokens = body["special_tokens"]
    need(isinstance(tokens, dict) and all(_is_int(v) for v in tokens.values()), "special_tokens", "an object of token ids", tokens)
    need(_is_int(body["max_seq_len"], 4), "max_seq_len", "an integer >= 4", body["max_seq_len"])
    need(isinstance(body["shards"], list) and body["shards"], "shards", "a non-empty list", body["shards"])
    if body.get("format_version") == 1:
        need("tokenizer" not in body, "tokenizer", "absent from a version-1 manifest (WordPiece)", body.get("tokenizer"))
    else:
        need(body.get("tokenizer") in TOKENIZER_FORMATS, "tokenizer", f"one of {', '.join(TOKENIZER_FORMATS)}",
             body.get("tokenizer"))
    for i, shard in enumerate(body["shards"]):
        field = f"shards[{i}]"
        need(isinstance(shard, dict), field, "an object", shard)
        need(contained(shard.get("path")), f"{field}.path", "a relative path inside the manifest's directory", shard.get("path"))
        need(isinstance(shard.get("split"), str), f"{field}.split", "a split name", shard.get("split"))
        for key in ("rows", "bytes"):
            need(_is_int(shard.get(key)), f"{field}.{key}", "a non-negative integer", shard.get(key))
        need(isinstance(shard.get("sha256"), str), f"{field}.sha256", "a sha256 hex digest", shard.get("sha256"))
        rows = shard.get("source_rows", {})
        need(isinstance(rows, dict) and all(_is_int(v) for v in rows.values()), f"{field}.source_rows", "an object of row counts", rows)
    splits = body.get("splits", {})
    need(isinstance(splits, dict) and all(_is_int(v) for v in splits.values()), "splits", "an object of row counts", splits)
    need(_is_int(body.get("seed", 0)), "seed", "a non-negative integer", body.get("seed"))
    need(isinstance(body.get("config", {}), dict), "config", "an object", body.get("config"))
    if "packing" in body:
        check_packing(body["packing"], vocab["size"], where)


def check_packing(packing: Any, vocab_size: int, where: str) -> None:
    """A manifest's `packing` names a known mode with the row format (kind and version) that mode writes, and a
    packed row format a separator id inside the vocabulary; a ContractError naming the field and what it must be."""
    def need(ok: bool, field: str, what: str, value: Any) -> None:
        if not ok:
            raise ContractError(f"{where}: packing{field} must be {what}, got {json.dumps(value)[:80]}")

    need(isinstance(packing, dict), "", "an object", packing)
    need(packing.get("mode") in PACKINGS, ".mode", f"one of {', '.join(PACKINGS)}", packing.get("mode"))
    row_format = PACKINGS[packing["mode"]].row_format
    need(packing.get("row_format") == row_format.kind, ".row_format", f"{row_format.kind!r} for --packing {packing['mode']}",
         packing.get("row_format"))
    need(packing.get("format_version") in row_format.versions, ".format_version",
         f"{' or '.join(map(str, row_format.versions))} (the {row_format.kind} format this clozeforge reads)",
         packing.get("format_version"))
    if packing["row_format"] == TLM_PAIRS.kind:
        languages = packing.get("languages")
        need(isinstance(languages, list) and len(languages) >= 2 and all(isinstance(c, str) and c for c in languages)
             and languages == sorted(set(languages)), ".languages", "the sorted, distinct language codes of the rows (two or more)",
             languages)
    else:
        need("languages" not in packing, ".languages", f"absent for --packing {packing['mode']}", packing.get("languages"))
    separator = packing.get("separator")
    if not PACKINGS[packing["mode"]].crosses_documents:
        need(separator is None, ".separator", f"absent for --packing {packing['mode']} (a row holds one document)", separator)
        return
    need(isinstance(separator, dict) and isinstance(separator.get("token"), str) and _is_int(separator.get("id"))
         and separator["id"] < vocab_size, ".separator", f'{{"token": ..., "id": an id below the vocabulary size {vocab_size}}}',
         separator)
