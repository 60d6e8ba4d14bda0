"""Evaluation on the validation split: mean losses and accuracies of every head, summed over ranks.

In:  the engine, the validation stream (fixed masks: the same batches every time), how many batches.
Out: per evaluated head of trainer/heads.py whose outputs the network gives ("mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc";
     SpanBERT's "sbo_*", ELECTRA's "rtd_*"), over all ranks' batches, with
     each accuracy's count (`nsp_n`: pairs, `mlm_n`: masked tokens) and binomial standard error
     (`nsp_acc_se` = sqrt(acc (1 - acc) / n)), so that an accuracy over 44 pairs reads as what it is. For MLM
     the masked tokens of one sequence are not independent draws, so its standard error is a lower bound.
     `unmoved`: the warning of an --init-from run whose MLM accuracy and loss have not moved from its source's (step 0).
"""

from __future__ import annotations

import math

import torch

from trainer.data import ShardStream
from trainer.heads import HEADS
from trainer.run.runtime import Runtime


def evaluated() -> list[str]:
    """The heads whose loss, correct and count evaluation sums, in the table's order."""
    return [h.name for h in HEADS.values() if h.evaluated]


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
        for head in evaluated():
            if f"{head}_count" in out:
                n = out[f"{head}_count"].float()
                for key, value in ((f"{head}_loss_sum", out[f"{head}_loss"] * n), (f"{head}_correct", out[f"{head}_correct"].float()), (f"{head}_count", n)):
                    sums[key] = sums.get(key, 0.0) + float(value)
    engine.train()
    return from_totals(rt.all_reduce_sum(sums))


def from_totals(totals: dict[str, float]) -> dict[str, float]:
    """Per head: mean loss, accuracy, its count and its binomial standard error, from summed losses and counts."""
    result = {}
    for head in evaluated():
        n = totals.get(f"{head}_count", 0.0)
        if n:
            acc = totals[f"{head}_correct"] / n
            result[f"{head}_loss"] = totals[f"{head}_loss_sum"] / n
            result[f"{head}_acc"] = acc
            result[f"{head}_acc_se"] = math.sqrt(acc * (1.0 - acc) / n)
            result[f"{head}_n"] = int(n)
    return result


def describe(result: dict[str, float]) -> str:
    """One console line: `mlm_loss 5.2800 mlm_acc 0.1450 ± 0.0030 (n 41,200) nsp_loss ...`."""
    parts = []
    for head in evaluated():
        if f"{head}_loss" in result:
            parts.append(f"{head}_loss {result[f'{head}_loss']:.4f}")
        if f"{head}_acc" in result:
            parts.append(f"{head}_acc {result[f'{head}_acc']:.4f} ± {result[f'{head}_acc_se']:.4f} (n {result[f'{head}_n']:,})")
    return " ".join(parts)


LOSS_FALL = 0.05
"""The fall of validation MLM loss (a fraction of the source's) past which a run is adapting although its accuracy has
not moved yet. Measured (trainer/start/README.md): by step 200 the man-page runs that went on to gain held-out
accuracy had cut it by 10-32% (1e-4 included), one of them (mini at 1e-3) with its accuracy still within its SE;
the run of issue 49 that gained nothing cut its training loss by 4.8% in all of its 1,500 steps."""


def unmoved(first: dict[str, float], now: dict[str, float], step: int, lr: float) -> str | None:
    """The warning an --init-from run prints after its first evaluation past step 0 when validation MLM accuracy
    moved by no more than its standard error since step 0 (the source's own score, `first`) and the MLM loss fell by
    less than LOSS_FALL of its own, or None: at that rate the run spends its compute and leaves the source as it was."""
    if "mlm_acc" not in first or "mlm_acc" not in now:
        return None
    moved, se = now["mlm_acc"] - first["mlm_acc"], max(first["mlm_acc_se"], now["mlm_acc_se"])
    fell = (first["mlm_loss"] - now["mlm_loss"]) / first["mlm_loss"] if first["mlm_loss"] else 0.0
    if abs(moved) > se or fell >= LOSS_FALL:
        return None
    return (f"warning: validation MLM accuracy moved {moved:+.4f} in {step} steps ({first['mlm_acc']:.4f} at step 0, "
            f"the source; {now['mlm_acc']:.4f} now), within its standard error {se:.4f}, and its loss fell {100 * fell:.1f}%: "
            f"at lr {lr:g} the run is not adapting the source; rerun with a larger --lr (e.g. {lr * 10:g})")
