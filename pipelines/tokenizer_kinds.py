"""The tokenizer kinds prep learns and encodes with (`--tokenizer`), one object each, in one table: TOKENIZER_KINDS.

    wordpiece  BERT's       pipelines/wordpiece/   basic words,                   WordPiece merges, our encoder
    bpe        RoBERTa's    pipelines/bpe/         GPT-2's byte-level words,      BPE merges,       tokenizers' encoder
    unigram    XLM-R's      pipelines/unigram/     NFKC + '▁' words,              Unigram LM (EM),  tokenizers' encoder

A kind owns everything about itself: its contract row (`format`: schemas/tokenizer_formats.py, the files, special
tokens and word-boundary mark the trainer reads), the settings it learns with (from PrepConfig, and which of prep's
flags do not apply to it), how text becomes the words CountWords counts, the learner and the vocabulary directory it
writes, how a --vocab directory of its kind is checked and copied, and the encoder the Tokenize stage runs. The Beam
stages ask the table (by the name in the vocabulary summary) and never which kind they hold. No Beam import here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pipelines import wordpiece
from pipelines.bpe.byte_level import ByteLevelWords
from pipelines.bpe.config import BpeConfig
from pipelines.bpe.files import reuse_bpe, write_bpe
from pipelines.bpe.learner import learn_bpe
from pipelines.errors import PrepError
from pipelines.unigram.config import UnigramConfig
from pipelines.unigram.files import reuse_unigram, write_unigram
from pipelines.unigram.learner import learn_unigram
from pipelines.unigram.normalizer import UnigramWords
from schemas import vocab as vocab_files
from schemas.hf_tokenizers import read_bpe, read_unigram
from schemas.tokenizer_formats import BPE, UNIGRAM, WORDPIECE


class TokenizersEncoder:
    """Text → ids with `tokenizers`' Rust encoder on a tokenizer.json as schemas/hf_tokenizers.py writes it: the
    pipeline AutoTokenizer builds for RobertaTokenizerFast and XLMRobertaTokenizerFast (a directory transformers saved
    is read and written again that way first: AutoTokenizer keeps only parts of its tokenizer.json)."""

    def __init__(self, tokenizer_json: str):
        from tokenizers import Tokenizer

        self.tokenizer_json = tokenizer_json
        self._tokenizer = Tokenizer.from_str(tokenizer_json)

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

    def __getstate__(self) -> dict:
        return {"tokenizer_json": self.tokenizer_json}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["tokenizer_json"])


def _default_of(prep: Any, name: str) -> Any:
    return {f.name: f.default for f in dataclasses.fields(prep)}[name]


def _refuse(prep: Any, kind: str, flags: Mapping[str, tuple[Any, Any]]) -> None:
    """A PrepError for the first flag set to other than its default that `kind` does not use."""
    for flag, (value, default) in flags.items():
        if value != default:
            raise PrepError(f"{flag} is not a setting of --tokenizer {kind}")


class WordPieceKind:
    """BERT's WordPiece: the vocabulary clozeforge always learned (pipelines/wordpiece/)."""

    name, format, counts_characters = "wordpiece", WORDPIECE, False

    def settings(self, prep: Any) -> wordpiece.VocabConfig:
        return prep.wordpiece

    def check(self, prep: Any) -> None:
        _refuse(prep, self.name, {"--character-coverage": (prep.character_coverage, _default_of(prep, "character_coverage"))})

    def strips_accents(self, prep: Any) -> bool:
        """Whether the vocabulary it learns drops non-spacing marks (uncased: bert-base-uncased's normalisation)."""
        settings = self.settings(prep)
        return settings.lowercase if settings.strip_accents is None else settings.strip_accents

    def words(self, settings: wordpiece.VocabConfig) -> Callable[[Sequence[str]], list[str]]:
        return BasicWords(settings.lowercase, settings.strip_accents, settings.handle_chinese_chars)

    def learn(self, word_counts: Iterable[tuple[str, int]], char_counts: Mapping[str, int] | None,
              settings: wordpiece.VocabConfig, directory: str) -> dict:
        return wordpiece.write_vocab(directory, wordpiece.learn_wordpiece(sorted(word_counts), settings), settings)

    def check_source(self, source: str) -> None:
        tokens = vocab_files.read_tokens(source)
        wordpiece.read_vocab_config(source)
        wordpiece.check_tokens(tokens)
        recorded = (vocab_files.read_config(source) or {}).get("size")
        if recorded is not None and recorded != len(tokens):
            raise ValueError(f"{vocab_files.VOCAB_FILE} holds {len(tokens)} tokens, {vocab_files.CONFIG_FILE} says {recorded}")

    def reuse(self, source: str, directory: str) -> dict:
        return wordpiece.write_vocab(directory, vocab_files.read_tokens(source), wordpiece.read_vocab_config(source))

    def encoder(self, directory: str, cache_size: int = wordpiece.DEFAULT_CACHE_SIZE):
        return wordpiece.WordPieceEncoder.from_directory(directory, cache_size=cache_size)


