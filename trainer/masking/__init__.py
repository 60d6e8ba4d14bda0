"""Online masking: a fresh mask every time a pair is drawn (the design's contract 5).

    config.py      MaskingConfig: --masking and its fields
    strategies.py  the strategies, one row each (MASKING_STRATEGIES): bert, wwm, span; what each selects and the
                   heads beyond MLM whose targets it adds (span: SBO)
    tokens.py      bert: the budget of tokens per sequence
    words.py       wwm: whole words
    spans.py       span: SpanBERT spans and SBO's span-boundary targets
    masker.py      Masker: budget, selection by the strategy, 80/10/10, the packed prediction slots
    rows.py        the whole-batch array helpers they share

In:  a collated batch (trainer/data/collate.py) and a numpy Generator. Out: the masked batch with the targets of
     MLM and of the heads the strategy adds (trainer/heads.py). numpy only: no torch in a loader worker's masking.
"""

from trainer.masking.config import MaskingConfig
from trainer.masking.masker import Masker
from trainer.masking.strategies import MASKING_STRATEGIES, Strategy

__all__ = ["MASKING_STRATEGIES", "Masker", "MaskingConfig", "Strategy"]
