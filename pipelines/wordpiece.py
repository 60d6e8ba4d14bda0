"""WordPiece for clozeforge: the public import point, and the vocabulary directory's files.

In:  word counts (from `basic_words` over the corpus) and a VocabConfig.
Out: a vocabulary directory (any fsspec URL) holding
       vocab.txt           one token per line, line number = id (BERT's format);
       tokenizer.json      the same vocabulary as a `tokenizers` pipeline (BertNormalizer, BertPreTokenizer,
                           WordPiece, post-processor [CLS] A [SEP] B [SEP]): loads in `tokenizers.Tokenizer`
                           and in `transformers.BertTokenizerFast(tokenizer_file=...)`;
       tokenizer_config.json  what `transformers.AutoTokenizer.from_pretrained(dir)` needs beside it;
       vocab_config.json   the VocabConfig it was built with, its size, sha256 and special-token ids;
       (prep's Finalize adds token_counts.txt: how often each id occurs in the encoded corpus, one count a
       line, which the trainer's unigram sampling of random replacement tokens reads.)

Learning lives in wordpiece_learn.py, encoding in wordpiece_encode.py, BERT's character classes in
wordpiece_unicode.py; import everything from here.
"""

from __future__ import annotations

import hashlib
import json
import posixpath

import fsspec

from pipelines.wordpiece_encode import (
    CONFIG_FILE,
    DEFAULT_CACHE_SIZE,
    TOKENIZER_FILE,
    VOCAB_FILE,
    WordPieceEncoder,
    read_vocab_config,
    read_vocab_tokens,
)
from pipelines.wordpiece_learn import CONTINUATION, SPECIAL_TOKENS, VocabConfig, learn_wordpiece, special_token_layout
from pipelines.wordpiece_unicode import basic_words, normalize

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "SPECIAL_TOKENS",
    "VocabConfig",
    "WordPieceEncoder",
    "basic_words",
    "learn_wordpiece",
    "normalize",
    "read_vocab_config",
    "read_vocab_tokens",
    "special_token_layout",
    "tokenizer_json",
    "write_vocab",
]

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
FORMAT_VERSION = 1


def special_token_ids(tokens: list[str]) -> dict[str, int]:
    """{"[PAD]": id, "[UNK]": id, ...} for the five special tokens; a missing one is an error."""
    index = {t: i for i, t in enumerate(tokens)}
    missing = [t for t in SPECIAL_TOKENS if t not in index]
    if missing:
        raise ValueError(f"vocabulary lacks special tokens {missing}")
    return {t: index[t] for t in SPECIAL_TOKENS}


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


def _write_atomic(fs, path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with fs.open(tmp, "wb") as f:
        f.write(data)
    fs.mv(tmp, path)


def write_vocab(directory: str, tokens: list[str], config: VocabConfig) -> dict:
    """Write the vocabulary directory (see the module docstring); returns the manifest's `vocab` entry.

    {"file": "vocab.txt", "sha256": hex digest of vocab.txt's bytes, "size": len(tokens), "lowercase": bool}
    Each file goes to a temporary name first, then is renamed, so a retried writer never leaves half a file.
    """
    ids = special_token_ids(tokens)
    bad = [t for t in tokens if not t or t != t.strip() or any(c in t for c in "\n\r")]
    if bad or len(set(tokens)) != len(tokens):
        raise ValueError(f"tokens must be distinct, non-empty, without line breaks or edge whitespace: {bad[:5]}")
    vocab_bytes = "".join(t + "\n" for t in tokens).encode("utf-8")
    sha256 = hashlib.sha256(vocab_bytes).hexdigest()
    record = {"format_version": FORMAT_VERSION, **config.to_dict(), "size": len(tokens), "sha256": sha256, "special_tokens": ids}

    fs, root = fsspec.core.url_to_fs(directory)
    fs.makedirs(root, exist_ok=True)
    files = {
        VOCAB_FILE: vocab_bytes,
        TOKENIZER_FILE: tokenizer_json(tokens, config).encode("utf-8"),
        TOKENIZER_CONFIG_FILE: _transformers_config(config).encode("utf-8"),
        CONFIG_FILE: (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8"),
    }
    for name, data in files.items():
        _write_atomic(fs, posixpath.join(root, name), data)
    return {"file": VOCAB_FILE, "sha256": sha256, "size": len(tokens), "lowercase": config.lowercase}