class BasicWords:
    """A document's sentences → BERT's basic words (picklable). One call per document: a line break separates words
    as a space does (the same words, 30% less CPU than a call per sentence)."""

    def __init__(self, lowercase: bool, strip_accents: bool | None = None, handle_chinese_chars: bool = True):
        self.lowercase, self.strip_accents, self.handle_chinese_chars = lowercase, strip_accents, handle_chinese_chars

    def __call__(self, sentences: Sequence[str]) -> list[str]:
        return wordpiece.basic_words("\n".join(sentences), lowercase=self.lowercase, strip_accents=self.strip_accents,
                                     handle_chinese_chars=self.handle_chinese_chars)


class BpeKind:
    """RoBERTa's byte-level BPE (pipelines/bpe/): cased, no normalization, no unknown token."""

    name, format, counts_characters = "bpe", BPE, False

    def settings(self, prep: Any) -> BpeConfig:
        try:
            return BpeConfig(vocab_size=prep.wordpiece.vocab_size, min_frequency=prep.wordpiece.min_frequency)
        except ValueError as e:
            raise PrepError(str(e)) from None

    def check(self, prep: Any) -> None:
        _refuse(prep, self.name, {"--num-unused": (prep.wordpiece.num_unused, 0),
                                  "--character-coverage": (prep.character_coverage, _default_of(prep, "character_coverage"))})
        self.settings(prep)

    def strips_accents(self, prep: Any) -> bool:
        return False  # byte-level: every byte of the text is kept

    def words(self, settings: BpeConfig) -> Callable[[Sequence[str]], list[str]]:
        return ByteLevelWords()

    def learn(self, word_counts, char_counts, settings: BpeConfig, directory: str) -> dict:
        tokens, merges = learn_bpe(sorted(word_counts), settings)
        return write_bpe(directory, tokens, merges, settings)

    def check_source(self, source: str) -> None:
        read_bpe(source)

    def reuse(self, source: str, directory: str) -> dict:
        return reuse_bpe(source, directory)

    def encoder(self, directory: str, cache_size: int = 0) -> TokenizersEncoder:
        return TokenizersEncoder(read_bpe(directory).tokenizer_json())


class UnigramKind:
    """XLM-R's SentencePiece Unigram (pipelines/unigram/): NFKC, '▁' words, every character of the corpus kept."""

    name, format, counts_characters = "unigram", UNIGRAM, True

    def settings(self, prep: Any) -> UnigramConfig:
        try:
            return UnigramConfig(vocab_size=prep.wordpiece.vocab_size, character_coverage=prep.character_coverage)
        except ValueError as e:
            raise PrepError(str(e)) from None

    def check(self, prep: Any) -> None:
        _refuse(prep, self.name, {"--num-unused": (prep.wordpiece.num_unused, 0),
                                  "--min-frequency": (prep.wordpiece.min_frequency, wordpiece.VocabConfig().min_frequency)})
        self.settings(prep)

    def strips_accents(self, prep: Any) -> bool:
        return False  # NFKC composes, it strips nothing

    def words(self, settings: UnigramConfig) -> Callable[[Sequence[str]], list[str]]:
        return UnigramWords()

    def learn(self, word_counts, char_counts, settings: UnigramConfig, directory: str) -> dict:
        return write_unigram(directory, learn_unigram(sorted(word_counts), char_counts, settings), settings)

    def check_source(self, source: str) -> None:
        read_unigram(source)

    def reuse(self, source: str, directory: str) -> dict:
        return reuse_unigram(source, directory)

    def encoder(self, directory: str, cache_size: int = 0) -> TokenizersEncoder:
        return TokenizersEncoder(read_unigram(directory).tokenizer_json())


TOKENIZER_KINDS = {kind.name: kind for kind in (WordPieceKind(), BpeKind(), UnigramKind())}
"""Every tokenizer kind, by --tokenizer name; the order is --help's."""
