"""BERT's initialisation, which every network here takes (BertForPretraining, ElectraForPretraining).

In:  a network, the standard deviation (ModelConfig.initializer_range) and a torch Generator. Out: its weights, in place.
"""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def init_bert_weights(network: nn.Module, std: float, generator: torch.Generator) -> None:
    """BERT's init of every module of `network`: Linear and Embedding weights ~ N(0, std), biases 0, LayerNorm 1/0,
    an embedding's padding row 0; a weight shared by two modules (a tied decoder) drawn once, in module order."""
    done: set[int] = set()
    for module in network.modules():
        if isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            if id(module.weight) not in done:
                done.add(id(module.weight))
                module.weight.normal_(0.0, std, generator=generator)
                if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
