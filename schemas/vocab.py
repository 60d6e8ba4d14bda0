"""The vocabulary directory: what prep writes under vocab/, and what the trainer, export and tokenize read.

Files, by name inside the directory (any fsspec URL):
  vocab.txt              one token per line, line number = id (BERT's format), UTF-8
  tokenizer.json         the same vocabulary as a `tokenizers` pipeline (normalizer, pre-tokenizer, model)
  tokenizer_config.json  what transformers' AutoTokenizer reads beside tokenizer.json
  vocab.json, merges.txt byte-level BPE only (RoBERTa's files, schemas/hf_tokenizers.py)
  vocab_config.json      how it was built (tokenizer kind, settings, sizes), its size, sha256, special-token ids and
                         word boundary mark (schemas/tokenizer_formats.py)
  token_counts.txt       (prep's Finalize) how often each id occurs in the encoded corpus, one count a line

Which kind a directory holds (wordpiece, bpe, unigram) and its special tokens are schemas/tokenizer_formats.py's; this
module reads and writes the files every kind shares, and BERT's tokenizer.json.

vocab.txt is parsed one way everywhere (`parse_tokens`): lines end at "\\n" only and lose trailing white
space, the way `tokenizers` reads the file (Rust's `lines()` then `trim_end()`), so a token holding another
Unicode line separator stays one token. A manifest names vocab.txt with its sha256 and size; `read_tokens`
checks both before anything uses the tokens, and `copy_directory` checks them before it copies anything. A directory
transformers 5 saved holds no vocab.txt: `read_tokens` then reads the tokens (and takes the sha256) of what vocab.txt
would hold, from tokenizer.json.

tokenizer.json and tokenizer_config.json are written by one function each (`tokenizer_json`,
`tokenizer_config_json`) from the tokens and the normalization: prep's vocabulary files and export's
HuggingFace directory are the same bytes for the same vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping
from typing import Any

from schemas.errors import ContractError
from schemas.jsonl import file_object

VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CONFIG_FILE = "vocab_config.json"
TOKEN_COUNTS_FILE = "token_counts.txt"
BPE_VOCAB_FILE = "vocab.json"
MERGES_FILE = "merges.txt"
FILES = (VOCAB_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, CONFIG_FILE, TOKEN_COUNTS_FILE, BPE_VOCAB_FILE, MERGES_FILE)
"""Every file a vocabulary directory may hold; vocab.txt or tokenizer.json is required."""
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""The special tokens every vocabulary holds (their ids vary: see `special_token_ids`)."""
SPECIAL_TOKEN_ROLES = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}
"""transformers' name for each special token (tokenizer_config.json, special_tokens_map.json)."""
CONTINUATION = "##"
"""Prefix of a word piece that continues a word."""


def _join(directory: str, name: str) -> str:
    return posixpath.join(directory.rstrip("/"), name)


def _read_bytes(url: str) -> bytes:
    import fsspec  # NOTE: imported where I/O happens, so importing schemas needs only pyarrow + stdlib

    with fsspec.open(url, "rb") as f:
        return f.read()


def encode_tokens(tokens: list[str]) -> bytes:
    """vocab.txt's bytes for `tokens` (what its sha256 is taken over)."""
    return "".join(t + "\n" for t in tokens).encode("utf-8")


