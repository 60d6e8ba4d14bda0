"""Gopher's quality rules (Rae et al. 2021, "Scaling Language Models", App. A.1.1): word count, mean word
length, symbol ratio, bullet and ellipsis lines, words with a letter, stop words. Words are white-space
tokens with their edge punctuation removed (the `NOTE` below says where this departs from datatrove).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipelines.filters.config import FilterConfig


_BULLETS = ("•", "-", "*", "‣", "◦", "●", "▪", "–", "·")
# A word's core: from its first to its last letter or digit ("(don't)," -> "don't"); one match per token,
# because the greedy \S* runs to the token's end before backing off to its last letter or digit.
_WORD_CORE_RE = re.compile(r"[^\W_](?:\S*[^\W_])?")
# One match per token that holds a letter: from its first letter to the token's end.
_ALPHA_TOKEN_RE = re.compile(r"[^\W\d_]\S*")


def gopher_quality(text: str, words: list[str], config: FilterConfig) -> str | None:
    c = config
    if (c.gopher_min_words is not None or c.gopher_max_words is not None or c.gopher_min_mean_word_length
            or c.gopher_max_mean_word_length or c.gopher_min_stop_words):
        # NOTE: a word is a white-space token's core (edge punctuation off); pure-symbol tokens ("-", "...")
        # are not words. datatrove counts spaCy tokens instead, which also splits "don't" and "U.S.".
        cores = _WORD_CORE_RE.findall(text)
        n = len(cores)
        if (c.gopher_min_words is not None and n < c.gopher_min_words) or (
                c.gopher_max_words is not None and n > c.gopher_max_words):
            return "gopher_word_count"
        if n and (c.gopher_min_mean_word_length or c.gopher_max_mean_word_length):
            mean = sum(map(len, cores)) / n
            if (c.gopher_min_mean_word_length and mean < c.gopher_min_mean_word_length) or (
                    c.gopher_max_mean_word_length and mean > c.gopher_max_mean_word_length):
                return "gopher_mean_word_length"
    if c.gopher_max_symbol_ratio is not None and words:
        ellipses = text.count("...") + text.count("…")
        if max(text.count("#"), ellipses) / len(words) > c.gopher_max_symbol_ratio:
            return "gopher_symbol_ratio"
    if c.gopher_max_bullet_lines is not None or c.gopher_max_ellipsis_lines is not None:
        lines = [line for line in (line.strip() for line in text.split("\n")) if line]
        if lines:
            if c.gopher_max_bullet_lines is not None and (
                    sum(line.startswith(_BULLETS) for line in lines) / len(lines) > c.gopher_max_bullet_lines):
                return "gopher_bullet_lines"
            if c.gopher_max_ellipsis_lines is not None and (
                    sum(line.endswith(("...", "…")) for line in lines) / len(lines) > c.gopher_max_ellipsis_lines):
                return "gopher_ellipsis_lines"
    if c.gopher_min_alpha_fraction is not None and words:
        if len(_ALPHA_TOKEN_RE.findall(text)) / len(words) < c.gopher_min_alpha_fraction:
            return "gopher_alpha_fraction"
    if c.gopher_min_stop_words:
        present = set(cores)
        # Case-insensitive without lower-casing every word: a stop word shows as "the", "The" or "THE".
        found = sum(any(v in present for v in (w, w.capitalize(), w.upper())) for w in set(c.gopher_stop_words))
        if found < c.gopher_min_stop_words:
            return "gopher_stop_words"
    return None


