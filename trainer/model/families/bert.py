"""BERT (Devlin et al. 2019) as transformers' BertForPreTraining names it: exactly our names (trainer/model/bert.py
was written to them), so nothing is renamed."""

from trainer.model.families.spelling import Spelling

SPELLING = Spelling(name="bert", base_prefix="bert.")
