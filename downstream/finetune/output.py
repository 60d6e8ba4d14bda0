"""Where `clozeforge finetune` writes, and the figure and table of a checkpoint sweep.

In:  the --output path, the results of the runs.
Out: `staged_output`: export's staged directory (downstream/output_dir.py: one writer, a sibling
     staging directory renamed over --output when everything is written, never a mix of two runs) with this
     command's own test of what it may replace: a non-empty --output without a results.json of ours is
     refused unless --overwrite. `plot_sweep` → downstream.png (score against pretraining step, mean ± SE,
     the baseline as a band); `sweep_table` → the same numbers as a Markdown table.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

from downstream.output_dir import OutputDirError, staged_directory

OWNER = "clozeforge finetune"
OutputError = OutputDirError
"""--output cannot be written (held by another writer, or not ours to replace)."""


def _foreign(path: str) -> str | None:
    try:
        with open(os.path.join(path, "results.json"), encoding="utf-8") as f:
            if json.load(f).get("written_by") == OWNER:
                return None
    except (OSError, ValueError, AttributeError):
        pass
    return f"not empty and not written by {OWNER}"


@contextlib.contextmanager
def staged_output(path: str, overwrite: bool) -> Iterator[str]:
    """Yield a staging directory; on success it replaces `path` whole (downstream/output_dir.py)."""
    with staged_directory(path, overwrite=overwrite, foreign=_foreign) as staging:
        yield staging


def sweep_table(points: list[dict], baseline: dict | None, metric: str) -> str:
    """One row per checkpoint: score (mean ± SE over seeds), gain over the baseline (paired SE, bootstrap interval)."""
    name = baseline["name"] if baseline else "baseline"
    lines = [f"| pretraining step | {metric} (mean ± SE) | gain over {name} (paired SE) | 95% bootstrap |", "|---|---|---|---|"]
    for p in points:
        g = p.get("gain")
        gain = f"{g['mean']:+.2f} ± {g['se']:.2f}" if g else ""
        interval = f"[{g['bootstrap'][0]:+.2f}, {g['bootstrap'][1]:+.2f}]" if g and "bootstrap" in g else ""
        lines.append(f"| {p['step']} | {p['mean']:.2f} ± {p['se']:.2f} | {gain} | {interval} |")
    if baseline:
        lines.append(f"| {name} | {baseline['mean']:.2f} ± {baseline['se']:.2f} | | |")
    return "\n".join(lines) + "\n"


def plot_sweep(points: list[dict], baseline: dict | None, metric: str, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    steps = [p["step"] for p in points]
    ax.errorbar(steps, [p["mean"] for p in points], yerr=[p["se"] for p in points], marker="o", capsize=3,
                label="fine-tuned from the checkpoint")
    if baseline:
        ax.axhline(baseline["mean"], color="grey", linestyle="--",
                   label="from scratch" if baseline["kind"] == "scratch" else baseline["name"])
        ax.axhspan(baseline["mean"] - baseline["se"], baseline["mean"] + baseline["se"], color="grey", alpha=0.2)
    ax.set_xlabel("pretraining step")
    ax.set_ylabel(f"{metric}, points (mean ± SE over seeds)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
