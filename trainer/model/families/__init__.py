"""Each family's spelling: how its transformers class names our tensors, inputs and config fields; one module a
spelling, registered in SPELLINGS (the family's row, schemas/families.py, names its spelling: `Family.spelling`).

    spelling.py the Spelling: renames both ways, a bare encoder's prefix, what a checkpoint holds that we drop, the
                class's input keywords and config keys
    bert.py     BERT: our tensors already carry BertForPreTraining's names
    roberta.py  RoBERTa and XLM-R: the same encoder under `roberta.`, the MLM head as `lm_head.`, no pooler nor NSP head
    xlm.py      XLM: the encoder under `transformer.` in per-layer lists, languages for token types, `pred_layer.proj`
    modernbert.py  ModernBERT: its own network's names are ModernBertForMaskedLM's; its config.json's keys both ways

Our model (trainer/model/bert.py) keeps one set of tensor names for every family; a spelling says how each of them is
spelled in its transformers class (export writes those names, --init-from reads them back) and how published
checkpoints of it spell them otherwise. The network itself, BERT's or ELECTRA's, is the objective's
(schemas/objectives.py `Objective.network`), unless the family has its own (`Family.network`: ModernBERT's).
"""

from __future__ import annotations

from trainer.model.families import bert, modernbert, roberta, xlm
from trainer.model.families.spelling import Spelling

SPELLINGS: dict[str, Spelling] = {s.name: s for s in (bert.SPELLING, roberta.SPELLING, xlm.SPELLING, modernbert.SPELLING)}


def spelling_of(model_config) -> Spelling:
    """The spelling of a ModelConfig's family."""
    return SPELLINGS[model_config.row.spelling]


def spelling_of_model_type(model_type: str | None) -> Spelling:
    """The spelling of a transformers config.json's model_type: its family's, BERT's for any other (ELECTRA's)."""
    from schemas.families import FAMILIES

    return SPELLINGS[next((f.spelling for f in FAMILIES.values() if f.hf_model_type == model_type), "bert")]


__all__ = ["SPELLINGS", "Spelling", "spelling_of", "spelling_of_model_type"]
