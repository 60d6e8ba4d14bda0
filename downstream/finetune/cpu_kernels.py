"""Fine-tuning's dropout on a CPU: transformers' encoder trained with the pretraining model's lane-mask dropout.

In:  a transformers model about to train on a CPU (loop.train). Out: `lane_dropout(model)`, a context in which the
     model's dropout modules and its attention's dropout draw their masks as trainer/model/bert.py's `dropout` does
     (16-bit lanes of 64-bit random words, p rounded to a multiple of 1/65,536); on leaving it the model is as it was.

Why: torch's CPU dropout draws one random number per element from a single-threaded generator, and in training a
small encoder's step is mostly dropout: at 2 x 128 (32 rows of 100 positions, fp32, forward + backward) a step took
117 ms with BERT's dropouts and 78 ms with none (bench/README.md, issue 62). Most of that is the attention's
dropout, which transformers' sdpa path runs inside F.scaled_dot_product_attention (it cannot use its fused kernel
with dropout on a CPU and writes the attention out anyway). Here the attention is written out too (scores, mask,
softmax, lane dropout, values), registered with transformers' AttentionInterface under `ATTENTION`, with
transformers' own eager mask; with dropout off (evaluation) it is one F.scaled_dot_product_attention call. The
arithmetic is transformers' eager attention's; only the masks' random numbers differ.

Which models: those whose self-attention calls transformers' attention interface with eager's arguments, as their
family's spelling says (`Spelling.hf_attention_interface`: BERT, ELECTRA, RoBERTa, XLM-R); XLM and ModernBERT
train with transformers' own dropout.
"""

from __future__ import annotations

import contextlib
import functools
import sys

import torch
import torch.nn.functional as F
from torch import nn

from trainer.model.bert import _Dropout
from trainer.model.bert import dropout as lane_mask_dropout
from trainer.model.families import spelling_of_model_type

ATTENTION = "clozeforge_cpu_lanes"
"""The name this module's attention is registered under (transformers' AttentionInterface and mask interface)."""


def _attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0, **_kwargs):
    """transformers' eager attention (its arguments, its additive mask, its (output, weights) result) with the lane
    mask's dropout; without dropout, F.scaled_dot_product_attention."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    if dropout == 0.0 or not module.training:
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling)
        return out.transpose(1, 2).contiguous(), None
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = lane_mask_dropout(torch.softmax(weights, dim=-1), dropout, True)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


@functools.cache
def _register() -> bool:
    """Register `_attention` and eager's mask under ATTENTION; False where this transformers has no such interfaces."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    except ImportError:
        return False
    AttentionInterface.register(ATTENTION, _attention)
    AttentionMaskInterface.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["eager"])
    return True


def applies_to(model) -> bool:
    """Whether `model`'s attention goes through transformers' attention interface: its family's spelling says so, and
    its class's module dispatches through ALL_ATTENTION_FUNCTIONS (releases before the interface reached a class
    chose its attention classes when the model was built), and the model can switch its implementation."""
    if not spelling_of_model_type(getattr(model.config, "model_type", None)).hf_attention_interface:
        return False
    code = sys.modules.get(type(model).__module__)
    return hasattr(code, "ALL_ATTENTION_FUNCTIONS") and hasattr(model, "set_attn_implementation")


@contextlib.contextmanager
def lane_dropout(model):
    """`model` trained with lane-mask dropout inside the context (`applies_to` it), as it was after."""
    if not applies_to(model) or not _register():
        yield model
        return
    before = model.config._attn_implementation
    swapped = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is nn.Dropout:
                swapped.append((parent, name, child))
    model.set_attn_implementation(ATTENTION)
    for parent, name, child in swapped:
        setattr(parent, name, _Dropout(child.p))
    try:
        yield model
    finally:
        for parent, name, child in swapped:
            setattr(parent, name, child)
        model.set_attn_implementation(before)
