"""MaskingConfig: how a run masks its batches (`train --masking ...` and the fields below).

In:  the flags (or a run's recorded `masking`). Out: a frozen, validated config; its `strategy` is a row of
     trainer/masking/strategies.py.
"""

from __future__ import annotations

import dataclasses

from schemas.config import Config, check_choices, flag
from trainer.masking.strategies import MASKING_STRATEGIES

RANDOM_TOKEN_DISTS = ("uniform", "unigram")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaskingConfig(Config):
    """Masking (a fresh mask every time a pair is drawn)"""

    strategy: str = flag("bert", name="--masking", choices=tuple(MASKING_STRATEGIES))
    """"bert" (tokens), "wwm" (whole words) or "span" (SpanBERT spans of whole words, with SBO targets)."""
    mask_prob: float = 0.15
    """Fraction of the non-special tokens of each sequence selected for prediction."""
    mask_token_frac: float = 0.8
    """Of the selected tokens (spans, for "span"): the share replaced by [MASK]."""
    random_token_frac: float = 0.1
    """Of the selected: the share replaced by a random token; the rest is left unchanged."""
    random_token_dist: str = flag("uniform", choices=RANDOM_TOKEN_DISTS)
    """"uniform" over the non-special ids, or "unigram" in proportion to the corpus counts of the ids."""
    span_geometric_p: float = 0.2
    """p of SpanBERT's geometric span-length distribution (in whole words)."""
    max_span_words: int = 10
    """Longest span in whole words; the geometric distribution is truncated here and renormalised."""
    max_predictions: int | None = None
    """Cap on selected tokens per sequence (BERT's max_predictions_per_seq: 20 at seq 128, 80 at 512).
    None: no cap besides the budget rule; the output width P is the most selected in the batch either way."""
    sbo_max_positions_per_span: int = 15
    """Span tokens deeper than this get no SBO target (SpanBERT's --max-pair-targets 15); `sbo_rel_pos`
    is always below it, so the model's relative-position table needs at least this many rows."""

    @property
    def heads(self) -> tuple[str, ...]:
        """The heads beyond MLM whose targets this strategy adds (its row's `heads`: SBO for span masking)."""
        return MASKING_STRATEGIES[self.strategy].heads

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("mask_prob", "mask_token_frac", "random_token_frac"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.mask_token_frac + self.random_token_frac > 1.0 + 1e-9:
            raise ValueError(
                f"mask_token_frac + random_token_frac must be <= 1, got "
                f"{self.mask_token_frac} + {self.random_token_frac}"
            )
        if not 0.0 < self.span_geometric_p <= 1.0:
            raise ValueError(f"span_geometric_p must be in (0, 1], got {self.span_geometric_p}")
        if self.max_span_words < 1:
            raise ValueError(f"max_span_words must be >= 1, got {self.max_span_words}")
        if self.max_predictions is not None and self.max_predictions < 1:
            raise ValueError(f"max_predictions must be >= 1 or None, got {self.max_predictions}")
        if self.sbo_max_positions_per_span < 1:
            raise ValueError(f"sbo_max_positions_per_span must be >= 1, got {self.sbo_max_positions_per_span}")
