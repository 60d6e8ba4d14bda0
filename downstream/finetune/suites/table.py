"""One table per suite, as the anchors report a benchmark: each task's score ± SE over its seeds, and the average.

In:  per arm (the model, and a baseline when there is one), each task's fine-tuning runs on the chosen learning
     rate: one {split: {metric: value in points}} per seed (`task_scores` reads out what the task reports).
Out: SUITE.md (a markdown table, tasks by rows, arms by columns), SUITE.json (the same numbers) and SUITE.png
     (bars with ± SE whiskers) in a directory.

A task's score on one seed is the mean of the metrics its benchmark reports (GLUE's convention: MRPC and QQP
average F1 and accuracy, STS-B Pearson and Spearman, MNLI its matched and mismatched accuracies); its mean and
standard error are over seeds. The suite's average is the mean of the task scores (MosaicBERT's GLUE average, of
eight tasks), its SE sqrt(Σ SE²) / n, tasks being independent runs; when a task of the suite is missing the
average says of how many tasks it is.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence

from downstream.finetune.suites.base import SuiteTask
from downstream.stats import mean_and_se


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskScores:
    name: str
    """The task's name in its suite."""
    metrics: dict[str, list[float]]
    """Reported metric ("f1", or "accuracy (validation_mismatched)" for a second scored split) → its value on each
    seed, in points."""

    @property
    def per_seed(self) -> list[float]:
        values = list(self.metrics.values())
        return [sum(v[i] for v in values) / len(values) for i in range(len(values[0]))]


def task_scores(task: SuiteTask, runs: Sequence[Mapping[str, Mapping[str, float]]]) -> TaskScores:
    """What `task` reports from its runs (one {split: {metric: points}} per seed), on each of its scored splits."""
    if not runs:
        raise ValueError(f"{task.name}: no runs to tabulate")
    metrics: dict[str, list[float]] = {}
    for i, split in enumerate(task.scored_splits):
        for metric in task.metrics:
            key = metric if i == 0 else f"{metric} ({split})"
            try:
                metrics[key] = [float(run[split][metric]) for run in runs]
            except KeyError:
                raise ValueError(f"{task.name}: a run has no {metric!r} on its {split} split") from None
    return TaskScores(name=task.name, metrics=metrics)


def summarise(tasks: Sequence[TaskScores], expected: int | None = None) -> dict:
    """{"tasks": [{name, seeds, metrics: {m: {mean, se}}, score: {mean, se}}], "average": {mean, se, tasks, of}}."""
    rows = []
    for t in tasks:
        mean, se = mean_and_se(t.per_seed)
        rows.append({"name": t.name, "seeds": len(t.per_seed),
                     "metrics": {m: dict(zip(("mean", "se"), mean_and_se(v), strict=True)) for m, v in t.metrics.items()},
                     "score": {"mean": mean, "se": se}})
    n = len(rows)
    average = {"mean": sum(r["score"]["mean"] for r in rows) / n if n else float("nan"),
               "se": math.sqrt(sum(r["score"]["se"] ** 2 for r in rows)) / n if n else float("nan"),
               "tasks": n, "of": expected if expected is not None else n}
    return {"tasks": rows, "average": average}


def _cell(mean: float, se: float, seeds: int) -> str:
    return f"{mean:.1f} ± {se:.1f}" if seeds > 1 else f"{mean:.1f}"


def markdown(suite: str, arms: Mapping[str, dict]) -> str:
    names = list(arms)
    first = arms[names[0]]
    lines = [f"| {suite} | reported | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for i, task in enumerate(first["tasks"]):
        cells = []
        for name in names:
            row = arms[name]["tasks"][i]
            parts = " / ".join(f"{v['mean']:.1f}" for v in row["metrics"].values())
            score = _cell(row["score"]["mean"], row["score"]["se"], row["seeds"])
            cells.append(score if len(row["metrics"]) == 1 else f"{score} ({parts})")
        reported = " / ".join(task["metrics"])
        lines.append(f"| {task['name']} | {reported} (seeds: {task['seeds']}) | " + " | ".join(cells) + " |")
    avg = first["average"]
    label = "average" if avg["tasks"] == avg["of"] else f"average of {avg['tasks']} of {avg['of']} tasks"
    lines.append(f"| **{label}** | | " + " | ".join(
        f"**{arms[n]['average']['mean']:.1f} ± {arms[n]['average']['se']:.1f}**" for n in names) + " |")
    single = [t["name"] for t in first["tasks"] if t["seeds"] == 1]
    if single:  # one seed has no spread to measure: such a task adds nothing to the average's SE
        lines.append(f"\nScores in points, mean ± SE over seeds; {', '.join(single)} ran one seed (no SE), which the "
                     "average's SE leaves out.")
    return "\n".join(lines) + "\n"


def write_table(directory: str, suite: str, arms: Mapping[str, Sequence[TaskScores]], *,
                expected: int | None = None) -> dict[str, str]:
    """Write SUITE.md, SUITE.json and SUITE.png under `directory`; `arms`: {arm name: its tasks' scores}, every arm
    with the same tasks in the same order; `expected`: how many tasks the full suite has. Out: {kind: path}."""
    summaries = {arm: summarise(tasks, expected) for arm, tasks in arms.items()}
    order = [[t["name"] for t in s["tasks"]] for s in summaries.values()]
    if any(o != order[0] for o in order):
        raise ValueError(f"{suite}: the arms hold different tasks: {order}")
    os.makedirs(directory, exist_ok=True)
    paths = {kind: os.path.join(directory, f"{suite}.{kind}") for kind in ("md", "json", "png")}
    with open(paths["md"], "w") as f:
        f.write(markdown(suite, summaries))
    with open(paths["json"], "w") as f:
        json.dump({"suite": suite, "unit": "points (x 100)", "arms": summaries}, f, indent=2)
        f.write("\n")
    _plot(paths["png"], suite, summaries)
    return paths


def _plot(path: str, suite: str, summaries: Mapping[str, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = next(iter(summaries.values()))
    labels = [t["name"] for t in first["tasks"]] + ["average"]
    width = 0.8 / len(summaries)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(labels) + 1.5), 3.6))
    for k, (arm, s) in enumerate(summaries.items()):
        means = [t["score"]["mean"] for t in s["tasks"]] + [s["average"]["mean"]]
        ses = [t["score"]["se"] for t in s["tasks"]] + [s["average"]["se"]]
        xs = [i + (k - (len(summaries) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, means, width, yerr=ses, capsize=3, label=arm)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel("score (points), mean ± SE over seeds")
    ax.set_title(suite)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
