"""UnigramConfig: how a Unigram vocabulary is learned (prep's --vocab-size and --character-coverage; the rest are
SentencePiece's defaults).

In:  PrepConfig's flags (pipelines/tokenizer_kinds.py builds it), or vocab_config.json's body.
Out: a frozen, validated config the learner reads and vocab_config.json records.
"""

from __future__ import annotations

import dataclasses

from schemas.config import Config, flag
from schemas.tokenizer_formats import UNIGRAM


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnigramConfig(Config):
    vocab_size: int = 250002
    """Tokens in all: XLM-R's five special tokens and the pieces (xlm-roberta-base: 250002)."""
    character_coverage: float = 1.0
    """Share of the corpus's characters (by count) the vocabulary keeps as pieces, the most frequent first; the rest
    encode as <unk>. 1.0 keeps every character of the corpus representable (XLM-R's tokenizer has no byte fallback)."""
    max_piece_length: int = flag(16, hidden=True)
    """Longest piece, in characters (SentencePiece's max_sentencepiece_length)."""
    max_word_length: int = flag(256, hidden=True)
    """Longer words are left out of learning (SentencePiece skips sentences over max_sentence_length); their
    characters still count for the coverage, and they encode like any word."""
    seed_size: int = flag(1_000_000, hidden=True)
    """Substrings the learning starts from (SentencePiece's seed_sentencepiece_size)."""
    shrinking_factor: float = flag(0.75, hidden=True)
    """Share of the pieces each pruning round keeps."""
    sub_iterations: int = flag(2, hidden=True)
    """EM iterations between pruning rounds."""

    def __post_init__(self) -> None:
        least = len(UNIGRAM.special_tokens) + 1
        checks = [
            (self.vocab_size > least, f"--vocab-size must exceed {least} for --tokenizer unigram, got {self.vocab_size}"),
            (0.0 < self.character_coverage <= 1.0, f"--character-coverage must be in (0, 1], got {self.character_coverage}"),
            (self.max_piece_length >= 1, f"max_piece_length must be >= 1, got {self.max_piece_length}"),
            (self.max_word_length >= self.max_piece_length, "max_word_length must be >= max_piece_length"),
            (self.seed_size >= 1, f"seed_size must be >= 1, got {self.seed_size}"),
            (0.0 < self.shrinking_factor < 1.0, f"shrinking_factor must be in (0, 1), got {self.shrinking_factor}"),
            (self.sub_iterations >= 1, f"sub_iterations must be >= 1, got {self.sub_iterations}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
