"""The vocabulary directory's files (schemas/vocab.py), written from a token list and read back as a VocabConfig.

In:  the learned tokens and the VocabConfig they were learned with.
Out: `write_vocab` writes vocab.txt, tokenizer.json (loads in `tokenizers.Tokenizer` and in transformers'
     `BertTokenizerFast(tokenizer_file=...)`: BertNormalizer, BertPreTokenizer, WordPiece, post-processor
     [CLS] A [SEP] B [SEP]), tokenizer_config.json (what `AutoTokenizer.from_pretrained(dir)` needs beside it)
     and vocab_config.json, each renamed into place once whole; `read_vocab_config` reads the VocabConfig
     back (from a HuggingFace BERT's tokenizer.json when there is no vocab_config.json).
"""

from __future__ import annotations

import hashlib
import json
import posixpath

import fsspec

from pipelines.outputs.atomic import put_atomically
from pipelines.wordpiece.config import VocabConfig
from schemas import vocab as vocab_files
from schemas.vocab import CONFIG_FILE, CONTINUATION, SPECIAL_TOKENS, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE, VOCAB_FILE, special_token_ids

FORMAT_VERSION = 1
CONFIG_RECORD_KEYS = ("format_version", "size", "sha256", "special_tokens")
"""Keys of vocab_config.json that record the result rather than configure the build."""


def read_vocab_config(directory: str) -> VocabConfig:
    """The VocabConfig recorded in `directory`/vocab_config.json.

    A directory without one but with a BERT tokenizer.json (a HuggingFace BERT checkpoint's, say) gives the
    normalization recorded there, so its vocabulary can be reused as is.
    """
    body = vocab_files.read_config(directory)
    if body is None:
        return _config_from_tokenizer_json(directory.rstrip("/"))
    return VocabConfig.from_dict({k: v for k, v in body.items() if k not in CONFIG_RECORD_KEYS})


def _config_from_tokenizer_json(root: str) -> VocabConfig:
    url = posixpath.join(root, TOKENIZER_FILE)
    try:
        with fsspec.open(url, "r", encoding="utf-8") as f:
            body = json.load(f)
    except FileNotFoundError:
        expected = "expected a vocab/ directory written by prep"
        raise FileNotFoundError(f"{posixpath.join(root, CONFIG_FILE)}: not found, nor {TOKENIZER_FILE} ({expected})") from None
    normalizer, model = body.get("normalizer") or {}, body.get("model") or {}
    if normalizer.get("type") != "BertNormalizer" or model.get("type") != "WordPiece":
        found = f"normalizer {normalizer.get('type')}, model {model.get('type')}"
        raise ValueError(f"{url}: not a BERT WordPiece tokenizer ({found})")
    return VocabConfig(
        vocab_size=len(model.get("vocab", {})),
        lowercase=normalizer.get("lowercase", True),
        strip_accents=normalizer.get("strip_accents"),
        handle_chinese_chars=normalizer.get("handle_chinese_chars", True),
        max_input_chars_per_word=model.get("max_input_chars_per_word", 100),
    )


def tokenizer_json(tokens: list[str], config: VocabConfig) -> str:
    """The `tokenizers` serialization of this vocabulary and normalization (what BertWordPieceTokenizer saves)."""
    ids = special_token_ids(tokens)
    added = [
        {"id": ids[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for t in sorted(SPECIAL_TOKENS, key=ids.__getitem__)
    ]

    def special(name: str, type_id: int) -> dict:
        return {"SpecialToken": {"id": name, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    body = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": config.handle_chinese_chars,
            "strip_accents": config.strip_accents,
            "lowercase": config.lowercase,
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0)],
            "pair": [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0), sequence("B", 1), special("[SEP]", 1)],
            "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in ("[CLS]", "[SEP]")},
        },
        "decoder": {"type": "WordPiece", "prefix": CONTINUATION, "cleanup": True},
        "model": {
            "type": "WordPiece",
            "unk_token": "[UNK]",
            "continuing_subword_prefix": CONTINUATION,
            "max_input_chars_per_word": config.max_input_chars_per_word,
            "vocab": {t: i for i, t in enumerate(tokens)},
        },
    }
    return json.dumps(body, ensure_ascii=False, indent=1) + "\n"


def _transformers_config(config: VocabConfig) -> str:
    body = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": config.lowercase,
        "strip_accents": config.strip_accents,
        "tokenize_chinese_chars": config.handle_chinese_chars,
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def check_tokens(tokens: list[str]) -> dict[str, int]:
    """The special tokens' ids, once `tokens` is found fit for a vocabulary: each special token present, every
    token distinct, non-empty, without line breaks or edge whitespace; else a ValueError saying which."""
    ids = special_token_ids(tokens)
    bad = [t for t in tokens if not t or t != t.strip() or any(c in t for c in "\n\r")]
    if bad:
        raise ValueError(f"tokens must be non-empty, without line breaks or edge whitespace: {bad[:5]}")
    if len(set(tokens)) != len(tokens):
        seen: set[str] = set()
        twice = [t for t in tokens if t in seen or seen.add(t)]
        raise ValueError(f"tokens must be distinct, found again: {twice[:5]}")
    return ids


def write_vocab(directory: str, tokens: list[str], config: VocabConfig) -> dict:
    """Write the vocabulary directory (see the module docstring); returns the manifest's `vocab` entry.

    {"file": "vocab.txt", "sha256": hex digest of vocab.txt's bytes, "size": len(tokens), "lowercase": bool}
    Each file goes to a temporary name first, then is renamed, so a retried writer never leaves half a file.
    """
    ids = check_tokens(tokens)
    vocab_bytes = vocab_files.encode_tokens(tokens)
    sha256 = hashlib.sha256(vocab_bytes).hexdigest()
    record = {"format_version": FORMAT_VERSION, **config.to_dict(), "size": len(tokens), "sha256": sha256, "special_tokens": ids}

    files = {
        VOCAB_FILE: vocab_bytes,
        TOKENIZER_FILE: tokenizer_json(tokens, config).encode("utf-8"),
        TOKENIZER_CONFIG_FILE: _transformers_config(config).encode("utf-8"),
        CONFIG_FILE: (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8"),
    }
    for name, data in files.items():
        put_atomically(posixpath.join(directory, name), data)
    return {"file": VOCAB_FILE, "sha256": sha256, "size": len(tokens), "lowercase": config.lowercase}
