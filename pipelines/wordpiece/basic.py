"""BERT basic tokenization, character for character the way `tokenizers` 0.23 does it.

In:  a string of raw text and the normalization flags (lowercase, strip_accents, handle_chinese_chars).
Out: the list of words that `BertNormalizer(clean_text=True, ...)` followed by `BertPreTokenizer` yields.

`tokenizers` does not use one Unicode version: its character categories come from the Rust crate
`unicode_categories` (Unicode 8.0), its NFD from `unicode-normalization-alignments` (Unicode 9: it does not
know U+1DF6, added in 10.0), its whitespace and lowercase from the Rust standard library (Unicode 17 in the
0.23 wheels: it lowercases Beria Erfe). Python's `unicodedata` is another version again (14.0 on 3.11,
15.x on 3.12/3.13), so classes derived from `unicodedata.category` get hundreds of characters wrong
(measured on 3.11: 385 marks, 105 punctuation characters, 13 format characters, 55 lowercase mappings, and
canonical reordering around 188 marks tokenizers does not know). The tables below are therefore the sets
tokenizers itself exhibits, read off it one code point at a time; tests/pipelines/test_wordpiece.py checks
every code point of planes 0-3 against the installed `tokenizers`. They hold on any Python >= 3.11; on 3.10
(Unicode 13) the Unicode 14 case pairs (Vithkuqi, a few Latin letters) would not be lowercased.

Order of operations, as in tokenizers' BertNormalizer: drop control/format/private-use characters (and NUL,
U+FFFD), map whitespace to spaces, put spaces around CJK ideographs, NFD + drop non-spacing marks (when
stripping accents), lowercase one character at a time (so a final capital sigma becomes 'σ', not 'ς').
BertPreTokenizer then splits on whitespace and isolates each punctuation character.
"""

from __future__ import annotations

import bisect
import re
import unicodedata


def _char_class(ranges: str, limit: int = 0x10FFFF) -> str:
    """'21-2F 3A 5B-60' (hex code points) -> the body of a regex character class, clipped at `limit`."""
    parts = []
    for item in ranges.split():
        lo, _, hi = item.partition("-")
        first, last = int(lo, 16), min(int(hi or lo, 16), limit)
        if first <= last:
            parts.append(f"\\U{first:08X}" + (f"-\\U{last:08X}" if last > first else ""))
    return "".join(parts)


