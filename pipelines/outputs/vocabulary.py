"""A vocabulary directory written whole, whatever the tokenizer kind (schemas/vocab.py, schemas/tokenizer_formats.py).

In:  the tokens (index = id), the kind's files as text (tokenizer.json, ...), the kind's row and the settings it was
     learned with.
Out: every file renamed into place once complete, plus vocab.txt (the tokens, one a line: what the manifest's sha256
     covers, for every kind) and vocab_config.json (the settings, the kind, its word boundary mark, size, sha256 and
     special-token ids); returns the vocabulary summary prep passes on and reports:
     {"file": "vocab.txt", "sha256", "size", "lowercase", "tokenizer"}.

vocab_config.json format
  1  the WordPiece settings, size, sha256, special_tokens
  2  + tokenizer (wordpiece | bpe | unigram) and word_boundary ({"mark": "##" | "Ġ" | "▁", "marks": "continuation" |
     "word_start"}); the settings are that kind's. A directory without `tokenizer` is a WordPiece one.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping
from typing import Any

from pipelines.outputs.atomic import put_atomically
from schemas.tokenizer_formats import TokenizerFormat
from schemas.vocab import CONFIG_FILE, VOCAB_FILE, encode_tokens

FORMAT_VERSION = 2
RECORD_KEYS = ("format_version", "tokenizer", "size", "sha256", "special_tokens", "word_boundary")
"""Keys of vocab_config.json that record the result rather than the settings it was learned with."""


def check_tokens(tokens: list[str], kind: TokenizerFormat) -> dict[str, int]:
    """The special tokens' ids, once `tokens` is found fit for vocab.txt: each special token present, every token
    distinct, non-empty, without line breaks or edge whitespace; else a ValueError saying which."""
    ids = kind.special_ids(tokens)
    bad = [t for t in tokens if not t or t != t.strip() or any(c in t for c in "\n\r")]
    if bad:
        raise ValueError(f"tokens must be non-empty, without line breaks or edge whitespace: {bad[:5]}")
    if len(set(tokens)) != len(tokens):
        seen: set[str] = set()
        twice = [t for t in tokens if t in seen or seen.add(t)]
        raise ValueError(f"tokens must be distinct, found again: {twice[:5]}")
    return ids


def write_directory(directory: str, tokens: list[str], files: Mapping[str, str], kind: TokenizerFormat,
                    settings: Mapping[str, Any], *, lowercase: bool = False) -> dict[str, Any]:
    """Write the vocabulary directory (see the module docstring); returns its summary."""
    ids = check_tokens(tokens, kind)
    vocab_bytes = encode_tokens(tokens)
    sha256 = hashlib.sha256(vocab_bytes).hexdigest()
    record = {"format_version": FORMAT_VERSION, "tokenizer": kind.name, **settings, "size": len(tokens), "sha256": sha256,
              "special_tokens": ids, "word_boundary": kind.boundary.to_dict()}
    out = {VOCAB_FILE: vocab_bytes, **{name: text.encode("utf-8") for name, text in files.items()},
           CONFIG_FILE: (json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")}
    for name, data in out.items():
        put_atomically(posixpath.join(directory, name), data)
    return {"file": VOCAB_FILE, "sha256": sha256, "size": len(tokens), "lowercase": lowercase, "tokenizer": kind.name}
