"""Where `clozeforge finetune` writes, and the figure and table of a checkpoint sweep.

In:  the --output path, the results of the runs.
Out: `staged_output`: a lock beside the directory (one writer), a sibling staging directory the command writes
     into, renamed over --output when everything is written (a crash leaves the old directory whole, never a
     mix of two runs). A non-empty --output that this command did not write (no results.json of ours) is
     refused unless --overwrite. `plot_sweep` → downstream.png (score against pretraining step, mean ± SE,
     the scratch baseline as a band); `sweep_table` → the same numbers as a Markdown table.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator

OWNER = "clozeforge finetune"


class OutputError(ValueError):
    """--output cannot be written (held by another writer, or not ours to replace)."""


def _ours(path: str) -> bool:
    try:
        with open(os.path.join(path, "results.json"), encoding="utf-8") as f:
            return json.load(f).get("written_by") == OWNER
    except (OSError, ValueError, AttributeError):
        return False


@contextlib.contextmanager
def staged_output(path: str, overwrite: bool) -> Iterator[str]:
    """Yield a staging directory; on success it replaces `path` whole (see the module docstring)."""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"--output {path} is a file, not a directory")
    if os.path.isdir(path) and os.listdir(path) and not _ours(path) and not overwrite:
        raise OutputError(f"--output {path} is not empty and was not written by {OWNER} (pass --overwrite to replace it)")
    lock = open(os.path.join(parent, f".{name}.lock"), "w")
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(f"--output {path} is being written by another process") from None
        staging = tempfile.mkdtemp(prefix=f".{name}.staging.", dir=parent)
        try:
            yield staging
            old = None
            if os.path.exists(path):
                old = tempfile.mkdtemp(prefix=f".{name}.old.", dir=parent)
                os.replace(path, os.path.join(old, name))
            os.replace(staging, path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        lock.close()
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(parent, f".{name}.lock"))


def sweep_table(points: list[dict], baseline: dict | None, metric: str) -> str:
    lines = [f"| pretraining step | {metric} (mean ± SE) | gain over scratch |", "|---|---|---|"]
    for p in points:
        gain = f"{p['gain']['mean']:+.2f} ± {p['gain']['se']:.2f}" if p.get("gain") else ""
        lines.append(f"| {p['step']} | {p['mean']:.2f} ± {p['se']:.2f} | {gain} |")
    if baseline:
        lines.append(f"| scratch | {baseline['mean']:.2f} ± {baseline['se']:.2f} | |")
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
        ax.axhline(baseline["mean"], color="grey", linestyle="--", label="from scratch")
        ax.axhspan(baseline["mean"] - baseline["se"], baseline["mean"] + baseline["se"], color="grey", alpha=0.2)
    ax.set_xlabel("pretraining step")
    ax.set_ylabel(f"{metric}, points (mean ± SE over seeds)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
