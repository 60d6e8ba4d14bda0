"""Mixed text from this machine for the tokenizer tests: man pages in Japanese, Chinese, Korean and Russian, gettext
catalogs in Arabic and Hebrew (right to left), English docstrings, then the hard cases written out: emoji sequences,
combining marks, control characters and white space of every kind, compatibility forms, the special tokens' text,
very long words."""

from __future__ import annotations

import functools
import gettext
import glob
import gzip
import re

_REQUEST = re.compile(r"^[.'].*$", re.M)
_ESCAPE = re.compile(r"\\(f(\(..|\[[^\]]*\]|.)|\(..|\[[^\]]*\]|[-e&|^%:]|s[-+]?\d|\*(\(..|\[[^\]]*\]|.)| )")


def man_text(language: str, pages: int = 3) -> list[str]:
    """Prose lines of the first `pages` man pages of /usr/share/man/<language>/man1 (roff requests and escapes dropped)."""
    lines = []
    for path in sorted(glob.glob(f"/usr/share/man/{language}/man1/*.gz"))[:pages]:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            text = _ESCAPE.sub("", _REQUEST.sub("", f.read()))
        lines += [line.strip() for line in text.splitlines() if len(line.strip()) > 20]
    return lines[:40]


def catalog_text(language: str, domains: int = 3) -> list[str]:
    """Translated messages of the first `domains` gettext catalogs of /usr/share/locale/<language>."""
    out = []
    for path in sorted(glob.glob(f"/usr/share/locale/{language}/LC_MESSAGES/*.mo"))[:domains]:
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # noqa: SLF001 (the parsed catalog: msgid -> msgstr)
        out += [v for k, v in sorted(catalog.items(), key=lambda kv: str(kv[0])) if k and isinstance(v, str) and len(v) > 10][:30]
    return out


HARD_CASES = [
    "Emoji: 🫠 👍🏽 👩‍👩‍👧‍👦 🇯🇵 ❤️ 1️⃣ and a tag sequence 🏴󠁧󠁢󠁳󠁣󠁴󠁿.",
    "Combining: e\u0301 a\u0316\u0301 Vie\u0323\u0302t Nam, Ａ\u0301, n\u0303\u0303\u0303, क्षत्रिय, ᄒ\u1161\u11ab (jamo).",
    "Controls: a\x01b\x02c\x7fd\x85e\u200bf\u200eg\u200fh\ufeffi\u2028j\u2029k\tl\r\nm\x0bn\x0co\x1cp\u00a0q\u3000r\ufffds.",
    "Compatibility: ﬁne ﬂow ① ½ ² Ⅻ ＡＢＣ ｱｲｳ ﾊﾟ ㌀ ℌ 𝐁𝐨𝐥𝐝 ～ ~ ﻻ\u064e ʰ.",
    "Specials as text: <s> </s> <pad> <unk> <mask> [CLS] [MASK] ## Ġword ▁word ĊĠ a<mask>b.",
    "Long: " + "pneumonoultramicroscopicsilicovolcanoconiosis" * 8 + " " + "QmFzZTY0" * 300 + " " + "漢字" * 200,
    "Mixed scripts in one word: abcабвαβγ漢字かなカナ한글אבגابج123٤٥٦.",
    "Digits and punctuation: 3.14159, 1,000,000; (x+y)*z=42?! «quotes» „low“ ‘single’ — dash…",
]


@functools.cache
def mixed_texts() -> tuple[str, ...]:
    from pipelines.documents.builtin_corpus import iter_documents

    english = [d["text"] for d in iter_documents(20_000)][:5]
    parts = [*(man_text(lang) for lang in ("ja", "zh_CN", "ko", "ru")), *(catalog_text(lang) for lang in ("ar", "he"))]
    real = [line for part in parts for line in part]
    assert sum(map(len, parts[:3])) and sum(map(len, parts[4:])), "the machine's Japanese, Chinese, Korean, Arabic, Hebrew text"
    return tuple(english + real + HARD_CASES)
