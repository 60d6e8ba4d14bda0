"""XLM-R's normalization for clozeforge's Unigram vocabularies: NFKC with SentencePiece's `nmt_nfkc` rules, as the
precompiled charsmap a tokenizer.json carries, and the words the learner counts.

In:  nothing (the rules come from Python's unicodedata); then sentences of raw text.
Out: `charsmap()`: the charsmap bytes (pipelines/unigram/darts.py) that `tokenizers`' Precompiled normalizer, and so
     XLMRobertaTokenizerFast, applies; `UnigramWords`: sentences → their words as XLM-R's tokenizer sees them (the
     normalizer, then WhitespaceSplit and Metaspace('▁', prepend always): '▁hello').

The rules, one per code point (`rules()`): a character NFKC changes becomes its NFKC form; white space (str.isspace,
and nmt_nfkc's zero-width space, LRM, RLM, ▁, BOM, U+FFFD) becomes a space; other control characters (Cc) are removed;
FULLWIDTH TILDE stays (nmt_nfkc keeps it: Japanese tells it from '~'). So no word holds white space, a line break
or a control character, and vocab.txt can hold every piece.

NOTE: transformers 5's XLMRobertaTokenizer keeps a tokenizer.json's normalizer only as a Precompiled charsmap (it builds
the rest itself), hence this format rather than `tokenizers`' NFKC normalizer. `tokenizers` applies a charsmap one
grapheme at a time and a grapheme shorter than 6 bytes whole, by the shortest key that starts it: a character a rule
rewrites takes the combining marks of its grapheme with it ('Ａ' + U+0301 → 'A'). XLM-R's own tokenizer does the same
under transformers; prep's documents are NFC already (--unicode-form), and with --unicode-form NFKC no rule applies.
"""

from __future__ import annotations

import base64
import functools
import struct
import unicodedata
from collections.abc import Sequence

from pipelines.unigram import darts

_NMT_SPACES = {0x09, 0x0A, 0x0C, 0x0D, 0x1680, 0x200B, 0x200E, 0x200F, 0x2028, 0x2029, 0x2581, 0xFEFF, 0xFFFD}
_KEPT = {0xFF5E}


@functools.cache
def rules() -> dict[str, str]:
    """{character: what it becomes} for every character the normalization changes."""
    out = {}
    for cp in range(1, 0x110000):
        if 0xD800 <= cp < 0xE000 or cp in _KEPT:
            continue
        ch = chr(cp)
        if cp in _NMT_SPACES or ch.isspace():
            target = " "
        elif unicodedata.category(ch) == "Cc":
            target = ""
        else:
            target = unicodedata.normalize("NFKC", ch)
        if target != ch:
            out[ch] = target
    return out


@functools.cache
def charsmap() -> bytes:
    """SentencePiece's precompiled_charsmap of `rules()`: the trie's size in bytes (u32, little-endian), its units,
    then the replacement strings, each ending in NUL (a key's value is where its replacement starts)."""
    table = rules()
    offsets: dict[str, int] = {}
    blob = bytearray()
    for target in sorted(set(table.values())):
        offsets[target] = len(blob)
        blob += target.encode("utf-8") + b"\0"
    keys = sorted((ch.encode("utf-8"), offsets[target]) for ch, target in table.items())
    units = darts.build(keys)
    return struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + bytes(blob)


def charsmap_base64() -> str:
    """`charsmap()` as tokenizer.json holds it."""
    return base64.b64encode(charsmap()).decode("ascii")


class UnigramWords:
    """Sentences → their '▁' words (picklable: the normalizer and pre-tokenizer are made on first use in each worker).

    `charsmap` is the base64 charsmap of the vocabulary's tokenizer.json (None: no normalization); default: `charsmap()`."""

    def __init__(self, charsmap: str | None = "", add_prefix_space: bool = True):
        self.charsmap, self.add_prefix_space = charsmap, add_prefix_space
        self._steps = None

    def _build(self):
        from tokenizers import normalizers, pre_tokenizers

        data = globals()["charsmap"]() if self.charsmap == "" else (None if self.charsmap is None else base64.b64decode(self.charsmap))
        normalizer = normalizers.Precompiled(data) if data is not None else None
        scheme = "always" if self.add_prefix_space else "never"
        pre = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                       pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=True)])
        return normalizer, pre

    def __call__(self, sentences: Sequence[str]) -> list[str]:
        if self._steps is None:
            self._steps = self._build()
        normalizer, pre = self._steps
        if self.charsmap == "" and self.add_prefix_space:
            # NOTE: after `rules()` the only white space left is ' ' and no '▁' (U+2581 becomes a space), so
            # WhitespaceSplit + Metaspace are str.split() and a '▁' in front: the same words (tests/pipelines/
            # test_unigram.py), 3x faster than a pre-tokenizer call per sentence. A line break never joins graphemes.
            return ["▁" + word for word in normalizer.normalize_str("\n".join(sentences)).split()]
        words: list[str] = []
        for sentence in sentences:
            text = normalizer.normalize_str(sentence) if normalizer is not None else sentence
            words.extend(word for word, _ in pre.pre_tokenize_str(text))
        return words

    def __getstate__(self) -> dict:
        return {"charsmap": self.charsmap, "add_prefix_space": self.add_prefix_space, "_steps": None}
