"""Text normalization, the first step of cleaning a document.

In:  raw document text (any Unicode, possibly HTML when `html_to_text` is on) and a `NormalizeConfig`.
Out: `normalize_text(text, config) -> str`, in this order:
  1. HTML to text (optional; stdlib `html.parser`): script/style/head content dropped, block elements
     become line or paragraph breaks, entities unescaped, source-layout white space collapsed.
  2. Line breaks unified: \\r\\n, \\r, \\v, \\f, NEL, U+2028 and the ASCII separators \\x1c-\\x1e become \\n,
     U+2029 becomes a paragraph break. These are the breaks `str.splitlines()` knows; unifying them
     keeps line-based filters (C4) and the sentence splitter agreeing on what a line is.
  3. Removed, as BERT's tokenizer does in `_clean_text`: NUL, U+FFFD and every control (Cc) or format
     (Cf) character except \\t \\n \\r (zero-width space/joiners, BOM, soft hyphen, bidi marks), plus
     lone surrogates (Cs), which could not be written as UTF-8. Removal comes before step 4 so that a
     deleted zero-width space between a letter and its combining accent cannot leave an un-composed pair.
  4. Unicode normalization: NFC (default, keeps ﬁ, ², full-width forms) or NFKC (folds them).
  5. White space: tab and every Unicode space separator (Zs: NBSP, en/em spaces, ideographic space...)
     become ' ', runs of spaces collapse, lines lose their leading and trailing spaces, 3+ line breaks
     become one paragraph break, and the text is stripped. Single line breaks and "\\n\\n" are kept.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import re
import sys
import unicodedata
from html.parser import HTMLParser

_UNICODE_FORMS = ("NFC", "NFKC")


@dataclasses.dataclass(frozen=True, kw_only=True)
class NormalizeConfig:
    unicode_form: str = "NFC"
    """Unicode normal form: "NFC" (canonical composition; keeps compatibility characters such as ﬁ, ²,
    full-width Ａ) or "NFKC" (also folds those, as BERT's multilingual models do before lower-casing)."""
    html_to_text: bool = False
    """Treat the input as HTML: drop script/style/head, turn block elements into line breaks, unescape
    entities. Off by default: plain text with a literal '<' must not lose words."""

    def __post_init__(self) -> None:
        if self.unicode_form not in _UNICODE_FORMS:
            raise ValueError(f"unicode_form must be one of {', '.join(_UNICODE_FORMS)}, got {self.unicode_form!r}")


# Line breaks that str.splitlines() knows besides \n; they are kept through removal so that it sees them.
_LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028"
_PARAGRAPH_SEP = "\u2029"
_ASTRAL_RE = re.compile("[\U00010000-\U0010ffff]")
# ASCII fast path (most of an English corpus): bytes.translate runs at ~1 GB/s where a regex character
# class runs at ~70 MB/s (measured on the built-in corpus). C0 controls and DEL go, except tab and breaks.
_ASCII_DELETE = bytes(c for c in [*range(0x20), 0x7F] if chr(c) not in "\t\n" + _LINE_BREAKS)


def normalize_text(text: str, config: NormalizeConfig) -> str:
    """Normalize one document's text as the module docstring describes; '' stays ''."""
    if config.html_to_text:
        text = html_to_text(text)
    if _PARAGRAPH_SEP in text:
        text = text.replace(_PARAGRAPH_SEP, "\n\n")
    if text.isascii():  # O(1) in CPython; ASCII text is already NFC and NFKC
        text = text.encode("ascii").translate(None, _ASCII_DELETE).decode("ascii")
    else:
        removable_bmp, removable_astral = _removable()
        if removable_bmp.search(text):
            text = removable_bmp.sub("", text)
        # NOTE: astral code points (U+10000 and up) get their own class: mixed into the BMP one they make
        # `re` fall back from a bitmap to a range list, 4x slower (25 vs 110 MB/s measured).
        if _ASTRAL_RE.search(text):
            text = removable_astral.sub("", text)
        text = unicodedata.normalize(config.unicode_form, text)
    # One pass over lines does the rest: splitlines() breaks at every line-break kind, split() at every
    # Unicode space (tab, NBSP, U+2000-U+200A, U+3000...), and empty lines collapse to one paragraph break.
    # A per-line loop beats the equivalent regexes here: each of those ran at 25-50 MB/s on docstrings.
    out: list[str] = []
    blank = True  # also drops leading empty lines
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            out.append(line)
            blank = False
        elif not blank:
            out.append("")
            blank = True
    if out and blank:
        out.pop()
    return "\n".join(out)


@functools.cache
def _removable() -> tuple[re.Pattern, re.Pattern]:
    """What step 3 removes, as a BMP and an astral character class, built once from `unicodedata`."""
    # NOTE: built from the running Python's Unicode tables (one pass over 1.1M code points, ~0.3 s once per
    # process) rather than a hard-coded list, so characters a newer Unicode assigns to Cf are removed too.
    # Like NFC/NFKC, this follows `unicodedata.unidata_version` (14.0 on Python 3.11): byte-identical output
    # across workers needs one Python minor version on all of them, which Beam requires anyway.
    keep = "\t\n" + _LINE_BREAKS
    removable = ["\ufffd"] + [
        chr(cp)
        for cp in range(sys.maxunicode + 1)
        if unicodedata.category(chr(cp)) in ("Cc", "Cf", "Cs") and chr(cp) not in keep
    ]
    bmp = [c for c in removable if c <= "\uffff"]
    astral = [c for c in removable if c > "\uffff"]
    return re.compile(f"[{_char_class(bmp)}]"), re.compile(f"[{_char_class(astral)}]")


def _char_class(chars: list[str]) -> str:
    """Compress sorted characters into regex ranges ('a-z'), escaping each end."""
    cps = sorted(ord(c) for c in chars)
    parts = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        lo, hi = chr(cps[i]), chr(cps[j])
        parts.append(re.escape(lo) if i == j else f"{re.escape(lo)}-{re.escape(hi)}")
        i = j + 1
    return "".join(parts)


# --- HTML -------------------------------------------------------------------------------------------

_SKIP_TAGS = frozenset({"script", "style", "head", "noscript", "template", "svg", "iframe", "object"})
_PARAGRAPH_TAGS = frozenset(
    {"p", "div", "section", "article", "header", "footer", "main", "aside", "nav", "blockquote", "pre", "table",
     "ul", "ol", "dl", "figure", "form", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "title", "body", "html"}
)
_LINE_TAGS = frozenset({"br", "li", "tr", "dt", "dd", "caption", "figcaption", "option", "summary", "details"})
_CELL_TAGS = frozenset({"td", "th"})
_SOURCE_SPACE_RE = re.compile(r"\s+")


class _TextExtractor(HTMLParser):
    """Collects visible text; HTML's own line breaks and indentation are not significant outside <pre>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip_depth = 0
        self._pre_depth = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        self._open_or_close(tag, opening=True)

    def handle_startendtag(self, tag: str, attrs) -> None:
        if tag not in _SKIP_TAGS:  # <br/>, <hr/>, and a self-closed <script/> that has no body to skip
            self._break_for(tag)

    def handle_endtag(self, tag: str) -> None:
        self._open_or_close(tag, opening=False)

    def _open_or_close(self, tag: str, opening: bool) -> None:
        if tag in _SKIP_TAGS:
            self._skip_depth = max(0, self._skip_depth + (1 if opening else -1))
            return
        if tag == "pre":
            self._pre_depth = max(0, self._pre_depth + (1 if opening else -1))
        self._break_for(tag, opening)

    def _break_for(self, tag: str, opening: bool = True) -> None:
        # Paragraph-like blocks are set off on both sides; a line-like element (li, br, tr) starts a line,
        # so "<li>a</li><li>b</li>" is "a\nb", not "a\n\nb".
        if tag in _PARAGRAPH_TAGS:
            self.parts.append("\n\n")
        elif opening and tag in _LINE_TAGS:
            self.parts.append("\n")
        elif opening and tag in _CELL_TAGS:
            self.parts.append(" ")

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        self.parts.append(data if self._pre_depth else _SOURCE_SPACE_RE.sub(" ", data))


def html_to_text(markup: str) -> str:
    """Visible text of an HTML document or fragment, with block structure as line/paragraph breaks."""
    parser = _TextExtractor()
    parser.feed(markup)
    parser.close()
    text = "".join(parser.parts)
    # A parser that stopped inside an unclosed tag leaves the rest unparsed: keep it as (unescaped) text.
    if parser.rawdata:
        text += html.unescape(parser.rawdata)
    return text
