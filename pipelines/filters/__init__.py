"""Document quality filters, one rule family a module: length bounds (here), C4, Gopher quality, Gopher repetition, language.

In:  one normalized document's text (`pipelines.documents.normalize` output) and a `FilterConfig`.
Out: `filter_document(text, config) -> (kept_text, None)` to keep, or `(None, reason)` to drop, where
     reason is one of `DROP_REASONS`. C4's line rules remove lines, so kept_text may differ from text.

Rules run cheapest first and stop at the first that drops: empty, length and word bounds, language, C4
(Raffel et al. 2020, JMLR, Sec. 2.2: "lorem ipsum" on the whole page, then the line rules, then "{" on the
lines that survive, as TFDS's `c4_utils` orders them), Gopher quality (Rae et al. 2021, "Scaling Language
Models", App. A.1.1), Gopher repetition (same paper, Table A1). Words are white-space tokens; "word
characters" exclude the spaces between them. Where the papers leave a detail open, the choice is stated at
the rule (the `NOTE:`s); the repeated-n-gram rule counts every occurrence of a repeated n-gram, as the paper
and RedPajama-V2's `frac_chars_dupe_ngrams` do, where datatrove counts only the repeats after the first.
Not implemented: C4's bad-words list (LDNOOBW), which would need a download; the C4 paper's language ID
(langdetect >= 0.99) is replaced by a stop-word score, see language.py.
"""

from __future__ import annotations

import re

from pipelines.filters.c4 import c4_rules
from pipelines.filters.config import PRESETS, FilterConfig
from pipelines.filters.gopher_quality import gopher_quality
from pipelines.filters.gopher_repetition import gopher_repetition
from pipelines.filters.language import language_ok
from pipelines.filters.stop_words import LANGUAGES

__all__ = ["DROP_REASONS", "LANGUAGES", "PRESETS", "FilterConfig", "filter_document", "word_count"]

DROP_REASONS = (
    "empty", "too_short", "too_long", "too_few_words", "language",
    "c4_lorem_ipsum", "c4_curly_bracket", "c4_too_few_sentences", "c4_no_lines_left",
    "gopher_word_count", "gopher_mean_word_length", "gopher_symbol_ratio", "gopher_bullet_lines",
    "gopher_ellipsis_lines", "gopher_alpha_fraction", "gopher_stop_words", "gopher_repetition",
)
"""Every reason `filter_document` can return; the Beam stage makes each one a counter."""
def filter_document(text: str, config: FilterConfig) -> tuple[str | None, str | None]:
    """(text to keep, None), or (None, reason) with reason in DROP_REASONS."""
    if not text.strip():
        return None, "empty"
    if config.max_chars is not None and len(text) > config.max_chars:
        return None, "too_long"
    if config.min_chars is not None and len(text) < config.min_chars:
        return None, "too_short"
    words = text.split()
    if config.min_words is not None and _word_count(text, words) < config.min_words:
        return None, "too_few_words"
    if config.language is not None and not language_ok(text, config):
        return None, "language"
    if config.c4_line_rules or config.c4_lorem_ipsum or config.c4_curly_bracket or config.c4_min_sentences:
        text, reason = c4_rules(text, config)
        if reason:
            return None, reason
        words = text.split()
    reason = gopher_quality(text, words, config) or gopher_repetition(text, words, config)
    return (None, reason) if reason else (text, None)


# Han, kana and the CJK compatibility/extension blocks: each character is a word, as BERT's tokenizer
# splits them (`_tokenize_chinese_chars`); Hangul is written with spaces and needs no such rule.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_CJK_WORD_RE = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")


def word_count(text: str) -> int:
    """White-space words, with each CJK character counted as one word (what --min-words and the per-language
    vocabulary figures count)."""
    return _word_count(text, text.split())


def _word_count(text: str, words: list[str]) -> int:
    """White-space words, with each CJK character counted as one word."""
    return len(words) if text.isascii() else len(_CJK_WORD_RE.findall(text))


