"""BERT's masking (`--masking bert`): exactly the budget of tokens per sequence, uniformly without replacement, as
BERT's create_pretraining_data.py does (not Bernoulli per token: the count does not vary); 80/10/10 per token.

In:  the (batch, seq) special mask and each row's budget. Out: the (batch, seq) selected tokens.
"""

from __future__ import annotations

import numpy as np


def select_tokens(masker, special: np.ndarray, words, budget: np.ndarray, rng: np.random.Generator):
    """(selected, no extra targets); `words` is not read."""
    keys = rng.random(special.shape)
    keys[special] = 2.0  # specials sort last and are never within the budget
    ranked = np.sort(keys, axis=1)
    threshold = np.take_along_axis(ranked, np.maximum(budget - 1, 0)[:, None], axis=1)  # (batch, 1)
    return (keys <= threshold) & (budget > 0)[:, None], {}