def parse_tokens(data: bytes, url: str = VOCAB_FILE) -> list[str]:
    """The tokens of vocab.txt's bytes, index = id (see the module docstring for the rule)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ContractError(f"{url}: not UTF-8 ({e.reason} at byte {e.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip() for line in lines]


def read_tokens(directory: str, *, sha256: str | None = None, size: int | None = None) -> list[str]:
    """The tokens of `directory`/vocab.txt (else of its tokenizer.json, as vocab.txt would hold them); with `sha256`
    and `size` (a manifest's record), checked against them."""
    url = _join(directory, VOCAB_FILE)
    try:
        data = _read_bytes(url)
    except FileNotFoundError:
        from schemas.tokenizer_formats import read_json, tokens_of_tokenizer_json

        url = _join(directory, TOKENIZER_FILE)
        try:
            body = read_json(url)
        except ValueError as e:
            raise ContractError(str(e)) from None
        if body is None:
            raise ContractError(f"{directory.rstrip('/')}: no vocabulary here: no {VOCAB_FILE} nor {TOKENIZER_FILE} (expected the "
                                "vocab/ directory of a prep run, or a tokenizer directory transformers saved)") from None
        try:
            data = encode_tokens(tokens_of_tokenizer_json(body, url))
        except ValueError as e:
            raise ContractError(str(e)) from None
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise ContractError(f"{url}: sha256 differs from the manifest's (the vocabulary changed after prep)")
    tokens = parse_tokens(data, url)
    if size is not None and len(tokens) != size:
        raise ContractError(f"{url}: {len(tokens)} tokens, the manifest says {size}")
    return tokens


def special_token_ids(tokens: list[str]) -> dict[str, int]:
    """{"[PAD]": id, "[UNK]": id, ...} for the five special tokens; a missing one is a ContractError."""
    index = {t: i for i, t in enumerate(tokens)}
    missing = [t for t in SPECIAL_TOKENS if t not in index]
    if missing:
        raise ContractError(f"vocabulary lacks special tokens {missing}")
    return {t: index[t] for t in SPECIAL_TOKENS}


def read_config(directory: str) -> dict[str, Any] | None:
    """The body of `directory`/vocab_config.json, or None when the directory has none."""
    url = _join(directory, CONFIG_FILE)
    try:
        raw = _read_bytes(url)
    except FileNotFoundError:
        return None
    return file_object(raw, url, ContractError)


def read_token_counts(url: str, size: int) -> list[int]:
    """The counts of token_counts.txt at `url`: one non-negative integer a line, `size` of them."""
    try:
        lines = _read_bytes(url).decode("utf-8").split()
        counts = [int(line) for line in lines]
    except FileNotFoundError:
        raise ContractError(f"{url}: the token counts named by the manifest are missing") from None
    except (ValueError, UnicodeDecodeError):
        raise ContractError(f"{url}: not one integer count a line") from None
    if len(counts) != size or any(c < 0 for c in counts):
        raise ContractError(f"{url}: {len(counts)} counts for a vocabulary of {size} (or a negative count)")
    return counts


def copy_directory(source: str, destination: str, *, sha256: str | None = None, size: int | None = None) -> list[str]:
    """Copy the vocabulary files of `source` that exist into `destination`; returns the tokens.

    vocab.txt is read and checked (against `sha256` and `size` when given) before anything is written."""
    import fsspec

    tokens = read_tokens(source, sha256=sha256, size=size)
    fs, root = fsspec.core.url_to_fs(destination)
    fs.makedirs(root, exist_ok=True)
    for name in FILES:
        try:
            data = _read_bytes(_join(source, name))
        except FileNotFoundError:
            continue
        tmp = posixpath.join(root, f"{name}.tmp")
        with fs.open(tmp, "wb") as f:
            f.write(data)
        fs.mv(tmp, posixpath.join(root, name))
    return tokens


NORMALIZATION = {"lowercase": True, "strip_accents": None, "handle_chinese_chars": True, "max_input_chars_per_word": 100}
"""The keys of vocab_config.json that say how text is normalized and split, with BERT's defaults."""


def normalization_of(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The normalization keys of a vocab_config.json body (or a VocabConfig's dict), defaults filled in."""
    return {key: settings.get(key, default) for key, default in NORMALIZATION.items()}


TOKENIZER_CONFIG_KEYS = {"do_lower_case": ("lowercase", True), "strip_accents": ("strip_accents", None),
                         "tokenize_chinese_chars": ("handle_chinese_chars", True)}
"""tokenizer_config.json's normalization keys (transformers' BertTokenizer arguments): ours, and transformers' default
when the file leaves one out (which then overrides tokenizer.json's: transformers 5 does so)."""


def tokenizer_json_settings(directory: str) -> dict[str, Any]:
    """The normalization and size of a HuggingFace BERT directory (which has no vocab_config.json): its tokenizer.json's
    BertNormalizer and WordPiece, then tokenizer_config.json's do_lower_case / strip_accents / tokenize_chinese_chars
    (or transformers' defaults for those it leaves out) over them, as AutoTokenizer applies them (checked against
    transformers 5.24: tests/pipelines/test_vocab_from_hf.py); the size is vocab.txt's without a tokenizer.json.
    FileNotFoundError with neither file; ValueError when tokenizer.json is not a BERT WordPiece."""
    url = _join(directory, TOKENIZER_FILE)
    settings: dict[str, Any] = {}
    try:
        body = file_object(_read_bytes(url), url)
    except FileNotFoundError:
        body = None
    if body is not None:
        normalizer, model = body.get("normalizer") or {}, body.get("model") or {}
        if normalizer.get("type") != "BertNormalizer" or model.get("type") != "WordPiece":
            found = f"normalizer {normalizer.get('type')}, model {model.get('type')}"
            raise ValueError(f"{url}: not a BERT WordPiece tokenizer ({found})")
        settings = {"vocab_size": len(model.get("vocab", {})), **normalization_of({**normalizer, **model})}
    config_url = _join(directory, TOKENIZER_CONFIG_FILE)
    try:
        config = file_object(_read_bytes(config_url), config_url)
    except FileNotFoundError:
        config = None
    if body is None and config is None:
        expected = "expected a vocab/ directory written by prep, or a HuggingFace BERT's"
        raise FileNotFoundError(f"{_join(directory, CONFIG_FILE)}: not found, nor {TOKENIZER_FILE} or {TOKENIZER_CONFIG_FILE} ({expected})")
    if config is not None:
        if not str(config.get("tokenizer_class") or "BertTokenizer").startswith("BertTokenizer"):
            raise ValueError(f"{config_url}: tokenizer_class {config['tokenizer_class']!r} is not a BERT WordPiece tokenizer")
        settings = {**normalization_of(settings), **settings}
        settings.update({ours: config.get(theirs, default) for theirs, (ours, default) in TOKENIZER_CONFIG_KEYS.items()})
        if "vocab_size" not in settings:
            settings["vocab_size"] = len(read_tokens(directory))
    return settings


def tokenizer_json(tokens: list[str], normalization: Mapping[str, Any]) -> str:
    """The `tokenizers` serialization of this vocabulary and normalization (what BertWordPieceTokenizer saves):
    BertNormalizer, BertPreTokenizer, WordPiece, and the post-processor [CLS] A [SEP] B [SEP]."""
    norm, ids = normalization_of(normalization), special_token_ids(tokens)
    added = [
        {"id": ids[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for t in sorted(SPECIAL_TOKENS, key=ids.__getitem__)
    ]

    def special(name: str, type_id: int) -> dict:
        return {"SpecialToken": {"id": name, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    cls, sep, unk = SPECIAL_TOKEN_ROLES["cls_token"], SPECIAL_TOKEN_ROLES["sep_token"], SPECIAL_TOKEN_ROLES["unk_token"]
    body = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": norm["handle_chinese_chars"],
            "strip_accents": norm["strip_accents"],
            "lowercase": norm["lowercase"],
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(cls, 0), sequence("A", 0), special(sep, 0)],
            "pair": [special(cls, 0), sequence("A", 0), special(sep, 0), sequence("B", 1), special(sep, 1)],
            "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (cls, sep)},
        },
        "decoder": {"type": "WordPiece", "prefix": CONTINUATION, "cleanup": True},
        "model": {
            "type": "WordPiece",
            "unk_token": unk,
            "continuing_subword_prefix": CONTINUATION,
            "max_input_chars_per_word": norm["max_input_chars_per_word"],
            "vocab": {t: i for i, t in enumerate(tokens)},
        },
    }
    return json.dumps(body, ensure_ascii=False, indent=1) + "\n"


def tokenizer_config_json(normalization: Mapping[str, Any], **extra: Any) -> str:
    """What transformers' AutoTokenizer reads beside tokenizer.json (a BertTokenizer), plus `extra` keys."""
    norm = normalization_of(normalization)
    body = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": norm["lowercase"],
        "strip_accents": norm["strip_accents"],
        "tokenize_chinese_chars": norm["handle_chinese_chars"],
        **SPECIAL_TOKEN_ROLES,
        **extra,
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"
