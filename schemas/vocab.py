"""The vocabulary directory: what prep writes under vocab/, and what the trainer, export and tokenize read.

Files, by name inside the directory (any fsspec URL):
  vocab.txt              one token per line, line number = id (BERT's format), UTF-8
  tokenizer.json         the same vocabulary as a `tokenizers` pipeline (normalizer, pre-tokenizer, WordPiece)
  tokenizer_config.json  what transformers' AutoTokenizer reads beside tokenizer.json
  vocab_config.json      how it was built (normalization flags, sizes), its size, sha256 and special-token ids
  token_counts.txt       (prep's Finalize) how often each id occurs in the encoded corpus, one count a line

vocab.txt is parsed one way everywhere (`parse_tokens`): lines end at "\\n" only and lose trailing white
space, the way `tokenizers` reads the file (Rust's `lines()` then `trim_end()`), so a token holding another
Unicode line separator stays one token. A manifest names vocab.txt with its sha256 and size; `read_tokens`
checks both before anything uses the tokens, and `copy_directory` checks them before it copies anything.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from typing import Any

from schemas.errors import ContractError

VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CONFIG_FILE = "vocab_config.json"
TOKEN_COUNTS_FILE = "token_counts.txt"
FILES = (VOCAB_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, CONFIG_FILE, TOKEN_COUNTS_FILE)
"""Every file a vocabulary directory may hold; vocab.txt is the only one required."""
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""The special tokens every vocabulary holds (their ids vary: see `special_token_ids`)."""
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
    """The tokens of `directory`/vocab.txt; with `sha256` and `size` (a manifest's record), checked against them."""
    url = _join(directory, VOCAB_FILE)
    try:
        data = _read_bytes(url)
    except FileNotFoundError:
        raise ContractError(f"{url}: no vocabulary here (expected a vocab/ directory written by prep)") from None
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
        body = json.loads(_read_bytes(url))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as e:
        raise ContractError(f"{url}: not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise ContractError(f"{url}: expected a JSON object, got {type(body).__name__}")
    return body


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
