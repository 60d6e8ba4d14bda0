"""Whole-word masking (`--masking wwm`): whole words (a token plus its following '##' pieces) in random order until
the budget; the word that would cross the budget is kept with probability room/len(word), so the expected count is
the budget. 80/10/10 is decided per token, as in BERT's whole-word-masking release.

In:  the (batch, seq) special mask, the words (`word_start`, `word_len`: trainer/masking/masker.py) and each row's
     budget. Out: the (batch, seq) selected tokens.
"""

from __future__ import annotations

import numpy as np


def select_words(masker, special: np.ndarray, words, budget: np.ndarray, rng: np.random.Generator):
    """(selected, no extra targets)."""
    word_start, word_len = words
    keys = rng.random(special.shape)
    keys[~word_start] = 2.0
    order = np.argsort(keys, axis=1)  # word starts first, in random order
    lens = np.take_along_axis(word_len, order, axis=1)
    cum = np.cumsum(lens, axis=1)
    before = cum - lens
    take = (lens > 0) & (cum <= budget[:, None])
    crossing = (lens > 0) & (before < budget[:, None]) & (cum > budget[:, None])
    if masker.config.max_predictions is not None:
        crossing &= cum <= masker.config.max_predictions
    take |= crossing & (rng.random(special.shape) * lens < budget[:, None] - before)
    chosen = np.zeros_like(take)
    np.put_along_axis(chosen, order, take, axis=1)
    # each token follows the start of its word (the last word start at or before it)
    word_of = np.maximum.accumulate(np.where(word_start, np.arange(special.shape[1]), 0), axis=1)
    return np.take_along_axis(chosen, word_of, axis=1) & ~special, {}
