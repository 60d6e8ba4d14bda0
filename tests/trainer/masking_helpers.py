"""Masking from a plain token list, for tests: the product builds its Masker from a prep run's manifest
(`Masker.for_manifest`); these build one from a vocabulary's tokens in id order, WordPiece's marks ('##') alone."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainer.masking import Masker as ProductMasker
from trainer.masking import MaskingConfig


def continuation_from_vocab(tokens: Sequence[str]) -> np.ndarray:
    """(vocab_size,) bool: True for WordPiece continuation pieces ('##...'), given the tokens in id order."""
    return np.fromiter((t.startswith("##") for t in tokens), dtype=bool, count=len(tokens))


class Masker(ProductMasker):
    """The product's Masker, plus `for_vocabulary`."""

    @classmethod
    def for_vocabulary(cls, config: MaskingConfig, tokens: Sequence[str], mask_id: int,
                       unigram_counts: Sequence[int] | None = None) -> Masker:
        """The Masker for a vocabulary's tokens (id order): every bracketed token ([PAD], [unused3], ...) is special."""
        specials = [i for i, t in enumerate(tokens) if t.startswith("[") and t.endswith("]")]
        return cls(config, vocab_size=len(tokens), special_ids=specials, mask_id=mask_id,
                   continuation=continuation_from_vocab(tokens), unigram_counts=unigram_counts)
