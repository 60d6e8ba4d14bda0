"""A toy pretraining head for tests/trainer/test_heads_table.py: the one module a new head brings beside its row in
trainer/heads.py. It predicts whether each masked token's id is even, from the hidden state at its position."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainer.heads import IGNORE_INDEX


class Parity(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, 2)

    def forward(self, sequence_output: torch.Tensor, mlm_positions: torch.Tensor, mlm_labels: torch.Tensor) -> dict:
        if sequence_output.dim() == 2:  # packed: (tokens, hidden) at (N,) positions
            hidden = sequence_output.index_select(0, mlm_positions.long())
        else:  # (batch, seq, hidden) at (batch, P) positions
            index = mlm_positions.long().unsqueeze(-1).expand(-1, -1, sequence_output.shape[-1])
            hidden = torch.gather(sequence_output, 1, index)
        logits = self.dense(hidden).reshape(-1, 2).float()
        labels = mlm_labels.reshape(-1).long()
        valid = labels != IGNORE_INDEX
        target = torch.where(valid, labels % 2, IGNORE_INDEX)
        count = valid.sum()
        loss = F.cross_entropy(logits, target, ignore_index=IGNORE_INDEX, reduction="sum") / count.clamp(min=1)
        with torch.no_grad():
            correct = ((logits.argmax(-1) == target) & valid).sum()
        return {"toy_loss": loss, "toy_correct": correct, "toy_count": count}


def build(config) -> nn.Module | None:
    """The head for a network of `config` (a ModelConfig): every one has it."""
    return Parity(config.hidden_size)
