"""RoBERTa's and XLM-R's tokenizer files, as transformers 5 loads them (RobertaTokenizerFast, XLMRobertaTokenizerFast).

In:  a byte-level BPE (tokens in id order, merges) or a Unigram model (pieces and scores in id order, the normalizer's
     charsmap), plus the added tokens' attributes and add_prefix_space.
Out: tokenizer.json, tokenizer_config.json (and vocab.json + merges.txt for BPE) as text; `read_bpe` / `read_unigram`
     read those parts back from any directory AutoTokenizer loads as one of the two classes.

What AutoTokenizer keeps of a tokenizer.json for these classes (transformers 5.24: RobertaTokenizer and
XLMRobertaTokenizer rebuild their pipeline in __init__, tests/pipelines/test_vocab_kinds.py checks it): the model's
vocabulary and merges, the added tokens with their attributes, and for XLM-R the charsmap of a Precompiled normalizer.
The class builds the rest: RoBERTa no normalizer, ByteLevel(add_prefix_space) pre-tokenizer, a BPE without unknown token
or subword prefix; XLM-R WhitespaceSplit + Metaspace('▁', prepend 'always' unless add_prefix_space is false), a Unigram
with unk_id 3 and no byte fallback. The files written here hold exactly that pipeline, so `tokenizers` encoding them
gives AutoTokenizer's ids, and a directory read back is written again the same way: its normalizer (a lowercasing, say)
is dropped because AutoTokenizer drops it too.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import Any

from schemas.tokenizer_formats import (
    BPE,
    UNIGRAM,
    TokenizerFormat,
    read_json,
    tokens_of_tokenizer_json,
)

MERGES_HEADER = "#version: 0.2"
"""First line of merges.txt, as GPT-2's and `tokenizers`' files have it."""
UNIGRAM_UNK_ID = 3
"""XLMRobertaTokenizer's unk_id (fixed in transformers 5's class, whatever the vocabulary says)."""


def added_tokens(tokens: list[str], kind: TokenizerFormat, lstrip: tuple[str, ...] = ("<mask>",)) -> tuple[dict, ...]:
    """tokenizer.json's added_tokens for a kind's special tokens: special, not normalized; those in `lstrip` take the
    white space before them (roberta-base's and xlm-roberta-base's <mask>: "a <mask>" masks the word with its space)."""
    ids = kind.special_ids(tokens)
    return tuple({"id": ids[t], "content": t, "single_word": False, "lstrip": t in lstrip, "rstrip": False,
                  "normalized": False, "special": True} for t in sorted(ids, key=ids.__getitem__))


@dataclasses.dataclass(frozen=True)
class ByteLevelBpe:
    tokens: tuple[str, ...]
    """Every token, index = id, special ones included."""
    merges: tuple[tuple[str, str], ...]
    """In rank order: the first merge applies first."""
    added: tuple[dict, ...]
    """tokenizer.json's added_tokens entries."""
    add_prefix_space: bool = False
    """RoBERTa's default: no space before the first word (so it has no 'Ġ')."""

    def tokenizer_json(self) -> str:
        ids = {t["content"]: t["id"] for t in self.added}
        body = {
            "version": "1.0", "truncation": None, "padding": None,
            "added_tokens": list(self.added),
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": self.add_prefix_space, "trim_offsets": True, "use_regex": True},
            "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", ids["</s>"]], "cls": ["<s>", ids["<s>"]],
                               "trim_offsets": True, "add_prefix_space": self.add_prefix_space},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(self.tokens)}, "merges": [list(m) for m in self.merges]},
        }
        return json.dumps(body, ensure_ascii=False, indent=1) + "\n"

    def vocab_json(self) -> str:
        return json.dumps({t: i for i, t in enumerate(self.tokens)}, ensure_ascii=False) + "\n"

    def merges_txt(self) -> str:
        return MERGES_HEADER + "\n" + "".join(f"{a} {b}\n" for a, b in self.merges)

    def tokenizer_config_json(self, **extra: Any) -> str:
        return _config(BPE, add_prefix_space=self.add_prefix_space, trim_offsets=True, errors="replace", **extra)


@dataclasses.dataclass(frozen=True)
class UnigramModel:
    pieces: tuple[tuple[str, float], ...]
    """Every piece with its log probability, index = id, special ones included (score 0.0, as XLM-R's)."""
    added: tuple[dict, ...]
    charsmap: str | None
    """The normalizer: SentencePiece's precompiled charsmap, base64 (None: no normalization)."""
    add_prefix_space: bool = True
    """XLM-R's default: every word, the first too, starts with '▁'."""

    @property
    def tokens(self) -> tuple[str, ...]:
        return tuple(p for p, _ in self.pieces)

    def tokenizer_json(self) -> str:
        ids = {t["content"]: t["id"] for t in self.added}
        scheme = "always" if self.add_prefix_space else "never"

        def special(name: str) -> dict:
            return {"SpecialToken": {"id": name, "type_id": 0}}

        sequence = {"Sequence": {"id": "A", "type_id": 0}}
        body = {
            "version": "1.0", "truncation": None, "padding": None,
            "added_tokens": list(self.added),
            "normalizer": None if self.charsmap is None else {"type": "Precompiled", "precompiled_charsmap": self.charsmap},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": True}]},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [special("<s>"), sequence, special("</s>")],
                "pair": [special("<s>"), sequence, special("</s>"), special("</s>"), {"Sequence": {"id": "B", "type_id": 0}},
                         special("</s>")],
                "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in ("</s>", "<s>")},
            },
            "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": True},
            "model": {"type": "Unigram", "unk_id": UNIGRAM_UNK_ID, "vocab": [[p, s] for p, s in self.pieces], "byte_fallback": False},
        }
        return json.dumps(body, ensure_ascii=False, indent=1) + "\n"

    def tokenizer_config_json(self, **extra: Any) -> str:
        return _config(UNIGRAM, add_prefix_space=self.add_prefix_space, **extra)


