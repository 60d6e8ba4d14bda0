"""The model: a BERT whose parameter names are transformers' BertForPreTraining's, plus SpanBERT's SBO head.

    config.py  ModelConfig: the shape (presets tiny .. large) and the loss weights
    bert.py    BertForPretraining: encoder, MLM head (sparse: masked positions only), NSP head, SBO head
    hf_names.py  the one table between our tensors and a transformers BERT checkpoint's (export, --init-from)
"""

from trainer.model.bert import IGNORE_INDEX, BertForPretraining
from trainer.model.config import PRESET_NAMES, ModelConfig

__all__ = ["IGNORE_INDEX", "PRESET_NAMES", "BertForPretraining", "ModelConfig"]
