"""The masker: a padded batch (trainer/data/collate.py) -> masked batch with MLM targets, and the targets of the
heads its strategy adds (SpanBERT's SBO).

In:  a collated batch `input_ids` (batch, seq) with its `special_mask` (True at [CLS]/[SEP]/[PAD]) and
     an explicit `numpy.random.Generator` for `Masker.__call__`.
Out: numpy arrays ready for `torch.from_numpy`: the masked `input_ids`, the selected positions and their
     original ids (`mlm_positions`, `mlm_labels`, padded with 0 / IGNORE_INDEX: trainer/heads.py's mlm row), and
     the targets the strategy adds (`span`: `sbo_left`, `sbo_right`, `sbo_rel_pos`, `sbo_labels`).

The budget of a sequence with n non-special tokens is `max(1, floor(mask_prob * n + 0.5))` tokens, capped at
`max_predictions`; the strategy (trainer/masking/strategies.py) selects the tokens, the masker replaces them:
80% [MASK], 10% a random token, 10% unchanged, decided per token or by the strategy (SpanBERT: per span).
The work is numpy over the whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schemas.tokenizer_formats import TOKENIZER_FORMATS
from trainer.heads import IGNORE_INDEX
from trainer.masking.config import MaskingConfig
from trainer.masking.rows import next_index, pack_rows
from trainer.masking.strategies import MASKING_STRATEGIES


class Masker:
    """Masks collated batches; one instance per loader worker, the Generator passed per call."""

    @classmethod
    def for_manifest(cls, config: MaskingConfig, manifest, unigram_counts: Sequence[int] | None = None) -> Masker:
        """The Masker for a prep run's vocabulary of any tokenizer kind (schemas/tokenizer_formats.py): its special and
        reserved tokens are never selected nor drawn, its word marks ('##' continues a word, 'Ġ' and '▁' start one)
        give whole-word and span masking their words."""
        tokens = manifest.read_vocab_tokens()
        kind = TOKENIZER_FORMATS[manifest.tokenizer]
        continuation = manifest.read_word_boundary().continuation_flags(tokens, set(kind.special_tokens))
        return cls(config, vocab_size=len(tokens), special_ids=kind.never_produced(tokens),
                   mask_id=manifest.special_id("mask_token"), continuation=np.asarray(continuation, dtype=bool),
                   unigram_counts=unigram_counts)

    def __init__(
        self,
        config: MaskingConfig,
        *,
        vocab_size: int,
        special_ids: Sequence[int],
        mask_id: int,
        continuation: np.ndarray | None = None,
        unigram_counts: np.ndarray | None = None,
    ) -> None:
        """`special_ids` ([PAD], [UNK], [CLS], [SEP], [MASK], ...) and `mask_id` are never drawn as random
        tokens. `continuation`: (vocab_size,) bool, True for '##' pieces (needed by a strategy of whole words).
        `unigram_counts`: (vocab_size,) corpus counts (needed by random_token_dist "unigram")."""
        self.config = config
        self.mask_id = int(mask_id)
        if not 0 <= self.mask_id < vocab_size:
            raise ValueError(f"mask_id {mask_id} outside the vocabulary of {vocab_size}")
        excluded = np.zeros(vocab_size, dtype=bool)
        excluded[np.asarray(list(special_ids), dtype=np.int64)] = True
        excluded[self.mask_id] = True
        self.strategy = MASKING_STRATEGIES[config.strategy]
        if self.strategy.words:
            if continuation is None:
                raise ValueError(f"strategy {config.strategy!r} needs `continuation` (True for '##' vocabulary pieces)")
            continuation = np.asarray(continuation, dtype=bool)
            if continuation.shape != (vocab_size,):
                raise ValueError(f"continuation must have shape ({vocab_size},), got {continuation.shape}")
        self._continuation = continuation
        if config.random_token_dist == "unigram":
            if unigram_counts is None:
                raise ValueError('random_token_dist "unigram" needs `unigram_counts` (corpus count per vocabulary id)')
            counts = np.asarray(unigram_counts, dtype=np.float64)
            if counts.shape != (vocab_size,) or (counts < 0).any():
                raise ValueError(f"unigram_counts must be ({vocab_size},) non-negative counts, got {counts.shape}")
            self._unigram_cdf = np.cumsum(np.where(excluded, 0.0, counts))
            if self._unigram_cdf[-1] <= 0:
                raise ValueError("unigram_counts give no mass to any non-special token")
        else:
            self._candidates = np.flatnonzero(~excluded)
            if self._candidates.size == 0:
                raise ValueError("every vocabulary id is special: no random replacement token exists")
        p, k = config.span_geometric_p, np.arange(config.max_span_words)
        weights = p * (1.0 - p) ** k  # P(length = k + 1) before truncation
        self.span_pmf = weights / weights.sum()  # of a span's length in words (trainer/masking/spans.py)
        self.span_words = k + 1.0
        self._span_cdf = np.cumsum(self.span_pmf)
        self.mean_span_words = float(((k + 1) * weights).sum() / weights.sum())

    def random_tokens(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """`size` replacement ids from the configured distribution (never a special id)."""
        if self.config.random_token_dist == "unigram":
            draws = rng.random(size) * self._unigram_cdf[-1]
            # side="right" skips zero-count ids (their cdf step is empty)
            return np.minimum(np.searchsorted(self._unigram_cdf, draws, side="right"), self._unigram_cdf.size - 1)
        return self._candidates[rng.integers(0, self._candidates.size, size=size)]

    def span_lengths(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """`size` span lengths in whole words from the truncated geometric distribution."""
        return np.minimum(np.searchsorted(self._span_cdf, rng.random(size), side="right"), self._span_cdf.size - 1) + 1

    def __call__(
        self, input_ids: np.ndarray, special_mask: np.ndarray, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """Mask a (batch, seq) batch; see the module docstring for the keys returned."""
        if input_ids.ndim != 2 or special_mask.shape != input_ids.shape:
            raise ValueError(f"input_ids {input_ids.shape} and special_mask {special_mask.shape}: not equal 2-D shapes")
        special = special_mask.astype(bool, copy=False)
        n_tokens = (~special).sum(axis=1)
        budget = np.maximum(1, np.floor(self.config.mask_prob * n_tokens + 0.5)).astype(np.int64)
        budget[n_tokens == 0] = 0
        cap = self.config.max_predictions
        if cap is not None:
            budget = np.minimum(budget, cap)
        words = None
        if self.strategy.words:
            word_start = ~special & ~self._continuation[input_ids]
            word_start[:, 1:] |= ~special[:, 1:] & special[:, :-1]  # a segment's first token starts a word
            word_start[:, 0] = ~special[:, 0]
            words = word_start, np.where(word_start, next_index(word_start | special) - np.arange(special.shape[1]), 0)
        selected, extras = self.strategy.select(self, special, words, budget, rng)
        return self._finish(input_ids, selected, extras, rng)

    def _finish(self, input_ids, selected, extras, rng) -> dict[str, np.ndarray]:
        flat, cols, packed, width = pack_rows(selected)
        batch = input_ids.shape[0]
        positions = np.zeros((batch, width), np.int64)
        labels = np.full((batch, width), IGNORE_INDEX, np.int64)
        positions.reshape(-1)[packed] = cols
        labels.reshape(-1)[packed] = input_ids.reshape(-1)[flat]
        decision = extras["decision"].reshape(-1)[flat] if "decision" in extras else rng.random(flat.size)
        mask_frac, random_frac = self.config.mask_token_frac, self.config.random_token_frac
        masked = input_ids.astype(np.int64, copy=True)
        masked.reshape(-1)[flat[decision < mask_frac]] = self.mask_id
        random_at = flat[(decision >= mask_frac) & (decision < mask_frac + random_frac)]
        masked.reshape(-1)[random_at] = self.random_tokens(rng, random_at.size)
        out = {"input_ids": masked, "mlm_positions": positions, "mlm_labels": labels}
        if self.strategy.targets is not None:
            self.strategy.targets(self, out, extras, flat, packed)
        return out