# Removed by clean_text: Cc, Cf and Co as of Unicode 8.0, plus NUL and U+FFFD (\t \n \r are whitespace).
_REMOVED = """
0-8 B-C E-1F 7F-9F AD 600-605 61C 6DD 70F 180E 200B-200F 202A-202E 2060-2064 2066-206F E000-F8FF FEFF
FFF9-FFFB FFFD 110BD 1BCA0-1BCA3 1D173-1D17A E0001 E0020-E007F F0000-FFFFD 100000-10FFFD
"""
# Rust's char::is_whitespace, less the characters removed above (VT, FF, NEL, U+1C-1F are dropped, not split on).
_WHITESPACE = "9-A D 20 A0 1680 2000-200A 2028-2029 202F 205F 3000"
# ASCII punctuation plus Unicode 8.0's P* categories (U+166D and U+111C9 were Po then, So now).
_PUNCTUATION = """
21-2F 3A-40 5B-60 7B-7E A1 A7 AB B6-B7 BB BF 37E 387 55A-55F 589-58A 5BE 5C0 5C3 5C6 5F3-5F4 609-60A
60C-60D 61B 61E-61F 66A-66D 6D4 700-70D 7F7-7F9 830-83E 85E 964-965 970 AF0 DF4 E4F E5A-E5B F04-F12 F14
F3A-F3D F85 FD0-FD4 FD9-FDA 104A-104F 10FB 1360-1368 1400 166D-166E 169B-169C 16EB-16ED 1735-1736
17D4-17D6 17D8-17DA 1800-180A 1944-1945 1A1E-1A1F 1AA0-1AA6 1AA8-1AAD 1B5A-1B60 1BFC-1BFF 1C3B-1C3F
1C7E-1C7F 1CC0-1CC7 1CD3 2010-2027 2030-2043 2045-2051 2053-205E 207D-207E 208D-208E 2308-230B 2329-232A
2768-2775 27C5-27C6 27E6-27EF 2983-2998 29D8-29DB 29FC-29FD 2CF9-2CFC 2CFE-2CFF 2D70 2E00-2E2E 2E30-2E42
3001-3003 3008-3011 3014-301F 3030 303D 30A0 30FB A4FE-A4FF A60D-A60F A673 A67E A6F2-A6F7 A874-A877
A8CE-A8CF A8F8-A8FA A8FC A92E-A92F A95F A9C1-A9CD A9DE-A9DF AA5C-AA5F AADE-AADF AAF0-AAF1 ABEB FD3E-FD3F
FE10-FE19 FE30-FE52 FE54-FE61 FE63 FE68 FE6A-FE6B FF01-FF03 FF05-FF0A FF0C-FF0F FF1A-FF1B FF1F-FF20
FF3B-FF3D FF3F FF5B FF5D FF5F-FF65 10100-10102 1039F 103D0 1056F 10857 1091F 1093F 10A50-10A58 10A7F
10AF0-10AF6 10B39-10B3F 10B99-10B9C 11047-1104D 110BB-110BC 110BE-110C1 11140-11143 11174-11175
111C5-111C9 111CD 111DB 111DD-111DF 11238-1123D 112A9 114C6 115C1-115D7 11641-11643 1173C-1173E
12470-12474 16A6E-16A6F 16AF5 16B37-16B3B 16B44 1BC9F 1DA87-1DA8B
"""
# Non-spacing marks (Mn) as of Unicode 8.0, dropped after NFD when stripping accents.
_NONSPACING_MARKS = """
300-33F 342 345-36F 483-487 591-5BD 5BF 5C1-5C2 5C4-5C5 5C7 610-61A 64B-65F 670 6D6-6DC 6DF-6E4 6E7-6E8
6EA-6ED 711 730-74A 7A6-7B0 7EB-7F3 816-819 81B-823 825-827 829-82D 859-85B 8E3-902 93A 93C 941-948 94D
951-957 962-963 981 9BC 9C1-9C4 9CD 9E2-9E3 A01-A02 A3C A41-A42 A47-A48 A4B-A4D A51 A70-A71 A75 A81-A82
ABC AC1-AC5 AC7-AC8 ACD AE2-AE3 B01 B3C B3F B41-B44 B4D B56 B62-B63 B82 BC0 BCD C00 C3E-C40 C46-C47
C4A-C4D C55-C56 C62-C63 C81 CBC CBF CC6 CCC-CCD CE2-CE3 D01 D41-D44 D4D D62-D63 DCA DD2-DD4 DD6 E31
E34-E3A E47-E4E EB1 EB4-EB9 EBB-EBC EC8-ECD F18-F19 F35 F37 F39 F71-F72 F74 F77 F79-F7E F80 F82-F84
F86-F87 F8D-F92 F94-F97 F99-F9C F9E-FA1 FA3-FA6 FA8-FAB FAD-FB8 FBA-FBC FC6 102D-1030 1032-1037
1039-103A 103D-103E 1058-1059 105E-1060 1071-1074 1082 1085-1086 108D 109D 135D-135F 1712-1714 1732-1734
1752-1753 1772-1773 17B4-17B5 17B7-17BD 17C6 17C9-17D3 17DD 180B-180D 18A9 1920-1922 1927-1928 1932
1939-193B 1A17-1A18 1A1B 1A56 1A58-1A5E 1A60 1A62 1A65-1A6C 1A73-1A7C 1A7F 1AB0-1ABD 1B00-1B03 1B34
1B36-1B3A 1B3C 1B42 1B6B-1B73 1B80-1B81 1BA2-1BA5 1BA8-1BA9 1BAB-1BAD 1BE6 1BE8-1BE9 1BED 1BEF-1BF1
1C2C-1C33 1C36-1C37 1CD0-1CD2 1CD4-1CE0 1CE2-1CE8 1CED 1CF4 1CF8-1CF9 1DC0-1DF5 1DFC-1DFF 20D0-20DC 20E1
20E5-20F0 2CEF-2CF1 2D7F 2DE0-2DFF 302A-302D 3099-309A A66F A674-A67D A69E-A69F A6F0-A6F1 A802 A806 A80B
A825-A826 A8C4 A8E0-A8F1 A926-A92D A947-A951 A980-A982 A9B3 A9B6-A9B9 A9BC A9E5 AA29-AA2E AA31-AA32
AA35-AA36 AA43 AA4C AA7C AAB0 AAB2-AAB4 AAB7-AAB8 AABE-AABF AAC1 AAEC-AAED AAF6 ABE5 ABE8 ABED FB1E
FE00-FE0F FE20-FE2F 101FD 102E0 10376-1037A 10A01-10A03 10A05-10A06 10A0C-10A0F 10A38-10A3A 10A3F
10AE5-10AE6 11001 11038-11046 1107F-11081 110B3-110B6 110B9-110BA 11100-11102 11127-1112B 1112D
11130-11134 11173 11180-11181 111B6-111BE 111CA-111CC 1122F-11231 11234 11236-11237 112DF 112E3-112EA
11300-11301 1133C 11340 11366-1136C 11370-11374 114B3-114B8 114BA 114BF-114C0 114C2-114C3 115B2-115B5
115BC-115BD 115BF-115C0 115DC-115DD 11633-1163A 1163D 1163F-11640 116AB 116AD 116B0-116B5 116B7
1171D-1171F 11722-11725 11727-1172B 16AF0-16AF4 16B30-16B36 16F8F-16F92 1BC9D-1BC9E 1D167-1D169
1D17B-1D182 1D185-1D18B 1D1AA-1D1AD 1D242-1D244 1DA00-1DA36 1DA3B-1DA6C 1DA75 1DA84 1DA9B-1DA9F
1DAA1-1DAAF 1E8D0-1E8D6 E0100-E01EF
"""
# The CJK blocks tokenizers' is_chinese_char names (each ideograph becomes a word of its own).
_CJK = "3400-4DBF 4E00-9FFF F900-FAFF 20000-2A6DF 2A700-2B81F 2B920-2CEAF 2F800-2FA1F"
# Characters tokenizers' NFD tables do not know (Unicode 10-17 additions) but a recent Python decomposes or
# gives a non-zero combining class, so Python would decompose or reorder them where tokenizers holds them as
# plain starters. Read off unicodedata2 17.0 against tokenizers.normalizers.NFD, so it covers Python 3.10-3.14.
_NFD_OPAQUE = """
5C8-5C9 7FD 897-89F 8CA-8D3 9FE C3C D3B-D3C EBA 1715 1ABF-1AF0 1DF6-1DFA A82C 105C9 105E4 10D24-10D27
10D69-10D6D 10EAB-10EAC 10ECB-10ECF 10EF0-10EFB 10EFD-10EFF 10F46-10F50 10F82-10F85 11070 1133B 11383
11385 1138E 11391 113C5 113C7-113C8 113CE-113D0 1145E 11839-1183A 11938 1193D-1193E 11943 119E0 11A34
11A47 11A99 11D42 11D44-11D45 11D97 11F41-11F42 16121-16128 1612F 16D68-16D6A 16FF0-16FF1 1D127-1D128
1D250-1D252 1D25B-1D25C 1D25F 1D280-1D281 1E08F 1E130-1E136 1E2AE 1E2EC-1E2EF 1E4EC-1E4EF 1E5EE-1E5EF
1E6E3 1E6E6 1E6EE-1E6EF 1E6F5
"""
# Lowercase mappings Rust's std (Unicode 17) has and Python 3.11's str.lower (Unicode 14) lacks:
# 'first-last>target' maps the range onto consecutive targets.
_LOWER_EXTRA = "1C89>1C8A A7CB>264 A7CC>A7CD A7CE>A7CF A7D2>A7D3 A7D4>A7D5 A7DA>A7DB A7DC>19B 10D50-10D65>10D70 16EA0-16EB8>16EBB"


