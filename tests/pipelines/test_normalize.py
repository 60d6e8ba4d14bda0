"""Normalization: Unicode forms, removed characters, every kind of white space and line break, HTML."""

import sys
import unicodedata

import pytest

from pipelines.documents.builtin_corpus import iter_documents
from pipelines.documents.normalize import NormalizeConfig, html_to_text, normalize_text

NFC = NormalizeConfig()
NFKC = NormalizeConfig(unicode_form="NFKC")


def test_config_validation():
    with pytest.raises(ValueError, match="NFC, NFKC"):
        NormalizeConfig(unicode_form="NFD")


def test_nfc_composes_and_nfkc_also_folds_compatibility_forms():
    assert normalize_text("Cafe\u0301", NFC) == "Caf\u00e9"
    assert normalize_text("\ufb01le x\u00b2 \uff21\uff22", NFC) == "\ufb01le x\u00b2 \uff21\uff22"
    assert normalize_text("\ufb01le x\u00b2 \uff21\uff22", NFKC) == "file x2 AB"


def test_format_characters_are_removed():
    # zero-width space / non-joiner / joiner, word joiner, BOM, soft hyphen, LRM, RLO, Arabic letter mark,
    # and an astral one (U+E0001 language tag).
    text = "a\u200bb\u200cc\u200dd\u2060e\ufefff\u00adg\u200eh\u202ei\u061cj\U000e0001k"
    assert normalize_text(text, NFC) == "abcdefghijk"


def test_removal_comes_before_composition():
    assert normalize_text("e\u200b\u0301", NFC) == "\u00e9"


def test_control_characters_replacement_char_and_nul_are_removed():
    assert normalize_text("a\x00b\x01c\x07d\x1be\x7ff\x80g\x9fh\ufffdi", NFC) == "abcdefghi"
    assert normalize_text("a\x00b\x01c\x1bd\x7fe", NFC) == "abcde"  # the ASCII fast path


def test_every_cc_and_cf_character_is_removed_as_bert_does():
    """BERT's _clean_text drops Cc and Cf (tab, LF, CR are white space); here line breaks stay breaks."""
    line_breaks = set("\n\r\x0b\x0c\x1c\x1d\x1e\x85")
    for cp in range(sys.maxunicode + 1):
        ch = chr(cp)
        if unicodedata.category(ch) in ("Cc", "Cf") and ch != "\t" and ch not in line_breaks:
            assert normalize_text(f"a{ch}b", NFC) == "ab", f"U+{cp:04X}"


def test_every_unicode_space_becomes_one_space():
    spaces = [chr(cp) for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) == "Zs"]
    assert "\u00a0" in spaces and "\u3000" in spaces and len(spaces) >= 17
    for space in spaces + ["\t"]:
        assert normalize_text(f"a{space}b", NFC) == "a b", repr(space)
    assert normalize_text("a \t\u00a0\u2003 \u3000b", NFC) == "a b"
    assert normalize_text("a    b\t\tc", NFC) == "a b c"


def test_every_line_break_kind_becomes_a_newline():
    for brk in ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028"]:
        assert normalize_text(f"a{brk}b", NFC) == "a\nb", repr(brk)
    assert normalize_text("a\u2029b", NFC) == "a\n\nb"  # paragraph separator


def test_lines_and_paragraphs():
    text = "  first line  \n   second line \n\n\n\n  next para  "
    assert normalize_text(text, NFC) == "first line\nsecond line\n\nnext para"
    assert normalize_text("\n\n  \n text \n \n", NFC) == "text"
    assert normalize_text("a\n \t \nb", NFC) == "a\n\nb"  # a line of spaces is a blank line
    assert normalize_text("", NFC) == ""


def test_ascii_and_unicode_paths_agree():
    docs = [d["text"] for d in iter_documents(200_000)]
    for text in docs[:50]:
        text = text.rstrip()
        assert normalize_text(text + " \u00e9", NFC) == normalize_text(text + " e\u0301", NFC)
        assert normalize_text(text + " \u00e9", NFC) == normalize_text(text, NFC) + " \u00e9"


def test_idempotent():
    docs = [d["text"] for d in iter_documents(200_000)]
    samples = docs + ["a\u200b\u00a0b\r\n\r\n\r\nc\x00", "<p>x</p>"]
    for text in samples:
        once = normalize_text(text, NFKC)
        assert normalize_text(once, NFKC) == once


def test_keeps_emoji_and_scripts():
    text = "Hello \U0001f600 \u4f60\u597d \u0928\u092e\u0938\u094d\u0924\u0947 \u0645\u0631\u062d\u0628\u0627"
    assert normalize_text(text, NFC) == text


def test_html_to_text():
    markup = (
        "<html><head><title>T</title><style>p {color: red}</style></head><body>"
        "<h1>Heading</h1><p>Hello\n   <b>world</b> &amp; caf&eacute; &#8364;5.</p>"
        "<ul><li>one</li><li>two</li></ul><script>var a = 1;</script>"
        "<pre>keep\n  this</pre>line<br>break<table><tr><td>a</td><td>b</td></tr></table></body></html>"
    )
    text = normalize_text(markup, NormalizeConfig(html_to_text=True))
    assert text == "Heading\n\nHello world & caf\u00e9 \u20ac5.\n\none\ntwo\n\nkeep\nthis\n\nline\nbreak\n\na b"
    assert "var a" not in html_to_text(markup) and "color" not in html_to_text(markup)


def test_html_off_keeps_angle_brackets():
    assert normalize_text("if a < b and c > d: <p>", NFC) == "if a < b and c > d: <p>"
    assert normalize_text("x &amp; y", NFC) == "x &amp; y"


def test_html_broken_markup_keeps_text():
    assert normalize_text("<p>unclosed <b", NormalizeConfig(html_to_text=True)) == "unclosed <b"
    assert normalize_text("text & more</div>", NormalizeConfig(html_to_text=True)) == "text & more"
