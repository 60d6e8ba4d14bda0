"""Gopher's repetition rules (Rae et al. 2021, Table A1): duplicate lines and paragraphs, the most frequent
n-grams and all repeated n-grams, as shares of the document. The repeated-n-gram rule counts every
occurrence of a repeated n-gram, as the paper and RedPajama-V2's `frac_chars_dupe_ngrams` do, where
datatrove counts only the repeats after the first. All rules share the drop reason "gopher_repetition".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipelines.filters.c4 import PARAGRAPH_RE

if TYPE_CHECKING:
    from pipelines.filters.config import FilterConfig

_MIX = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: an odd multiplier that spreads bits


def gopher_repetition(text: str, words: list[str], config: FilterConfig) -> str | None:
    c = config
    if c.gopher_max_dup_paragraph_fraction is not None or c.gopher_max_dup_paragraph_char_fraction is not None:
        paragraphs = [p for p in (p.strip() for p in PARAGRAPH_RE.split(text)) if p]
        if _too_repetitive(paragraphs, len(text), c.gopher_max_dup_paragraph_fraction,
                           c.gopher_max_dup_paragraph_char_fraction):
            return "gopher_repetition"
    if c.gopher_max_dup_line_fraction is not None or c.gopher_max_dup_line_char_fraction is not None:
        lines = [line for line in (line.strip() for line in text.split("\n")) if line]
        if _too_repetitive(lines, len(text), c.gopher_max_dup_line_fraction, c.gopher_max_dup_line_char_fraction):
            return "gopher_repetition"
    if (c.gopher_top_ngram_char_fractions or c.gopher_dup_ngram_char_fractions) and len(words) > 1:
        if _ngrams_too_repetitive(words, c):
            return "gopher_repetition"
    return None


def _too_repetitive(items: list[str], text_chars: int, max_fraction: float | None,
                    max_char_fraction: float | None) -> bool:
    """Items that repeat an earlier item: their share of items, and of the text's characters."""
    unique = set(items)
    dup_items = len(items) - len(unique)
    dup_chars = sum(map(len, items)) - sum(map(len, unique)) if dup_items else 0
    if max_fraction is not None and items and dup_items / len(items) > max_fraction:
        return True
    return max_char_fraction is not None and text_chars > 0 and dup_chars / text_chars > max_char_fraction


def _ngrams_too_repetitive(words: list[str], config: FilterConfig) -> bool:
    """Gopher's n-gram rules over word characters, vectorized: one sort per n, n-gram keys built as needed."""
    # NOTE: Python's salted str hash is fine here: only equality within this one document matters, and a
    # 64-bit collision (p ~ m^2 / 2^64) is the only way the salt could change a decision.
    ids = np.fromiter(map(hash, words), dtype=np.int64, count=len(words)).view(np.uint64)  # (m,)
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))  # (m,)
    total = int(lengths.sum())
    keys = [ids * _MIX + np.uint64(1)]  # keys[n - 1]: (m - n + 1,) a 64-bit rolling hash of the n-gram at i

    def ngram_keys(n: int) -> np.ndarray:
        while len(keys) < n:
            k = len(keys) + 1
            keys.append((keys[-1][:-1] ^ (ids[k - 1 :] + np.uint64(k))) * _MIX)  # uint64 wraps on purpose
        return keys[n - 1]

    for n, limit in config.gopher_top_ngram_char_fractions:
        if n > len(words):
            continue
        key = ngram_keys(n)
        counts = _counts_per_position(key)
        if counts.max() < 2:
            continue  # NOTE: an n-gram seen once is not repetition (datatrove would still count it)
        span_chars = np.convolve(lengths, np.ones(n, dtype=np.int64), mode="valid")  # (m - n + 1,)
        best = int(np.argmax(np.where(counts >= 2, counts * span_chars, 0)))
        if _covered_chars(key == key[best], n, lengths) / total > limit:
            return True

    # Covered characters shrink as n grows (a repeated (n+1)-gram contains a repeated n-gram), so once the
    # coverage is under every remaining limit, larger n cannot fail.
    dup_rules = sorted(config.gopher_dup_ngram_char_fractions)
    for i, (n, limit) in enumerate(dup_rules):
        if n > len(words):
            break
        fraction = _covered_chars(_counts_per_position(ngram_keys(n)) >= 2, n, lengths) / total
        if fraction > limit:
            return True
        if fraction <= min(lim for _, lim in dup_rules[i:]):
            break
    return False


def _counts_per_position(key: np.ndarray) -> np.ndarray:
    """For each position, how often its key occurs in `key`; (len,) int64."""
    order = np.argsort(key)
    ordered = key[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    runs = np.diff(np.append(starts, len(key)))
    counts = np.empty(len(key), dtype=np.int64)
    counts[order] = np.repeat(runs, runs)
    return counts


def _covered_chars(starts: np.ndarray, n: int, lengths: np.ndarray) -> int:
    """Characters of the words covered by the n-grams starting where `starts` is true, each word once."""
    # full convolution with n ones: entry j counts the starts in [j - n + 1, j], i.e. n-grams covering word j.
    covered = np.convolve(starts.astype(np.int64), np.ones(n, dtype=np.int64))[: len(lengths)] > 0  # (m,)
    return int(lengths[covered].sum())
