"""The PNGs of `clozeforge senses evaluate` (a sweep) and `clozeforge similarity` (per layer), with matplotlib (Agg).

In:  evaluate's arms (their scores and pretraining steps) and the fine-tuning gains read from finetune results;
     similarity's per-layer report.
Out: senses.png: 1-NN accuracy over pretraining steps (± SE) with the MFS and random baselines and a scratch model as
     bands, the fine-tuning gain per step on a second axis; similarity.png: per layer, the mean cosine of random words
     before and after standardisation (Ethayarajh 2019's anisotropy baseline), the share of that cosine the top
     dimensions carry (Timkey & van Schijndel 2021), and the Spearman correlation with human scores.
"""

from __future__ import annotations

import os


def short(path: str) -> str:
    """The last two parts of a path, how a figure names its model or file (clozeforge-demo/hf)."""
    parts = os.path.normpath(path).split(os.sep)
    return "/".join(parts[-2:])


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_sweep(arms: list[dict], finetune: list[dict], path: str, title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    points = [a for a in arms if a["step"] is not None]
    steps = [a["step"] for a in points]
    pct = lambda a, key: 100 * a["score"][key]
    ax.errorbar(steps, [pct(a, "accuracy") for a in points], yerr=[pct(a, "accuracy_se") for a in points], marker="o",
                capsize=3, label="1-NN WSD, checkpoint")
    first = arms[0]
    for key, label, style in (("mfs", "most frequent sense", "--"), ("random", "random", ":")):
        ax.axhline(pct(first, key), color="grey", linestyle=style, label=label)
    for a in arms:
        if a["name"] == "scratch":
            mean, se = pct(a, "accuracy"), pct(a, "accuracy_se")
            ax.axhspan(mean - se, mean + se, color="tab:red", alpha=0.2, label="scratch (± SE)")
    ax.set_xlabel("pretraining step")
    ax.set_ylabel("WSD accuracy, % (± SE)")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if finetune:
        twin = ax.twinx()
        for entry, color in zip(finetune, ("tab:green", "tab:purple", "tab:olive", "tab:cyan")):
            xs = [s if s is not None else max(steps) for s, _, _ in entry["points"]]
            twin.errorbar(xs, [g for _, g, _ in entry["points"]], yerr=[e for _, _, e in entry["points"]], marker="s",
                          color=color, capsize=3, linestyle="-.", label=f"fine-tuning gain: {entry['data'] or entry['task']}")
        twin.axhline(0, color=color, linewidth=0.5)
        twin.set_ylabel("fine-tuning gain over the baseline, points (± SE)")
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels, fontsize=8, loc="best")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_layers(report: dict, path: str, title: str) -> None:
    plt = _pyplot()
    rows = [row for row in report["layers"] if isinstance(row["layer"], int)]
    pooled = [row for row in report["layers"] if not isinstance(row["layer"], int)]
    layers = [row["layer"] for row in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ax = axes[0]
    for key, label in (("before", "raw"), ("after", report["standardize"])):
        ax.plot(layers, [row["anisotropy"][key]["mean_cosine"] for row in rows], marker="o", label=label)
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set_title("mean cosine of random words (anisotropy)", fontsize=9)
    ax = axes[1]
    for k in report["top_dimensions"]:
        ax.plot(layers, [row["anisotropy"]["before"][f"top{k}_share"] for row in rows], marker="o",
                label=f"top {k} dimension{'s' * (k > 1)}")
    ax.set_title("share of that cosine carried by the top dimensions (raw)", fontsize=9)
    ax = axes[2]
    for (key, label), color in zip((("spearman", "raw"), ("spearman_standardized", report["standardize"])), ("C0", "C1")):
        ax.plot(layers, [row[key] if row[key] is not None else float("nan") for row in rows], marker="o", color=color,
                label=label)
        for row in pooled:  # the mean over --layers, the vector embed and senses use
            if row[key] is not None:
                ax.axhline(row[key], color=color, linestyle=":", label=f"{label}, {row['layer']}")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set_title(f"Spearman with human scores ({report['pairs']['kept']} pairs)", fontsize=9)
    for ax in axes:
        ax.set_xlabel("layer (0: embeddings)")
        ax.set_xticks(layers)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
