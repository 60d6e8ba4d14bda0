"""The vocabulary a manifest points at: its tokens, its corpus token counts, and a local copy for a run.

In:  a Manifest (its `vocab` entry names vocab.txt relative to the manifest and the sha256 it must have).
Out: the token list (checked against the sha256), the unigram counts as a numpy array, a copied directory.
"""

from __future__ import annotations

import hashlib
import os
import posixpath

import fsspec
import numpy as np

from schemas import ContractError, Manifest

_FILES = ("vocab.txt", "tokenizer.json", "vocab_config.json", "token_counts.txt")


def read_vocab_tokens(manifest: Manifest) -> list[str]:
    url = manifest.resolve(manifest.vocab["file"])
    try:
        with fsspec.open(url, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ContractError(f"{url}: the vocabulary named by the manifest is missing") from None
    if hashlib.sha256(data).hexdigest() != manifest.vocab["sha256"]:
        raise ContractError(f"{url}: sha256 differs from the manifest's (the vocabulary changed after prep)")
    tokens = data.decode("utf-8").splitlines()
    if len(tokens) != manifest.vocab["size"]:
        raise ContractError(f"{url}: {len(tokens)} tokens, the manifest says {manifest.vocab['size']}")
    return tokens


def read_token_counts(manifest: Manifest) -> np.ndarray:
    name = manifest.vocab.get("token_counts")
    if not name:
        raise ContractError(f"{manifest.url}: no token_counts file recorded; use --random-token-dist uniform")
    with fsspec.open(manifest.resolve(name), "r") as f:
        counts = np.array([int(line) for line in f if line.strip()], dtype=np.int64)
    if counts.shape != (manifest.vocab["size"],):
        raise ContractError(f"{manifest.resolve(name)}: {counts.size} counts for a vocabulary of {manifest.vocab['size']}")
    return counts


def copy_vocab(manifest: Manifest, directory: str) -> None:
    """Copy the vocabulary files beside vocab.txt into `directory` (local), those that exist."""
    os.makedirs(directory, exist_ok=True)
    source = posixpath.dirname(manifest.resolve(manifest.vocab["file"]))
    for name in _FILES:
        try:
            with fsspec.open(posixpath.join(source, name), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        with open(os.path.join(directory, name), "wb") as g:
            g.write(data)