def _lower_table() -> dict[int, int]:
    table = {}
    for item in _LOWER_EXTRA.split():
        source, _, target = item.partition(">")
        lo, _, hi = source.partition("-")
        first, last = int(lo, 16), int(hi or lo, 16)
        for offset in range(last - first + 1):
            table[first + offset] = int(target, 16) + offset
    return table


_LOWER_EXTRA_TABLE = _lower_table()
_LOWER_EXTRA_RANGES = " ".join(f"{c:X}" for c in sorted(_LOWER_EXTRA_TABLE))


class _Patterns:
    """The regexes of one normalization, built over code points up to `limit`.

    NOTE: Python's re tests a character class holding only BMP code points against a bitmap, but walks a
    class with supplementary-plane ranges one range at a time: measured on the docstring corpus, dropping
    marks runs at 7 Mchar/s with the full table and 87 Mchar/s with its BMP part. Texts whose
    supplementary-plane characters (emoji, mostly) are all ordinary letters therefore use the BMP tables.
    """

    def __init__(self, limit: int) -> None:
        ws, punct, cjk = (_char_class(r, limit) for r in (_WHITESPACE, _PUNCTUATION, _CJK))
        self.removed = re.compile(f"[{_char_class(_REMOVED, limit)}]+")
        self.marks = re.compile(f"[{_char_class(_NONSPACING_MARKS, limit)}]+")
        self.opaque = re.compile(f"([{_char_class(_NFD_OPAQUE, limit)}])")
        self.lower_extra = re.compile(f"[{_char_class(_LOWER_EXTRA_RANGES, limit)}]")
        # After normalization a word is a maximal run of non-whitespace, non-punctuation characters;
        # punctuation characters (and CJK ideographs, when isolated) are words of one character.
        self.words = re.compile(f"[{punct}]|[^{ws}{punct}]+")
        self.words_cjk = re.compile(f"[{cjk}{punct}]|[^{ws}{punct}{cjk}]+")


