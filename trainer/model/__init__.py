"""The model: a BERT-family encoder whose parameter names are transformers' BertForPreTraining's, plus SpanBERT's SBO head.

    config.py    ModelConfig: the family, the shape (presets tiny .. large) and the loss weights
    bert.py      BertForPretraining: encoder, MLM head (sparse: masked positions only), NSP head, SBO head; the
                 family's differences (RoBERTa: no NSP head nor pooler, one token type, positions after padding_idx)
    families/    each family's network as its transformers class names it (BERT's, RoBERTa's and XLM-R's)
    hf_names.py  the one table between our tensors and a transformers checkpoint's (export, --init-from)
"""

from trainer.model.bert import IGNORE_INDEX, BertForPretraining
from trainer.model.config import PRESET_NAMES, ModelConfig

__all__ = ["IGNORE_INDEX", "PRESET_NAMES", "BertForPretraining", "ModelConfig"]
