"""RoBERTa (Liu et al. 2019) and XLM-R (Conneau et al. 2020) as transformers' RobertaForMaskedLM and
XLMRobertaForMaskedLM name them: BERT's encoder under `roberta.`, BERT's MLM transform and decoder as `lm_head.`
(dense, layer_norm, decoder tied to the word embeddings, one output bias), and neither pooler nor NSP head.

The network itself is BERT's (trainer/model/bert.py) with the family row's differences: one token type, and position
ids from padding_idx + 1. A RobertaModel saved alone has a pooler, which the masked-LM network does not read.
"""

from trainer.model.families.spelling import Spelling

SPELLING = Spelling(
    name="roberta",
    base_prefix="roberta.",
    renames=(
        ("bert.embeddings.", "roberta.embeddings."),
        ("bert.encoder.", "roberta.encoder."),
        ("bert.pooler.", "roberta.pooler."),
        ("cls.predictions.transform.dense.", "lm_head.dense."),
        ("cls.predictions.transform.LayerNorm.", "lm_head.layer_norm."),
        ("cls.predictions.decoder.", "lm_head.decoder."),
        ("cls.predictions.bias", "lm_head.bias"),
    ),
    dropped=("roberta.pooler.",),
)