_BMP = _Patterns(0xFFFF)
_ALL = _Patterns(0x10FFFF)
_SUPPLEMENTARY_RE = re.compile("[\U00010000-\U0010FFFF]")


def _special_supplementary() -> tuple[list[int], list[int]]:
    """Sorted, merged (starts, ends) of every supplementary-plane code point some table above names."""
    spans = []
    for table in (_REMOVED, _PUNCTUATION, _NONSPACING_MARKS, _CJK, _NFD_OPAQUE, _LOWER_EXTRA_RANGES):
        for item in table.split():
            lo, _, hi = item.partition("-")
            first, last = int(lo, 16), int(hi or lo, 16)
            if last > 0xFFFF:
                spans.append((max(first, 0x10000), last))
    merged: list[list[int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return [a for a, _ in merged], [b for _, b in merged]


_SPECIAL_STARTS, _SPECIAL_ENDS = _special_supplementary()


def _patterns_for(text: str) -> _Patterns:
    if _SUPPLEMENTARY_RE.search(text) is None:
        return _BMP
    for ch in set(_SUPPLEMENTARY_RE.findall(text)):
        i = bisect.bisect_right(_SPECIAL_STARTS, ord(ch)) - 1
        if i >= 0 and ord(ch) <= _SPECIAL_ENDS[i]:
            return _ALL
    return _BMP


# ASCII fast path. ASCII holds controls (removed), four whitespace characters, punctuation (33-47, 58-64,
# 91-96, 123-126) and alphanumerics, so after removing controls a word is a run of alphanumerics and every
# other non-space character is a punctuation word.
_ASCII_CONTROLS = bytes([*range(0, 9), 11, 12, *range(14, 32), 127])
_ASCII_CONTROLS_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")
_ASCII_WORDS_RE = re.compile(r"[0-9A-Za-z]+|[^0-9A-Za-z \t\n\r]")


def _nfd(text: str, patterns: _Patterns) -> str:
    if patterns.opaque.search(text) is None:
        return unicodedata.normalize("NFD", text)
    # To tokenizers an opaque character is a starter (combining class 0) that does not decompose, and
    # canonical reordering never crosses a starter: decomposing the pieces between opaque characters
    # separately is what tokenizers does to the whole.
    pieces = patterns.opaque.split(text)
    return "".join(p if i % 2 else unicodedata.normalize("NFD", p) for i, p in enumerate(pieces))


def _lower(text: str, patterns: _Patterns) -> str:
    # Python's str.lower turns a word-final 'Σ' into 'ς'; tokenizers maps each character alone ('σ').
    if "Σ" in text:
        text = text.replace("Σ", "σ")
    text = text.lower()
    if patterns.lower_extra.search(text) is not None:
        text = text.translate(_LOWER_EXTRA_TABLE)
    return text


def bert_normalize(text: str, *, lowercase: bool, strip_accents: bool | None = None, handle_chinese_chars: bool = True) -> str:
    """tokenizers' BertNormalizer(clean_text=True, handle_chinese_chars, strip_accents, lowercase).normalize_str."""
    if strip_accents is None:
        strip_accents = lowercase
    text = _ALL.removed.sub("", text)
    text = re.sub(f"[{_char_class(_WHITESPACE)}]", " ", text)
    if handle_chinese_chars:
        text = re.sub(f"[{_char_class(_CJK)}]", r" \g<0> ", text)
    if strip_accents:
        text = _ALL.marks.sub("", _nfd(text, _ALL))
    return _lower(text, _ALL) if lowercase else text


def joined_basic_words(texts: list[str], *, lowercase: bool, unless: re.Pattern | None = None) -> list[str] | None:
    """The basic words of every text, each text's words followed by a NUL word, in one regex pass; None unless
    every text is ASCII with no control character (and no match of `unless`): then call basic_words per text.
    The texts are joined by NULs, which the ASCII word pattern yields as words of their own."""
    joined = "\0".join(texts)
    if not joined.isascii() or (unless is not None and unless.search(joined) is not None):
        return None
    raw = joined.encode("ascii")
    if len(raw.translate(None, _ASCII_CONTROLS)) != len(raw) - len(texts) + 1:  # a control besides the NULs
        return None
    words = _ASCII_WORDS_RE.findall(joined.lower() if lowercase else joined)
    words.append("\0")
    return words


def basic_words(text: str, *, lowercase: bool, strip_accents: bool | None = None, handle_chinese_chars: bool = True) -> list[str]:
    """The words tokenizers' BertNormalizer + BertPreTokenizer make of `text` (strip_accents=None: same as lowercase)."""
    if text.isascii():
        raw = text.encode("ascii")
        if len(raw.translate(None, _ASCII_CONTROLS)) != len(raw):  # ~1 GB/s, ten times a regex search
            text = _ASCII_CONTROLS_RE.sub("", text)
        return _ASCII_WORDS_RE.findall(text.lower() if lowercase else text)
    if strip_accents is None:
        strip_accents = lowercase
    patterns = _patterns_for(text)
    # NOTE: whitespace is not mapped to ' ' and CJK ideographs are not padded with spaces here: the word
    # pattern treats every whitespace character as a separator and every ideograph as a word of its own,
    # which gives the same words in one pass less (checked for every code point by the tests).
    text = patterns.removed.sub("", text)
    if strip_accents:
        text = _nfd(text, patterns)
        if patterns is _BMP:  # NFD can bring in supplementary-plane characters (U+FA6C -> U+242EE)
            patterns = _patterns_for(text)
        text = patterns.marks.sub("", text)
    if lowercase:
        text = _lower(text, patterns)
    return (patterns.words_cjk if handle_chinese_chars else patterns.words).findall(text)
