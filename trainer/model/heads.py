"""BertForPretraining's heads over the encoder's output: the masked-LM prediction head and the NSP classifier (under
transformers' `cls.` names), SpanBERT's span-boundary head (`sbo.`, project-only), and the heads a row of
trainer/heads.py brings with a module of its own (`heads.<name>.`, project-only).

In:  a ModelConfig; the sequence output (batch, seq, hidden) or, packed, (tokens, hidden), and the batch's targets.
Out: modules whose parameter names are transformers' BertForPreTraining's (`cls.predictions.*`,
     `cls.seq_relationship.*`); `own_heads` / `own_losses`: the table's heads with a module, built and run.
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F
from torch import nn

from trainer.heads import HEADS, weight_of
from trainer.model.config import ModelConfig


class _Transform(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class _LMPredictionHead(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.transform = _Transform(cfg) if cfg.row.lm_transform else nn.Identity()  # XLM's head: the decoder alone
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size)
        # One output bias, registered under both names as transformers does (decoder.bias is tied to it).
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.decoder.bias = self.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(x))  # (..., vocab)


class PreTrainingHeads(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.predictions = _LMPredictionHead(cfg)
        self.seq_relationship = nn.Linear(cfg.hidden_size, 2) if cfg.row.nsp else None


class SpanBoundaryHead(nn.Module):
    """SpanBERT's SBO: y = LN(GeLU(W2 · LN(GeLU(W1 · [h_left; h_right; p_rel])))), decoded by the tied decoder."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.max_rel = cfg.sbo_max_relative_positions
        self.position_embeddings = nn.Embedding(cfg.sbo_max_relative_positions, cfg.hidden_size)
        self.dense_1 = nn.Linear(3 * cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm_1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dense_2 = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm_2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, sequence_output: torch.Tensor, left: torch.Tensor, right: torch.Tensor,
                rel_pos: torch.Tensor) -> torch.Tensor:
        # NOTE: clamp rather than check: a check would sync the GPU every step, and a long word-piece span
        # sharing the last position row is harmless.
        rel = self.position_embeddings(rel_pos.long().clamp(0, self.max_rel - 1))  # (batch, P, hidden), or (N, hidden)
        x = torch.cat([gather(sequence_output, left), gather(sequence_output, right), rel], dim=-1)
        x = self.LayerNorm_1(F.gelu(self.dense_1(x)))
        return self.LayerNorm_2(F.gelu(self.dense_2(x)))  # (batch, P, hidden), or (N, hidden) packed


def gather(sequence_output: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(batch, seq, hidden) at (batch, P) positions -> (batch, P, hidden); packed (tokens, hidden) at (N,) token
    positions -> (N, hidden)."""
    if sequence_output.dim() == 2:
        return sequence_output.index_select(0, positions.long())
    index = positions.long().unsqueeze(-1).expand(-1, -1, sequence_output.shape[-1])
    return torch.gather(sequence_output, 1, index)




def own_heads(config: ModelConfig) -> nn.ModuleDict:
    """The heads of trainer/heads.py that bring a module of their own (`Head.module`) and that this network has: the
    module's `build(config)` gives the nn.Module, or None for a network without it. Empty for the shipped heads, so
    the state dict holds nothing under `heads.` unless a row adds one."""
    built = {}
    for head in HEADS.values():
        if head.module:
            module = importlib.import_module(head.module).build(config)
            if module is not None:
                built[head.name] = module
    return nn.ModuleDict(built)


def own_losses(heads: nn.ModuleDict, config: ModelConfig, sequence_output: torch.Tensor,
               batch: dict[str, torch.Tensor | None]) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """(each own head's outputs: `<name>_loss`, `_correct`, `_count`; its weighted loss) for a batch that carries
    the head's targets (a batch without them, as fill-mask's, gives nothing)."""
    out, weighted = {}, []
    for name, module in heads.items():
        head = HEADS[name]
        targets = {t.key: batch.get(t.key) for t in head.targets}
        if any(value is None for value in targets.values()):
            continue
        found = module(sequence_output, **targets)
        out.update(found)
        weighted.append(weight_of(head, config) * found[head.loss])
    return out, weighted
