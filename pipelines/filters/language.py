"""The language rule: keep documents whose stop-word score says they are in one language (drop reason "language").

C4 kept English pages with langdetect probability >= 0.99; no offline library fits, so this is a heuristic:
the share of a document's letter-words that are one language's most frequent function words.
"""

from __future__ import annotations

import collections
import re
from typing import TYPE_CHECKING

from pipelines.filters.stop_words import STOP_SETS

if TYPE_CHECKING:
    from pipelines.filters.config import FilterConfig


_LETTER_WORD_RE = re.compile(r"[^\W\d_]+")


def language_ok(text: str, config: FilterConfig) -> bool:
    """Stop-word score: the share of letter-words that are the language's stop words, best of the languages of filters/stop_words.py."""
    words = _LETTER_WORD_RE.findall(text.lower())
    if not words:
        return False
    counts = collections.Counter(words)
    scores = {lang: sum(counts[w] for w in stop if w in counts) / len(words) for lang, stop in STOP_SETS.items()}
    target = scores[config.language]
    return target >= config.language_min_score and target >= max(scores.values())


