"""What a run tells its user: RUN/metrics.jsonl, a console progress line, and RUN/curves.png.

In:  per-step and per-evaluation dicts from the training loop (rank 0 only).
Out: one JSON object per logged step or evaluation in metrics.jsonl (`{"step", "loss", ...}` for training,
     `{"step", "split": "validation", ...}` for evaluations), a progress line
     `step 120/1000 | loss 6.12 (mlm 5.43 nsp 0.69) | lr 9.9e-04 | 14,212 tok/s | eta 3m12s`, every head's loss of the
     run in the parentheses (trainer/heads.py's order: ELECTRA's `mlm 5.43 rtd 0.41`) (on a GPU whose peak
     is known, `mfu 34.6% (executed 28.0%)` before the ETA: the old FLOPs count and ExecutedFlops'), TensorBoard
     scalars when the tensorboard package is installed, and a PNG of the training and validation curves.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import numpy as np

from trainer.heads import HEADS, IGNORE_INDEX

# Peak dense bf16 throughput per GPU, for the MFU estimate (vendor datasheets, without sparsity).
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


def peak_flops(device_name: str) -> float | None:
    for key, flops in PEAK_BF16_FLOPS.items():
        if key in device_name:
            return flops
    return None


def train_flops_per_token(num_parameters: int, num_layers: int, hidden: int, seq_len: int) -> float:
    """6N for the weights (forward + backward) plus attention's 12·L·h·s (PaLM appendix B's estimate): the old
    figure, printed as `mfu` beside `ExecutedFlops`' for one release. It credits the tied decoder (V·h of N) at every
    token, where the MLM head runs at the masked ones only, and attention over s = max_seq_len keys for every token."""
    return 6 * num_parameters + 12 * num_layers * hidden * seq_len


@dataclasses.dataclass(frozen=True)
class ExecutedFlops:
    """The training FLOPs of a batch that execute and do useful work: matrix products only, each 2 FLOPs a multiply-add
    forward and twice that backward (6 a multiply-add in all), at real tokens, rows and predictions, never padding:

        6 · [ T · L · (4h² + 2hf)          Q, K, V, output projections and the feed-forward block, per real token
            + Σᵢ sᵢ² · L · 2h              attention's QKᵀ and AV: row i's sᵢ tokens each over its sᵢ keys
            + M · (h² + hV)                 MLM transform and tied decoder at the M masked positions
            + B · (h² + 2h)   (NSP)         pooler and NSP classifier per row
            + M · (4h² + hV)  (SBO) ]       SpanBERT's two-layer head and the decoder at the same positions

    T real tokens, sᵢ row lengths, B rows, L layers, h hidden, f intermediate, V vocabulary. Embedding lookups,
    LayerNorm, GELU, softmax and the losses are not matrix products and count nothing (as in the old figure).
    bench/README.md#honest-mfu writes it out; tests/trainer/test_mfu.py checks it by hand and against torch's
    FlopCounterMode on an unpadded step."""

    layers: int
    hidden: int
    intermediate: int
    vocab: int
    pooler: bool
    sbo: bool

    @classmethod
    def of(cls, config) -> ExecutedFlops:
        """For a ModelConfig."""
        return cls(config.num_layers, config.hidden_size, config.intermediate_size, config.vocab_size, config.row.nsp,
                   config.use_sbo)

    def count(self, rows: int, tokens: int, attended: int, predictions: int) -> int:
        """For B rows, T real tokens, Σ sᵢ² (`attended`) and M predictions."""
        L, h, f, V = self.layers, self.hidden, self.intermediate, self.vocab
        macs = tokens * L * (4 * h * h + 2 * h * f) + attended * L * 2 * h + predictions * (h * h + h * V)
        if self.pooler:
            macs += rows * (h * h + 2 * h)
        if self.sbo:
            macs += predictions * (4 * h * h + h * V)
        return 6 * macs

    def of_batch(self, batch) -> int:
        """For a host batch in any form (trainer/data/batch_forms.py: padded, static or packed rows)."""
        lengths = np.diff(np.asarray(batch["cu_seqlens"]).astype(np.int64)) if "cu_seqlens" in batch \
            else np.asarray(batch["attention_mask"]).sum(axis=1).astype(np.int64)
        predictions = int((np.asarray(batch["mlm_labels"]) != IGNORE_INDEX).sum()) if "mlm_labels" in batch else 0
        return self.count(len(lengths), int(lengths.sum()), int((lengths * lengths).sum()), predictions)


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


class MetricsLog:
    """Appends to RUN/metrics.jsonl from `start_step` on; as a context, it closes when the run ends, and rank 0's
    draws RUN/curves.png after a run that did not fail.

    A run that resumes from a checkpoint at step S replays the steps after S, so records past S (logged
    before a crash, after the last checkpoint) are dropped first, and TensorBoard purges its events past S:
    every step then appears once, with the values of the trajectory that continues."""

    def __init__(self, run_dir: str, max_steps: int, enabled: bool = True, start_step: int = 0, log=print):
        self.run_dir, self.max_steps, self.enabled, self.log = run_dir, max_steps, enabled, log
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self.started = time.time()
        self.first_step: int | None = None
        self.tb = None
        if enabled:
            self._truncate_after(start_step)
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(os.path.join(run_dir, "tensorboard"), purge_step=start_step + 1 if start_step else None)
            except ImportError:  # tensorboard is optional: metrics.jsonl and curves.png carry the same data
                self.tb = None

    def _truncate_after(self, step: int) -> None:
        records = read_metrics(self.run_dir)
        kept = [r for r in records if r.get("step", 0) <= step]
        if len(kept) == len(records):
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in kept)
        os.replace(tmp, self.path)

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.tb is not None:
            prefix = record.get("split", "train")
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.tb.add_scalar(f"{prefix}/{key}", value, record["step"])

    def progress(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        step = record["step"]
        if self.first_step is None:
            self.first_step, self.started = step, time.time()
        elapsed = time.time() - self.started
        rate = (step - self.first_step) / elapsed if elapsed > 0 and step > self.first_step else 0.0
        eta = _duration((self.max_steps - step) / rate) if rate else "?"
        parts = [f"step {step}/{self.max_steps}", f"loss {record['loss']:.3f}"]
        heads = " ".join(f"{h.name} {record[h.loss]:.3f}" for h in HEADS.values() if h.loss in record)
        parts[-1] += f" ({heads})"
        parts += [f"lr {record['lr']:.2e}", f"{record['tokens_per_s']:,.0f} tok/s"]
        if record.get("mfu") is not None:
            parts.append(f"mfu {100 * record['mfu']:.1f}% (executed {100 * record['mfu_executed']:.1f}%)")
        parts.append(f"eta {eta}")
        print(" | ".join(parts), flush=True)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, error_type, *_) -> None:
        """Close; after a run that ended without an error, the enabled log (rank 0's) draws RUN/curves.png."""
        self.close()
        if error_type is not None or not self.enabled:
            return
        try:
            plot = plot_curves(self.run_dir)
        except ImportError:  # matplotlib: metrics.jsonl holds the same figures
            self.log("curves.png not drawn: matplotlib is not installed")
            return
        if plot:
            self.log(f"curves: {plot}")


def read_metrics(run_dir: str) -> list[dict[str, Any]]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except ValueError:
            if i < len(lines) - 1:
                raise
            # the last line of a process killed mid-write; the step it held is trained again on resume
    return records


def plot_curves(run_dir: str) -> str | None:
    """Draw RUN/curves.png: the losses (train and validation) and validation accuracies of the plotted heads
    (trainer/heads.py) against steps; for an --init-from run (evaluated at step 0) the source's MLM accuracy as a
    line, and what the run gained over it."""
    records = read_metrics(run_dir)
    train = [r for r in records if "split" not in r]
    valid = [r for r in records if r.get("split") == "validation"]
    if not train:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    steps, vsteps = [r["step"] for r in train], [r["step"] for r in valid]
    plotted = [h for h in HEADS.values() if h.plotted]
    for head in plotted:
        if any(head.loss in r for r in train):
            ax_loss.plot(steps, [r.get(head.loss) for r in train], "-", label=f"train {head.name}", alpha=0.8)
    for head in plotted:
        if any(head.loss in r for r in valid):
            ax_loss.plot(vsteps, [r.get(head.loss) for r in valid], "o--", label=f"valid {head.name}")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss")
    ax_loss.set_title("Losses")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    for head in plotted:
        if any(f"{head.name}_acc" in r for r in valid):
            ax_acc.plot(vsteps, [r.get(f"{head.name}_acc") for r in valid], "o-", label=f"valid {head.name} accuracy")
    if valid and valid[0]["step"] == 0 and "mlm_acc" in valid[0]:  # an --init-from run: its source's score, and the gain
        source, end = valid[0]["mlm_acc"], valid[-1].get("mlm_acc", valid[0]["mlm_acc"])
        ax_acc.axhline(source, linestyle=":", color="gray", label=f"the source (step 0): mlm {source:.3f}, {end - source:+.3f} since")
    ax_acc.set_xlabel("step")
    ax_acc.set_ylabel("accuracy")
    ax_acc.set_ylim(0, 1)
    ax_acc.set_title("Validation accuracy")
    ax_acc.grid(alpha=0.3)
    if valid:
        ax_acc.legend()
    fig.suptitle(os.path.basename(os.path.abspath(run_dir)))
    fig.tight_layout()
    out = os.path.join(run_dir, "curves.png")
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
