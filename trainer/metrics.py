"""What a run tells its user: RUN/metrics.jsonl, a console progress line, and RUN/curves.png.

In:  per-step and per-evaluation dicts from the training loop (rank 0 only).
Out: one JSON object per logged step or evaluation in metrics.jsonl (`{"step", "loss", ...}` for training,
     `{"step", "split": "validation", ...}` for evaluations), a progress line
     `step 120/1000 | loss 6.12 (mlm 5.43 nsp 0.69) | lr 9.9e-04 | 14,212 tok/s | eta 3m12s`, TensorBoard
     scalars when the tensorboard package is installed, and a PNG of the training and validation curves.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

# Peak dense bf16 throughput per GPU, for the MFU estimate (vendor datasheets, without sparsity).
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


def peak_flops(device_name: str) -> float | None:
    for key, flops in PEAK_BF16_FLOPS.items():
        if key in device_name:
            return flops
    return None


def train_flops_per_token(num_parameters: int, num_layers: int, hidden: int, seq_len: int) -> float:
    """6N for the weights (forward + backward) plus attention's 12·L·h·s (PaLM appendix B's estimate)."""
    return 6 * num_parameters + 12 * num_layers * hidden * seq_len


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
        heads = " ".join(f"{k} {record[k + '_loss']:.3f}" for k in ("mlm", "nsp", "sbo") if k + "_loss" in record)
        parts[-1] += f" ({heads})"
        parts += [f"lr {record['lr']:.2e}", f"{record['tokens_per_s']:,.0f} tok/s"]
        if record.get("mfu") is not None:
            parts.append(f"mfu {100 * record['mfu']:.1f}%")
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
    """Draw RUN/curves.png: losses (train and validation) and validation accuracies against steps; for an --init-from
    run (evaluated at step 0) the source's MLM accuracy as a line, and what the run gained over it."""
    records = read_metrics(run_dir)
    train = [r for r in records if "split" not in r]
    valid = [r for r in records if r.get("split") == "validation"]
    if not train:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [r["step"] for r in train]
    for key, style in (("mlm_loss", "-"), ("nsp_loss", "-"), ("sbo_loss", "-")):
        if any(key in r for r in train):
            ax_loss.plot(steps, [r.get(key) for r in train], style, label=f"train {key.split('_')[0]}", alpha=0.8)
    vsteps = [r["step"] for r in valid]
    for key in ("mlm_loss", "nsp_loss", "sbo_loss"):
        if any(key in r for r in valid):
            ax_loss.plot(vsteps, [r.get(key) for r in valid], "o--", label=f"valid {key.split('_')[0]}")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss")
    ax_loss.set_title("Losses")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    for key in ("mlm_acc", "nsp_acc", "sbo_acc"):
        if any(key in r for r in valid):
            ax_acc.plot(vsteps, [r.get(key) for r in valid], "o-", label=f"valid {key.split('_')[0]} accuracy")
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
