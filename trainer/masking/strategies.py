"""The masking strategies, one row each (`MASKING_STRATEGIES`): what `--masking` chooses.

In:  a strategy name (MaskingConfig.strategy). Out: its `Strategy`: how it selects the tokens to predict, whether
     it reads whole words, and the heads beyond MLM whose targets it adds (trainer/heads.py), which the network
     then has (trainer/builders.py) and a resume may not change (trainer/config.py).

    name  module     selects                                       words  adds targets of
    bert  tokens.py  the budget of tokens, uniformly               no     -
    wwm   words.py   whole words until the budget                  yes    -
    span  spans.py   SpanBERT spans of whole words                 yes    sbo

A new scheme is one module (its `select`, and `targets` when it adds a head's) and one row here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from trainer.masking import spans, tokens, words


@dataclasses.dataclass(frozen=True)
class Strategy:
    name: str
    select: Callable
    """(masker, special (batch, seq), words ((word_start, word_len) or None), budget (batch,), rng) -> (selected
    (batch, seq) bool, per-token extras: a `decision` in [0, 1) for 80/10/10, else one is drawn per token, and
    whatever its `targets` reads)."""
    words: bool
    """It selects whole words: the masker needs the vocabulary's word marks (its `continuation`)."""
    heads: tuple[str, ...] = ()
    """The heads (trainer/heads.py) beyond MLM whose targets it adds: a network trained on it has them."""
    targets: Callable | None = None
    """(masker, masked batch, extras, flat, packed) -> adds those heads' targets to the batch, in the MLM slots."""


MASKING_STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("bert", tokens.select_tokens, words=False),
    Strategy("wwm", words.select_words, words=True),
    Strategy("span", spans.select_spans, words=True, heads=("sbo",), targets=spans.sbo_targets),
)}
"""Every masking strategy by its --masking name."""


def heads_of(strategy: str) -> tuple[str, ...]:
    """The heads beyond MLM that masking by `strategy` trains (none for a name this version does not know)."""
    row = MASKING_STRATEGIES.get(strategy)
    return row.heads if row else ()
