"""BpeConfig: how a byte-level BPE vocabulary is learned (prep's --vocab-size and --min-frequency).

In:  PrepConfig's flags (pipelines/tokenizer_kinds.py builds it), or vocab_config.json's body.
Out: a frozen, validated config the learner reads and vocab_config.json records.
"""

from __future__ import annotations

import dataclasses

from schemas.config import Config
from schemas.tokenizer_formats import BPE

ALPHABET_SIZE = 256
"""One token per byte: every text is encodable, no unknown token is ever needed."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BpeConfig(Config):
    vocab_size: int = 50265
    """Tokens in all: RoBERTa's five special tokens, the 256 bytes, then one per merge (roberta-base: 50265)."""
    min_frequency: int = 2
    """A pair seen fewer times than this in the counted words is not merged."""

    def __post_init__(self) -> None:
        least = len(BPE.special_tokens) + ALPHABET_SIZE + 1
        if self.vocab_size < least:
            raise ValueError(f"--vocab-size must be at least {least} for --tokenizer bpe (5 special tokens, 256 bytes and "
                             f"one merge), got {self.vocab_size}")
        if self.min_frequency < 1:
            raise ValueError(f"--min-frequency must be >= 1, got {self.min_frequency}")
