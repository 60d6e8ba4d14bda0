"""The scripts a corpus is written in, and the letters uncased normalisation would delete from them (no Beam import).

In:  a document's text. Out: `script_counts(text)`, a Counter of (script, what) with what in
     "chars" (its letters and marks, counted after NFD), "marks_lost" (the non-spacing marks of the script itself that
     BERT's accent stripping drops) and, summed over documents, `accent_loss` / `accent_warning` for report.json.

BERT's uncased normalisation (bert-base-uncased, tokenizers' BertNormalizer(strip_accents=True)) decomposes text
(NFD) and drops every character of category Mn. In Latin, Greek or Cyrillic text those are the combining accents of
the Combining Diacritical Marks blocks, and dropping them is what "uncased" means ("café" → "cafe"). In an abugida
they are letters: Devanagari's vowel signs and nukta, Thai's above and below vowels, Bengali's, Tamil's, Arabic's
harakat, Hebrew's points, kana's voiced-sound marks. "तेज़ भूरी लोमड़ी" becomes "तज भरी लोमडी"; multilingual BERT's
README recommends its cased model for this reason. A mark is a letter of its script unless it lies in a generic
diacritics block (DIACRITIC_BLOCKS); a character's script is the first word of its Unicode name (the standard library
has no Script property): DEVANAGARI VOWEL SIGN U is Devanagari's, COMBINING ACUTE ACCENT nobody's.

Scripts written without spaces between words (Han, kana, Thai, Lao, Khmer, Myanmar, Tibetan) are flagged: their
"words" for the vocabulary learner are phrases, except Han and kana, which BERT's tokenizer splits per character.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

DIACRITIC_BLOCKS = ((0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F))
"""Combining Diacritical Marks (and its Extended and Supplement blocks, for Symbols, Half Marks): accents, whose loss
is what an uncased vocabulary is for."""

UNSPACED = frozenset({"Han", "Hiragana", "Katakana", "Kana", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan"})
"""Scripts written without spaces between words."""

_NAMES = {"CJK": "Han", "KATAKANA-HIRAGANA": "Kana", "HANGUL": "Hangul"}

LOSS_WARNING_SHARE = 0.001
"""A script loses letters when at least this share of its characters are marks accent stripping drops (one in a
thousand: a stray combining character in a Latin text is not a script's letters)."""


def _diacritic(code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in DIACRITIC_BLOCKS)


@functools.lru_cache(maxsize=1 << 16)
def char_class(ch: str) -> tuple[str | None, bool]:
    """(the script of a letter or mark, or None for other characters and generic diacritics; whether accent stripping
    drops it as a letter of that script)."""
    category = unicodedata.category(ch)
    if category[0] not in "LM" or (category == "Mn" and _diacritic(ord(ch))):
        return None, False
    name = unicodedata.name(ch, "")
    if not name:
        return None, False
    word = name.split()[0]
    if word == "COMBINING":  # outside the diacritics blocks: kana's voiced-sound marks
        word = name.split()[1]
    script = _NAMES.get(word, word.capitalize())
    return script, category == "Mn"


def script_counts(text: str) -> Counter:
    """(script, "chars") and (script, "marks_lost") over `text`'s letters and marks, after NFD (where accent stripping
    looks)."""
    counts: Counter = Counter()
    if text.isascii():
        letters = ascii_letters(text)
        if letters:
            counts["Latin", "chars"] = letters
        return counts
    # NOTE: the characters are looked at one by one only in the non-ASCII runs; the ASCII text between them is
    # counted in bulk (bytes.translate) and only says whether the last letter before a run was Latin. A Python
    # loop over every character was 6% of prep's CPU on mostly-ASCII documents.
    text = unicodedata.normalize("NFD", text)
    base = None  # the script of the last letter: a mark counts as its letter's (kana's voiced-sound marks)
    latin = position = 0
    for run in _NON_ASCII_RUN.finditer(text):
        letters = ascii_letters(text[position : run.start()])
        if letters:
            latin += letters
            base = "Latin"
        position = run.end()
        for ch in run.group():
            script, lost = char_class(ch)
            if script is None:
                continue
            if lost:
                script = base or script
            else:
                base = script
            counts[script, "chars"] += 1
            if lost:
                counts[script, "marks_lost"] += 1
    latin += ascii_letters(text[position:])
    if latin:
        counts["Latin", "chars"] += latin
    return counts


_ASCII_NON_LETTERS = bytes(b for b in range(128) if not chr(b).isalpha())
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")


def ascii_letters(text: str) -> int:
    """How many of ASCII `text`'s characters are letters (str.isalpha), at C speed."""
    return len(text.encode("ascii").translate(None, _ASCII_NON_LETTERS))


def scripts_report(tallies: Iterable[tuple[tuple[str, str], int]]) -> dict:
    """{script: {chars, marks_lost, share_lost, spaces}} from summed script_counts, the most frequent script first."""
    table: dict[str, Counter] = {}
    for (script, what), count in tallies:
        table.setdefault(script, Counter())[what] += count
    rows = sorted(table.items(), key=lambda kv: (-kv[1]["chars"], kv[0]))
    return {script: {"chars": c["chars"], "marks_lost": c["marks_lost"],
                     "share_lost": round(c["marks_lost"] / max(c["chars"], 1), 5), "spaces": script not in UNSPACED}
            for script, c in rows}


def accent_warning(scripts: dict) -> str | None:
    """One line naming the scripts whose letters uncased normalisation deletes and the share lost, or None."""
    hit = {s: row for s, row in scripts.items() if row["chars"] and row["marks_lost"] / row["chars"] >= LOSS_WARNING_SHARE}
    if not hit:
        return None
    total = sum(row["chars"] for row in scripts.values())
    lost = sum(row["marks_lost"] for row in hit.values())
    named = ", ".join(f"{s} ({100 * row['marks_lost'] / row['chars']:.1f}% of its characters)" for s, row in hit.items())
    return (f"uncased normalisation strips accents, which would delete letters (vowel signs, other combining marks) of "
            f"{named}: {100 * lost / max(total, 1):.2f}% of the corpus's letters; pass --cased to keep them")
