"""FilterConfig: every threshold of the quality filters, and the presets (none, bert, c4, gopher).

In:  a preset name (--filters) and an optional language (--language).
Out: a frozen, validated FilterConfig; None (or False) turns a rule off. `FilterConfig()` is "bert".
"""

from __future__ import annotations

import dataclasses

from pipelines.filters.stop_words import GOPHER_STOP_WORDS, LANGUAGES

PRESETS = ("none", "bert", "c4", "gopher")

@dataclasses.dataclass(frozen=True, kw_only=True)
class FilterConfig:
    """All thresholds; None (or False) turns a rule off. `FilterConfig()` is the "bert" preset."""

    min_chars: int | None = 20
    """Drop ("too_short") below this many characters. Ours: a shorter text cannot make a training sentence."""
    max_chars: int | None = 1_000_000
    """Drop ("too_long") above this many characters. Ours: bounds one record's memory in a Beam worker;
    longer "documents" are dumps and logs (Gopher's word cap, 100k words, is ~600k characters)."""
    min_words: int | None = 4
    """Drop ("too_few_words") below this many white-space words. Ours, light on purpose."""
    language: str | None = None
    """Keep only this language (one of `LANGUAGES`), by stop-word score; drop reason "language". C4 kept
    English pages with langdetect probability >= 0.99; no offline library fits, so this is a heuristic."""
    language_min_score: float = 0.1
    """The language's stop words must be at least this fraction of the words (and beat the other languages').
    Ours: the built-in docstring corpus (4 MB, 1310 docs) scores median 0.27, 5th percentile 0.16, and 13
    docs (1%) fall under 0.1 or score higher for another language; plain English prose scores ~0.3."""

    c4_lorem_ipsum: bool = False
    """C4: drop a page containing "lorem ipsum" (reason "c4_lorem_ipsum")."""
    c4_curly_bracket: bool = False
    """C4: drop a page with a "{" in a line that survives the line rules (reason "c4_curly_bracket")."""
    c4_line_rules: bool = False
    """C4: remove lines not ending in . ! ? " (or ”), lines mentioning "javascript", and (TFDS c4_utils)
    cookie/terms-of-use lines and lines with a word longer than `c4_max_word_length`."""
    c4_min_words_per_line: int | None = None
    """C4: remove lines with fewer words than this (paper: 3)."""
    c4_max_word_length: int = 1000
    """TFDS c4_utils: remove lines with a word longer than this (with `c4_line_rules`)."""
    c4_remove_citations: bool = False
    """TFDS c4_utils: delete Wikipedia-style "[1]", "[edit]", "[citation needed]" before the line rules."""
    c4_min_sentences: int | None = None
    """C4: drop a page with fewer sentences than this after the line rules (paper: 5; reason "c4_too_few_sentences")."""

    gopher_min_words: int | None = None
    """Gopher: drop below this many words that have a letter or digit (paper: 50; reason "gopher_word_count")."""
    gopher_max_words: int | None = None
    """Gopher: drop above this many such words (paper: 100,000)."""
    gopher_min_mean_word_length: float | None = None
    """Gopher: drop if the mean word length (edge punctuation stripped) is below this (paper: 3)."""
    gopher_max_mean_word_length: float | None = None
    """Gopher: ... or above this (paper: 10). Reason "gopher_mean_word_length"."""
    gopher_max_symbol_ratio: float | None = None
    """Gopher: drop if '#' per word, or ellipses ('...', '…') per word, exceed this (paper: 0.1)."""
    gopher_max_bullet_lines: float | None = None
    """Gopher: drop if more than this fraction of non-empty lines start with a bullet (paper: 0.9)."""
    gopher_max_ellipsis_lines: float | None = None
    """Gopher: drop if more than this fraction of non-empty lines end with an ellipsis (paper: 0.3)."""
    gopher_min_alpha_fraction: float | None = None
    """Gopher: drop if fewer than this fraction of words contain a letter (paper: 0.8)."""
    gopher_min_stop_words: int | None = None
    """Gopher: drop if fewer than this many distinct `gopher_stop_words` occur, case-insensitive (paper: 2)."""
    gopher_stop_words: tuple[str, ...] = GOPHER_STOP_WORDS
    """Gopher's English stop words (App. A.1.1)."""

    gopher_max_dup_line_fraction: float | None = None
    """Gopher Table A1: drop if more than this fraction of non-empty lines repeat an earlier line (0.30)."""
    gopher_max_dup_paragraph_fraction: float | None = None
    """Gopher Table A1: ... of paragraphs repeat an earlier one (0.30)."""
    gopher_max_dup_line_char_fraction: float | None = None
    """Gopher Table A1: ... of characters are in repeated lines (0.20)."""
    gopher_max_dup_paragraph_char_fraction: float | None = None
    """Gopher Table A1: ... of characters are in repeated paragraphs (0.20)."""
    gopher_top_ngram_char_fractions: tuple[tuple[int, float], ...] = ()
    """Gopher Table A1: (n, max) — word characters covered by the most frequent repeated n-gram
    ((2, 0.20), (3, 0.18), (4, 0.16))."""
    gopher_dup_ngram_char_fractions: tuple[tuple[int, float], ...] = ()
    """Gopher Table A1: (n, max) — word characters covered by all n-grams that occur more than once
    ((5, 0.15), (6, 0.14), ..., (10, 0.10)). Repetition rules share the reason "gopher_repetition"."""

    def __post_init__(self) -> None:
        for name in ("min_chars", "max_chars", "min_words", "c4_min_words_per_line", "c4_min_sentences",
                     "gopher_min_words", "gopher_max_words", "gopher_min_stop_words"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a non-negative int or None, got {value!r}")
        if self.min_chars is not None and self.max_chars is not None and self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) must not exceed max_chars ({self.max_chars})")
        for name in ("language_min_score", "gopher_max_symbol_ratio", "gopher_max_bullet_lines",
                     "gopher_max_ellipsis_lines", "gopher_min_alpha_fraction", "gopher_max_dup_line_fraction",
                     "gopher_max_dup_paragraph_fraction", "gopher_max_dup_line_char_fraction",
                     "gopher_max_dup_paragraph_char_fraction"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1] or None, got {value!r}")
        if self.language is not None and self.language not in LANGUAGES:
            raise ValueError(f"language must be one of {', '.join(LANGUAGES)} or None, got {self.language!r}")
        for name in ("gopher_top_ngram_char_fractions", "gopher_dup_ngram_char_fractions"):
            for n, limit in getattr(self, name):
                if not (isinstance(n, int) and n >= 1 and 0.0 <= limit <= 1.0):
                    raise ValueError(f"{name} entries must be (n >= 1, limit in [0, 1]), got {(n, limit)!r}")

    @classmethod
    def preset(cls, name: str) -> FilterConfig:
        """"none" (nothing but empty documents), "bert" (light bounds), "c4" or "gopher" (bert + the paper's rules)."""
        if name == "none":
            return cls(min_chars=None, max_chars=None, min_words=None)
        if name == "bert":
            return cls()
        if name == "c4":
            return cls(c4_lorem_ipsum=True, c4_curly_bracket=True, c4_line_rules=True, c4_min_words_per_line=3,
                       c4_remove_citations=True, c4_min_sentences=5)
        if name == "gopher":
            return cls(
                gopher_min_words=50, gopher_max_words=100_000, gopher_min_mean_word_length=3.0,
                gopher_max_mean_word_length=10.0, gopher_max_symbol_ratio=0.1, gopher_max_bullet_lines=0.9,
                gopher_max_ellipsis_lines=0.3, gopher_min_alpha_fraction=0.8, gopher_min_stop_words=2,
                gopher_max_dup_line_fraction=0.3, gopher_max_dup_paragraph_fraction=0.3,
                gopher_max_dup_line_char_fraction=0.2, gopher_max_dup_paragraph_char_fraction=0.2,
                gopher_top_ngram_char_fractions=((2, 0.20), (3, 0.18), (4, 0.16)),
                gopher_dup_ngram_char_fractions=((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)),
            )
        raise ValueError(f"unknown filter preset {name!r}; valid presets: {', '.join(PRESETS)}")


