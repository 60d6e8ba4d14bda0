"""The language rule: keep documents whose stop-word score says they are in one language (drop reason "language").

C4 kept English pages with langdetect probability >= 0.99; no offline library fits, so this is a heuristic:
the share of a document's letter-words that are one language's most frequent function words.
"""

from __future__ import annotations

import collections
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipelines.filters.config import FilterConfig

# A few of each language's most frequent function words, lower case; enough to tell these languages apart.
_STOP_WORDS = {
    "en": "the of and to in is that it for was on are with as be this by at from or an have not but which",
    "de": "der die und das ist nicht ein eine zu den mit sich des auf für im dem auch es wird von sie bei",
    "fr": "le la les et des est un une du en que qui dans pour pas sur au ce il elle sont avec",
    "es": "el la los las y de que en un una es por con para se del al lo como más",
    "it": "il la che di e un una per non sono del della le gli con si è",
    "pt": "o a os as e de que um uma para com não do da em se por mais",
    "nl": "de het een en van is dat op te in zijn niet met voor er ook",
}
_STOP_SETS = {lang: frozenset(words.split()) for lang, words in _STOP_WORDS.items()}
LANGUAGES = tuple(_STOP_WORDS)


_LETTER_WORD_RE = re.compile(r"[^\W\d_]+")


def language_ok(text: str, config: FilterConfig) -> bool:
    """Stop-word score: the share of letter-words that are the language's stop words, best of `LANGUAGES`."""
    words = _LETTER_WORD_RE.findall(text.lower())
    if not words:
        return False
    counts = collections.Counter(words)
    scores = {lang: sum(counts[w] for w in stop if w in counts) / len(words) for lang, stop in _STOP_SETS.items()}
    target = scores[config.language]
    return target >= config.language_min_score and target >= max(scores.values())


