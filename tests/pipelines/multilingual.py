"""A multilingual corpus from this machine's own text, one JSON-lines file a language: Debian's translated man pages
(roff read as text: requests and escapes dropped) and gettext catalogs (translated messages), for the scripts the man
pages lack (Devanagari, Thai, Arabic)."""

from __future__ import annotations

import json

from tests.pipelines.mixed_text import catalog_text, man_text

MAN_LANGUAGES = ("de", "fr", "ru", "ja", "zh_CN", "pl", "es", "it", "nl", "uk")
CATALOG_LANGUAGES = ("hi", "th", "ar")


def documents(language: str, lines_per_doc: int = 4) -> list[str]:
    """One language's text as documents of `lines_per_doc` lines (the same every run: sorted files and lines)."""
    lines = man_text(language, pages=6) if language in MAN_LANGUAGES else catalog_text(language, domains=6)
    return [" ".join(lines[i:i + lines_per_doc]) for i in range(0, len(lines), lines_per_doc)]


def write_corpus(directory, languages=MAN_LANGUAGES + CATALOG_LANGUAGES) -> dict[str, int]:
    """<directory>/<language>.jsonl for each language; {language: documents}."""
    counts = {}
    for language in languages:
        docs = documents(language)
        assert docs, f"no {language} text on this machine"
        (directory / f"{language}.jsonl").write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs))
        counts[language] = len(docs)
    return counts
