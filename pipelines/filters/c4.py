"""C4's rules (Raffel et al. 2020, JMLR, Sec. 2.2, with the details of TFDS's `c4_utils`): "lorem ipsum" on the
whole page, then the line rules, then "{" on the lines that survive, then a minimum number of sentences.
Not implemented: C4's bad-words list (LDNOOBW), which would need a download.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pipelines.documents.sentences import split_sentences

if TYPE_CHECKING:
    from pipelines.filters.config import FilterConfig

PARAGRAPH_RE = re.compile(r"\n{2,}")

_C4_END_MARKS = (".", "?", "!", '"', "”")
_C4_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_CITATION_RE = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]", re.IGNORECASE)


def c4_rules(text: str, config: FilterConfig) -> tuple[str, str | None]:
    """C4's page and line rules; returns (kept text, None) or ("", reason)."""
    if config.c4_lorem_ipsum and "lorem ipsum" in text.lower():
        return "", "c4_lorem_ipsum"
    paragraphs = []
    for paragraph in PARAGRAPH_RE.split(text):
        kept = []
        for line in paragraph.split("\n"):
            if config.c4_remove_citations:
                line = _CITATION_RE.sub("", line)
            line = line.strip()
            if config.c4_line_rules and not _c4_line_ok(line, config):
                continue
            if config.c4_min_words_per_line is not None and len(line.split()) < config.c4_min_words_per_line:
                continue
            if not line:
                continue
            # NOTE: as in TFDS, a "{" only drops the page when its line survived the line rules.
            if config.c4_curly_bracket and "{" in line:
                return "", "c4_curly_bracket"
            kept.append(line)
        if kept:
            paragraphs.append("\n".join(kept))
    text = "\n\n".join(paragraphs)
    if not text:
        return "", "c4_no_lines_left"
    if config.c4_min_sentences and len(split_sentences(text)) < config.c4_min_sentences:
        return "", "c4_too_few_sentences"
    return text, None


def _c4_line_ok(line: str, config: FilterConfig) -> bool:
    if not line.endswith(_C4_END_MARKS):
        return False
    lower = line.lower()
    if "javascript" in lower or any(p in lower for p in _C4_POLICY):
        return False
    return max(map(len, line.split()), default=0) <= config.c4_max_word_length