def _config(kind: TokenizerFormat, **settings: Any) -> str:
    body = {"tokenizer_class": kind.tokenizer_class, **kind.roles, **settings}
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


# -- reading a directory ---------------------------------------------------------------------------------------


def _join(directory: str, name: str) -> str:
    return posixpath.join(directory.rstrip("/"), name)


def _settings(directory: str, kind: TokenizerFormat) -> dict[str, Any]:
    """tokenizer_config.json's body, its special tokens checked to be the kind's (content of an AddedToken dict too)."""
    url = _join(directory, "tokenizer_config.json")
    config = read_json(url) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{url}: expected a JSON object")
    for role, token in kind.roles.items():
        value = config.get(role, token)
        value = value.get("content") if isinstance(value, dict) else value
        if value != token:
            expected = " ".join(kind.special_tokens)
            raise ValueError(f"{url}: {role} {value!r}: clozeforge's {kind.name} vocabularies have {expected}, as "
                             f"{kind.tokenizer_class}'s defaults")
    return config


def _added(body: dict, tokens: list[str], kind: TokenizerFormat) -> tuple[dict, ...]:
    keys = ("id", "content", "single_word", "lstrip", "rstrip", "normalized", "special")
    added = {t["id"]: {k: t.get(k, False) for k in keys} for t in body.get("added_tokens") or [] if isinstance(t, dict)}
    for entry in added_tokens(tokens, kind, lstrip=()):  # a special token the file does not list: AutoTokenizer adds it
        added.setdefault(entry["id"], entry)
    return tuple(added[i] for i in sorted(added))


def read_bpe(directory: str) -> ByteLevelBpe:
    """The byte-level BPE of a RoBERTa tokenizer directory (tokenizer.json, else vocab.json + merges.txt)."""
    settings = _settings(directory, BPE)
    url = _join(directory, "tokenizer.json")
    body = read_json(url)
    if body is None:
        vocab_url = _join(directory, "vocab.json")
        vocab = read_json(vocab_url)
        if not isinstance(vocab, dict):
            raise ValueError(f"{directory}: neither tokenizer.json nor vocab.json (a RoBERTa tokenizer has one)")
        from schemas.vocab import _read_bytes

        lines = _read_bytes(_join(directory, "merges.txt")).decode("utf-8").split("\n")
        merges = [line.split(" ") for line in lines if line and not line.startswith("#version")]
        body = {"model": {"type": "BPE", "vocab": vocab, "merges": merges}, "added_tokens": []}
        url = vocab_url
    model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE":
        raise ValueError(f"{url}: not a BPE tokenizer (model {model.get('type') if isinstance(model, dict) else None})")
    tokens = tokens_of_tokenizer_json(body, url)
    merges = tuple(tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges") or [])
    if any(len(m) != 2 for m in merges):
        raise ValueError(f"{url}: a merge that is not two tokens")
    BPE.special_ids(tokens)
    return ByteLevelBpe(tokens=tuple(tokens), merges=merges, added=_added(body, tokens, BPE),
                        add_prefix_space=bool(settings.get("add_prefix_space", False)))


def read_unigram(directory: str) -> UnigramModel:
    """The Unigram model of an XLM-R tokenizer directory (its tokenizer.json: a sentencepiece.bpe.model alone is not read)."""
    settings = _settings(directory, UNIGRAM)
    url = _join(directory, "tokenizer.json")
    body = read_json(url)
    if body is None:
        raise ValueError(f"{url}: not found (clozeforge reads an XLM-R tokenizer from its tokenizer.json, which transformers "
                         "writes with save_pretrained; a sentencepiece.bpe.model alone is not read)")
    model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(model, dict) or model.get("type") != "Unigram":
        raise ValueError(f"{url}: not a Unigram tokenizer (model {model.get('type') if isinstance(model, dict) else None})")
    vocab = model.get("vocab")
    if not isinstance(vocab, list) or not all(isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
                                               and isinstance(v[1], (int, float)) for v in vocab):
        raise ValueError(f"{url}: model.vocab is not a list of [piece, score]")
    tokens = tokens_of_tokenizer_json(body, url)
    if len(tokens) != len(vocab):
        raise ValueError(f"{url}: added tokens beyond the Unigram vocabulary are not read")
    UNIGRAM.special_ids(tokens)
    normalizer = body.get("normalizer") or {}
    parts = normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else [normalizer]
    charsmaps = [p.get("precompiled_charsmap") for p in parts if isinstance(p, dict) and p.get("type") == "Precompiled"]
    return UnigramModel(pieces=tuple((p, float(s)) for p, s in vocab), added=_added(body, tokens, UNIGRAM),
                        charsmap=charsmaps[0] if charsmaps else None,
                        add_prefix_space=bool(settings.get("add_prefix_space", True)))
