"""Each family's network as transformers names it: one module a network, registered in NETWORKS (the family's row,
schemas/families.py, names its network).

    bert.py     BERT: our tensors already carry BertForPreTraining's names
    roberta.py  RoBERTa and XLM-R: the same encoder under `roberta.`, the MLM head as `lm_head.`, no pooler nor NSP head
    xlm.py      XLM: the encoder under `transformer.` in per-layer lists, languages for token types, `pred_layer.proj`

Our model (trainer/model/bert.py) keeps one set of tensor names for every family; a network says how each of them is
spelled in its transformers class (export writes those names, --init-from reads them back) and how published
checkpoints of it spell them otherwise.
"""

from __future__ import annotations

from trainer.model.families import bert, roberta, xlm
from trainer.model.families.network import Network

NETWORKS: dict[str, Network] = {n.name: n for n in (bert.NETWORK, roberta.NETWORK, xlm.NETWORK)}


def network_of(model_config) -> Network:
    """The network of a ModelConfig's family."""
    return NETWORKS[model_config.row.network]


def network_of_model_type(model_type: str | None) -> Network:
    """The network of a transformers config.json's model_type: its family's, BERT's for any other (ELECTRA's)."""
    from schemas.families import FAMILIES

    return NETWORKS[next((f.network for f in FAMILIES.values() if f.hf_model_type == model_type), "bert")]


__all__ = ["NETWORKS", "Network", "network_of", "network_of_model_type"]
