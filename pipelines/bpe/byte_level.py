"""GPT-2's byte-level alphabet and pre-tokenizer: text → the words a byte-level BPE learns from and encodes.

In:  sentences of raw text.
Out: their words as GPT-2's pre-tokenizer splits them ('s 't 're ..., ' ?\\p{L}+', ' ?\\p{N}+', ' ?[^\\s\\p{L}\\p{N}]+',
     runs of white space), each written in the byte-level alphabet: every UTF-8 byte is one printable character
     (`BYTE_CHARS`), a space 'Ġ', a line feed 'Ċ', so a word is a string of 256 possible symbols and no text is
     ever unknown.

The words are `tokenizers`' own ByteLevel pre-tokenizer's (add_prefix_space=False, use_regex=True: RoBERTa's), the one
the Tokenize stage's encoder and AutoTokenizer run, so the learner counts exactly the words the encoder will see.
Each sentence is split alone, as the Tokenize stage encodes it: its first word has no 'Ġ'.
"""

from __future__ import annotations

from collections.abc import Sequence


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from a byte to a printable character: the bytes that are printable Latin-1 characters other than
    the space (! to ~, ¡ to ¬, ® to ÿ) stand for themselves; the other 68, in byte order, take U+0100, U+0101, ..."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


BYTE_CHARS = tuple(bytes_to_unicode()[b] for b in range(256))
"""The 256 symbols of the alphabet, in byte order: the first tokens after the special ones."""


class ByteLevelWords:
    """Sentences → their byte-level words (picklable: the pre-tokenizer is made on first use in each worker)."""

    def __init__(self, add_prefix_space: bool = False):
        self.add_prefix_space = add_prefix_space
        self._pre = None

    def __call__(self, sentences: Sequence[str]) -> list[str]:
        if self._pre is None:
            from tokenizers.pre_tokenizers import ByteLevel

            self._pre = ByteLevel(add_prefix_space=self.add_prefix_space, trim_offsets=True, use_regex=True)
        words: list[str] = []
        for sentence in sentences:
            words.extend(word for word, _ in self._pre.pre_tokenize_str(sentence))
        return words

    def __getstate__(self) -> dict:
        return {"add_prefix_space": self.add_prefix_space, "_pre": None}
