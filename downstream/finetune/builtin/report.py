"""The gains of several built-in tasks as one table: per task, the export against scratch, then their mean.

In:  {task name: the results.json of its `clozeforge finetune --baseline scratch` run}.
Out: `gains` → rows {task, metric, pretrained, scratch, gain, se, bootstrap (the 95% interval over test examples,
     or None)}; `mean_gain` → (mean, SE) over tasks;
     `table` → the Markdown the demo prints and experiments/recipe_trial.py records. Standard library only (the demo's
     process never imports torch).

The mean's SE combines the tasks' own SEs (each a paired SE over seeds): sqrt(sum se_i^2) / n. It says how
far seed noise moves the mean over these tasks, not how far another set of tasks would move it; the per-task
rows show that spread.
"""

from __future__ import annotations

import json
import math

from downstream.stats import paired_difference


def gains(results: dict[str, str], scratch: dict[str, str] | None = None) -> list[dict]:
    """One row per task. `scratch`: {task: another results.json} whose baseline arm replaces this one's (the
    same architecture, length, seeds and grid give the same scratch runs, so a recipe search trains them once);
    the gain is then the paired difference over seeds, as finetune computes it. A task it does not name keeps its
    own baseline and finetune's gain (with its bootstrap)."""
    rows = []
    for task, path in results.items():
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
        pretrained, baseline, gain = r["pretrained"], r["baseline"], r["gain"]
        if scratch and task in scratch:
            with open(scratch[task], encoding="utf-8") as f:
                baseline = json.load(f)["baseline"]
            mean, se = paired_difference(pretrained["scores"], baseline["scores"])
            gain = {"mean": mean, "se": se}  # no bootstrap: the two arms' predictions are in different runs
        rows.append({"task": task, "metric": r["metric"], "pretrained": pretrained["mean"], "pretrained_se": pretrained["se"],
                     "pretrained_lr": pretrained.get("lr"), "scratch": baseline["mean"], "scratch_se": baseline["se"],
                     "scratch_lr": baseline.get("lr"), "gain": gain["mean"], "se": gain["se"],
                     "bootstrap": gain.get("bootstrap")})
    return rows


def mean_gain(rows: list[dict]) -> tuple[float, float]:
    n = len(rows)
    return sum(r["gain"] for r in rows) / n, math.sqrt(sum(r["se"] ** 2 for r in rows)) / n


def table(rows: list[dict]) -> str:
    lines = ["| task | metric | pretrained | scratch | gain (± paired SE) | test bootstrap 95% |", "|---|---|---|---|---|---|"]
    for r in rows:
        interval = "[{:+.1f}, {:+.1f}]".format(*r["bootstrap"]) if r.get("bootstrap") else "-"
        lines.append(f"| {r['task']} | {r['metric']} | {r['pretrained']:.1f} ± {r['pretrained_se']:.1f} (lr {r['pretrained_lr']:g}) "
                     f"| {r['scratch']:.1f} ± {r['scratch_se']:.1f} (lr {r['scratch_lr']:g}) | {r['gain']:+.1f} ± {r['se']:.1f} | {interval} |")
    mean, se = mean_gain(rows)
    lines.append(f"| **mean of {len(rows)}** | | | | **{mean:+.1f} ± {se:.1f}** | |")
    return "\n".join(lines) + "\n"
