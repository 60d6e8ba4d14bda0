"""What `clozeforge finetune` writes: the output directory and everything in it, and the summary it prints.

In:  the --output path; a finished job (job.py): its arms' results, the chosen arm (whose best run the job saved as
     model/) and its test predictions; the arms' models (models.py), where it ran.
Out: `staged_output`: export's staged directory (process/outputs.py: one writer, a sibling
     staging directory renamed over --output when everything is written, never a mix of two runs) with this
     command's own test of what it may replace: a non-empty --output without a results.json of ours is
     refused unless --overwrite. `write` fills it beside model/: predictions.jsonl,
     results.json, and for a sweep downstream.png (score against pretraining step, mean ± SE, the baseline as a
     band) and downstream.md (the same numbers as a Markdown table). `summary` prints each arm's score and gain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator

from process.outputs import OutputDirError, staged_directory, written_by

OWNER = "clozeforge finetune"
OutputError = OutputDirError
"""--output cannot be written (held by another writer, or not ours to replace)."""


_foreign = written_by(OWNER, "results.json")
"""A directory is ours when its results.json says so."""


@contextlib.contextmanager
def staged_output(path: str, overwrite: bool) -> Iterator[str]:
    """Yield a staging directory; on success it replaces `path` whole (process/outputs.py)."""
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


def write(out: str, config, job, points: list, baseline, chosen, predictions: list[dict], models, place,
          seconds: float) -> tuple[list[dict], dict | None]:
    """Everything rank 0 writes into the staged output beside model/ (which the job saved from `chosen`, the arm
    with the best validation mean): see the module docstring. Returns the arms' records (each checkpoint's, then
    the baseline's) for `summary`."""
    task = job.task
    if predictions:
        with open(os.path.join(out, "predictions.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions)
    records = [{"step": p.arm.step, **p.record} for p in points]
    base_record = {"name": baseline.arm.name, "kind": "scratch" if not baseline.arm.pretrained else "model",
                   "model": None if not baseline.arm.pretrained else os.path.abspath(config.baseline),
                   **baseline.record} if baseline else None
    if len(points) > 1:
        plot_sweep(records, base_record, task.metric, os.path.join(out, "downstream.png"),
                   f"{task.name} on {os.path.basename(config.train)}: {config.model}")
        with open(os.path.join(out, "downstream.md"), "w", encoding="utf-8") as f:
            f.write(sweep_table(records, base_record, task.metric))
    results = _results(config, job, records, base_record, chosen, (models.max_len, models.length_from), seconds)
    results["devices"] = {"device": place.device.type, "precision": place.precision, "processes": place.world_size,
                          "data_parallel": place.data_parallel}
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    return records, base_record


def _results(config, job, points: list[dict], baseline: dict | None, chosen, length, seconds) -> dict:
    task, b = job.task, chosen.best
    recipe_fields = {k: v for k, v in dataclasses.asdict(config).items()
                     if k not in ("model", "train", "validation", "test", "output", "overwrite", "checkpoints",
                                  "test_language", "written")}
    return {
        "written_by": OWNER, "format_version": 2, "task": task.name, "model": os.path.abspath(config.model),
        "metric": task.metric, "scored_on": job.scored_on, "units": "points (x 100)",
        "data": {name: s.report() for name, s in job.splits.items()},
        "labels": task.labels_record(),
        "max_seq_len": {"value": length[0], "from": length[1]},
        "recipe": {**recipe_fields, "lr_grid": list(points[0]["grid"]["lrs"])},
        "pretrained": points[-1] if len(points) == 1 else None,
        "checkpoints": points if len(points) > 1 else None,
        "baseline": baseline,
        "gain": points[-1].get("gain"),
        "best_model": {"source": chosen.arm.name, "lr": chosen.record["lr"], "seed": b["seed"], "epoch": b["epoch"],
                       "validation_score": round(100 * b["validation"], 4), "pipeline": task.pipeline,
                       **({"calibration": b["calibration"]} if b["calibration"] else {})},
        "seconds": round(seconds, 1),
        **({"builtin": config.written} if getattr(config, "written", None) else {}),
    }


def summary(config, points: list[dict], baseline: dict | None, metric: str, scored_on: str) -> None:
    """Each arm's score (and gain) on stdout, once the output is in place; a warning when a gain is within its SE."""
    written = getattr(config, "written", None) or {}
    if written.get("zero_shot") and scored_on == "test":  # a transfer: which language it trained and tested in
        scored_on = f"test [{written['train_language']} -> {written['test_language']}]"
    for p in points:
        name = "pretrained" if p["step"] is None else f"step {p['step']}"
        print(f"{name:<12} {scored_on} {metric} {p['mean']:.2f} ± {p['se']:.2f}  ({_grid_text(p)}, "
              f"{config.seeds} seeds){_gain_text(p.get('gain'), scored_on)}")
    if baseline:
        print(f"{baseline['name']:<12} {scored_on} {metric} {baseline['mean']:.2f} ± {baseline['se']:.2f}  "
              f"({_grid_text(baseline)}, {config.seeds} seeds)")
    print(f"wrote {config.output}/results.json, {config.output}/model")
    for arm in [*points, *([baseline] if baseline else [])]:
        edge = arm["grid"].get("search", {}).get("at_edge")
        if edge:
            name = arm.get("name") or ("pretrained" if arm.get("step") is None else f"step {arm['step']}")
            print(f"clozeforge finetune: warning: {name}'s best lr {arm['lr']:g} is at the edge of its grid "
                  f"({'/'.join(f'{x:g}' for x in arm['grid']['lrs'])}) and the "
                  + ("search may add no more rates (--lr-extend)" if edge == "budget" else "ladder ends there")
                  + ": a better rate may lie beyond it", file=sys.stderr, flush=True)
    within = [p for p in points if p.get("gain") and p["gain"]["within_se"]]
    if within:
        g = within[-1]["gain"]
        print(f"clozeforge finetune: warning: the gain over {baseline['name']} ({g['mean']:+.2f} ± {g['se']:.2f}) is "
              f"within its standard error{f' at {len(within)} of {len(points)} checkpoints' if len(points) > 1 else ''}: "
              f"no measurable difference at {config.seeds} seeds", file=sys.stderr, flush=True)


def _grid_text(arm: dict) -> str:
    """"lr X of its grid a/b/c, N epochs at most": the chosen rate, the grid it was chosen from, the budget."""
    grid = arm["grid"]
    added = sum(len(r["added"]) for r in grid.get("search", {}).get("rounds", []))
    return (f"lr {arm['lr']:g} of its grid {'/'.join(f'{x:g}' for x in grid['lrs'])}"
            + (f" ({added} added at its edges)" if added else "")
            + f", {grid['epochs']} epoch{'s' * (grid['epochs'] != 1)}")


def _gain_text(gain: dict | None, scored_on: str) -> str:
    if not gain:
        return ""
    interval = (f", 95% bootstrap over {gain['bootstrap_examples']} {scored_on} examples "
                f"[{gain['bootstrap'][0]:+.2f}, {gain['bootstrap'][1]:+.2f}]") if "bootstrap" in gain else ""
    return f"   gain {gain['mean']:+.2f} ± {gain['se']:.2f} (paired SE{interval})"
