"""Encode text with a WordPiece vocabulary: the ids `tokenizers` gives, several times faster per core.

In:  a vocabulary directory (its vocabulary file and vocab_config.json, as `write_vocab` leaves them) or a token list and
     the normalization flags; then strings of raw text.
Out: token ids without [CLS]/[SEP], equal to
     `tokenizers.BertWordPieceTokenizer(vocab, lowercase=.., strip_accents=..).encode(text, add_special_tokens=False).ids`
     for every input (tests/pipelines/test_wordpiece.py compares them on random Unicode and real text).

How it gets its speed in pure Python: the words of a text come from one regex pass (an ASCII-only pattern
when `str.isascii()`, which holds for most documents), and each distinct word is segmented once and kept
in a dict; a document is then `chain(map(cache.__getitem__, words))`, which runs in C. The cache is
cleared when it passes `cache_size` words, so memory stays bounded on any corpus.

What it reproduces of tokenizers beyond BERT's basic tokenization (pipelines/wordpiece/basic.py):
  * the five special tokens are "added tokens" there: their literal text ("[MASK]") is matched in the raw
    input before normalization and becomes the special id; the text around them is encoded separately;
  * a word longer than `max_input_chars_per_word` (100) characters, or one the greedy longest-match-first
    search cannot cover completely, is a single [UNK].
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from itertools import chain

from pipelines.wordpiece.basic import basic_words, joined_basic_words
from pipelines.wordpiece.files import read_vocab_config
from schemas import vocab as vocab_files
from schemas.vocab import CONTINUATION, SPECIAL_TOKENS

DEFAULT_CACHE_SIZE = 500_000


def _new_cache() -> dict[str, tuple[int, ...]]:
    """An empty word cache, but for encode_batch's separator: the NUL word is id -1 (never a word of
    basic_words', which removes control characters)."""
    return {"\0": (-1,)}


class WordPieceEncoder:
    """Greedy longest-match-first WordPiece over BERT basic tokenization, with tokenizers' exact ids."""

    def __init__(
        self,
        tokens: Sequence[str],
        *,
        lowercase: bool,
        strip_accents: bool | None = None,
        handle_chinese_chars: bool = True,
        max_input_chars_per_word: int = 100,
        unk_token: str = "[UNK]",
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self.tokens = list(tokens)
        self.vocab = {token: i for i, token in enumerate(self.tokens)}
        if len(self.vocab) != len(self.tokens):
            duplicates = sorted({t for t in self.tokens if self.tokens.count(t) > 1})[:5]
            raise ValueError(f"vocabulary has duplicate tokens, e.g. {duplicates}")
        if unk_token not in self.vocab:
            raise ValueError(f"vocabulary lacks the unknown token {unk_token!r}")
        self.unk_id = self.vocab[unk_token]
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.handle_chinese_chars = handle_chinese_chars
        self.max_input_chars_per_word = max_input_chars_per_word
        self.cache_size = cache_size
        self._cache = _new_cache()
        # Longest piece worth trying at a word's start and after it, in characters.
        self._max_first = max(len(t) for t in self.tokens)
        self._max_next = max((len(t) - len(CONTINUATION) for t in self.tokens if t.startswith(CONTINUATION)), default=0)
        specials = sorted((t for t in SPECIAL_TOKENS if t in self.vocab), key=lambda t: (-len(t), t))
        self._special_re = re.compile("(" + "|".join(map(re.escape, specials)) + ")") if specials else None

    @classmethod
    def from_directory(cls, directory: str, *, cache_size: int = DEFAULT_CACHE_SIZE) -> WordPieceEncoder:
        """Load the vocabulary and the normalization recorded in vocab_config.json."""
        config = read_vocab_config(directory)
        return cls(
            vocab_files.read_tokens(directory),
            lowercase=config.lowercase,
            strip_accents=config.strip_accents,
            handle_chinese_chars=config.handle_chinese_chars,
            max_input_chars_per_word=config.max_input_chars_per_word,
            cache_size=cache_size,
        )

    def __len__(self) -> int:
        return len(self.tokens)

    def words(self, text: str) -> list[str]:
        """The basic (normalized, pre-tokenized) words of `text`, before WordPiece."""
        return basic_words(
            text, lowercase=self.lowercase, strip_accents=self.strip_accents, handle_chinese_chars=self.handle_chinese_chars
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without [CLS]/[SEP]."""
        if "[" in text and self._special_re is not None and self._special_re.search(text) is not None:
            ids: list[int] = []
            for i, piece in enumerate(self._special_re.split(text)):
                if i % 2:
                    ids.append(self.vocab[piece])
                elif piece:
                    ids.extend(self._encode_words(self.words(piece)))
            return ids
        return self._encode_words(self.words(text))

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        """[encode(t) for t in texts]; one basic-tokenization pass over all of them where that gives the same
        words (ASCII text without control characters or special tokens: most documents' sentences)."""
        texts = texts if isinstance(texts, list) else list(texts)
        words = joined_basic_words(texts, lowercase=self.lowercase, unless=self._special_re) if len(texts) > 1 else None
        if words is None:
            return [self.encode(t) for t in texts]
        # NOTE: the NUL word after each text is id -1 in the cache: the ids of all texts come out of one
        # chain over the cache (per-text calls cost as much as the look-ups), then are cut at the -1s
        ids = self._encode_words(words)
        out, start = [], 0
        for _ in texts:
            end = ids.index(-1, start)
            out.append(ids[start:end])
            start = end + 1
        return out

    def __getstate__(self) -> dict:
        # Pickled into Beam workers: the word cache is rebuilt there, not shipped.
        return {**self.__dict__, "_cache": _new_cache()}

    def _encode_words(self, words: list[str]) -> list[int]:
        cache = self._cache
        try:
            return list(chain.from_iterable(map(cache.__getitem__, words)))
        except KeyError:
            pass
        if len(cache) > self.cache_size:
            cache.clear()
            cache.update(_new_cache())
        for word in words:
            if word not in cache:
                cache[word] = self._segment(word)
        return list(chain.from_iterable(map(cache.__getitem__, words)))

    def _segment(self, word: str) -> tuple[int, ...]:
        n = len(word)
        if n > self.max_input_chars_per_word:
            return (self.unk_id,)
        vocab = self.vocab
        ids = []
        start = 0
        while start < n:
            end = min(n, start + (self._max_next if start else self._max_first))
            while end > start:
                piece = word[start:end] if start == 0 else CONTINUATION + word[start:end]
                token_id = vocab.get(piece)
                if token_id is not None:
                    break
                end -= 1
            else:
                return (self.unk_id,)
            ids.append(token_id)
            start = end
        return tuple(ids)
