"""Evaluation on the validation split: mean losses and accuracies of every head, summed over ranks.

In:  the engine, the validation stream (fixed masks: the same batches every time), how many batches.
Out: {"mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc", ("sbo_loss", "sbo_acc")} over all ranks' batches.
"""

from __future__ import annotations

import torch

from trainer.data import ShardStream
from trainer.runtime import Runtime


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "position"}


@torch.no_grad()
def evaluate(engine, stream: ShardStream | None, batches: int, device: torch.device, rt: Runtime) -> dict[str, float]:
    """Mean losses and accuracies over the first `batches` validation batches (fixed masks: same every time)."""
    if stream is None:
        return {}
    engine.eval()
    sums: dict[str, float] = {}
    for _, batch in zip(range(batches), stream):
        out = engine(**to_device(batch, device))
        for head in ("mlm", "nsp", "sbo"):
            if f"{head}_count" in out:
                n = out[f"{head}_count"].float()
                for key, value in ((f"{head}_loss_sum", out[f"{head}_loss"] * n), (f"{head}_correct", out[f"{head}_correct"].float()), (f"{head}_count", n)):
                    sums[key] = sums.get(key, 0.0) + float(value)
    engine.train()
    totals = rt.all_reduce_sum(sums)
    result = {}
    for head in ("mlm", "nsp", "sbo"):
        n = totals.get(f"{head}_count", 0.0)
        if n:
            result[f"{head}_loss"] = totals[f"{head}_loss_sum"] / n
            result[f"{head}_acc"] = totals[f"{head}_correct"] / n
    return result


