"""`clozeforge finetune MODEL --task classify|pair|tag|span --train URL --validation URL [--test URL] --output DIR`.

In:  MODEL, an export directory or a training RUN (its latest checkpoint, or those of --checkpoints, exported
     on the fly with trainer.downstream.export); labelled splits (see data.py); the recipe flags (config.py).
Out, in DIR (written beside it, then renamed in: see output.py):
    results.json       task; per data file its sha256, lines and records read, examples kept, drops per reason
                       with their first line numbers (read == kept + dropped, checked); recipe and lr grid;
                       per model (each checkpoint, and scratch with --baseline scratch): each lr's mean ± SE,
                       the chosen lr, per-seed validation (and test) metrics; the gain over scratch ± SE
    model/             the best fine-tuned run (by validation) as a HuggingFace directory with its tokenizer and
                       label names: transformers.pipeline("text-classification" | "token-classification" |
                       "question-answering", model=DIR/model) loads it with no clozeforge code
    predictions.jsonl  that model's predictions on the test split (with --test)
    downstream.png, downstream.md   with --checkpoints: score against pretraining step (mean ± SE)
Scores are in points (x 100): on the test split when there is one, else on validation (which also picked the
lr, so it flatters a little; results.json says which). The gain's SE is sqrt(SE_a^2 + SE_b^2): the two sets
of seeds are independent runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import tempfile
import time

import torch

from schemas import ContractError
from schemas.config import add_flags, field_docs, from_flags
from trainer.downstream.finetune import data as data_mod
from trainer.downstream.finetune import output, recipe, tasks
from trainer.downstream.finetune.config import FinetuneConfig
from trainer.downstream.finetune.metrics import mean_and_se

METRIC = {"classify": "accuracy", "pair": "accuracy", "tag": "entity_f1", "span": "f1"}
PIPELINE = {"classify": "text-classification", "pair": "text-classification", "tag": "token-classification",
            "span": "question-answering"}
_STEP = re.compile(r"^step_(\d{8})$")


def model_sources(model: str, checkpoints: str | None) -> list[tuple[int | None, str | None]]:
    """[(pretraining step, checkpoint tag)]: one (None, None) for an export directory."""
    if os.path.exists(os.path.join(model, "config.json")):
        if checkpoints:
            raise ContractError(f"--checkpoints needs a training RUN directory; {model} is an export")
        return [(None, None)]
    root = os.path.join(model, "checkpoints")
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{model}: neither an export (no config.json) nor a training run (no checkpoints/)")
    tags = sorted(t for t in os.listdir(root) if _STEP.match(t))
    if not tags:
        raise FileNotFoundError(f"{root}: no checkpoint")
    if checkpoints in (None, "latest"):
        from trainer.downstream.export import load_run_model  # noqa: F401 - fail early if the trainer half is missing

        return [(None, None)]  # export_dir resolves the latest intact tag
    if checkpoints == "all":
        chosen = tags
    else:
        try:
            steps = [int(s) for s in checkpoints.split(",") if s.strip()]
        except ValueError:
            raise ContractError(f"--checkpoints: expected all or STEP,STEP,..., got {checkpoints!r}") from None
        chosen = [f"step_{s:08d}" for s in steps]
        missing = [t for t in chosen if t not in tags]
        if missing:
            raise FileNotFoundError(f"{root}: no checkpoint {missing[0]} (there are: {', '.join(tags)})")
    return [(int(_STEP.match(t).group(1)), t) for t in chosen]


_EXPORTED: dict[tuple[str, str | None], tuple[str, int | None]] = {}


def export_dir(model: str, tag: str | None, scratch_root: str) -> tuple[str, int | None]:
    """An export directory for MODEL (itself, or a checkpoint exported into `scratch_root`) and its step."""
    if os.path.exists(os.path.join(model, "config.json")):
        return model, None
    if (model, tag) not in _EXPORTED:
        from trainer.downstream.export import export_hf, load_run_model

        net, client, tag_used, state = load_run_model(model, tag)  # any ZeRO stage, consolidated to fp32 on CPU
        target = os.path.join(scratch_root, tag_used)
        export_hf(state, net.config, os.path.join(model, "vocab"), target, card={"checkpoint": tag_used, "step": client.get("step")})
        _EXPORTED[(model, tag)] = (target, client.get("step"))
    return _EXPORTED[(model, tag)]


def build_model(task: str, model_dir: str, head: dict, dropout: float, seed: int, pretrained: bool):
    """The task's transformers model on the export's encoder (or the same architecture, randomly initialised)."""
    import transformers

    torch.manual_seed(seed)  # the new head's initialisation (and the whole model's, from scratch)
    overrides = {**head, "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    cls = tasks.model_class(task)
    if pretrained:
        return cls.from_pretrained(model_dir, **overrides)
    return cls.from_config(transformers.AutoConfig.from_pretrained(model_dir, **overrides))


class Job:
    """The splits, encoded once, and every (model, lr, seed) run over them."""

    def __init__(self, config: FinetuneConfig, tokenizer, hidden_size: int) -> None:
        self.config, self.task, self.recipe = config, config.task, config.recipe
        c = config
        columns = c.columns
        read = lambda url: data_mod.read_split(url, c.task, columns, skip_bad_rows=c.skip_bad_rows, quoting=c.quoting)  # noqa: E731
        self.splits = {"train": read(c.train), "validation": read(c.validation)}
        if c.test:
            self.splits["test"] = read(c.test)
        others = [s for name, s in self.splits.items() if name != "train"]
        if c.task in ("classify", "pair"):
            self.labels = data_mod.label_map(self.splits["train"], c.columns.label_column)
            for split in others:
                data_mod.check_labels(split, self.labels, c.columns.label_column)
        elif c.task == "tag":
            self.labels = data_mod.tag_map(self.splits["train"], others, c.columns.tags_column)
        else:
            self.labels = None
        self.head = tasks.head_config(c.task, self.labels)
        max_len = min(c.max_seq_len, tokenizer.model_max_length)
        self.features = {name: tasks.encode(c.task, s.examples, tokenizer, self.labels, max_len=max_len, stride=c.stride)
                         for name, s in self.splits.items()}
        self.lrs = c.lr or recipe.default_lrs(hidden_size)
        self.best: dict | None = None  # the best pretrained run by validation: what model/ holds

    def runs(self, model_dir: str, pretrained: bool, name: str, progress: recipe.Progress) -> dict:
        """Every lr x seed run from one starting point; the lr with the best mean validation score is reported."""
        per_lr = {}
        for lr in self.lrs:
            runs = []
            for seed in range(self.config.seeds):
                model = build_model(self.task, model_dir, self.head, self.config.dropout, seed, pretrained)
                result = recipe.train(self.task, model, self.features["train"], self.features["validation"],
                                      self.splits["validation"].examples, self.labels, self.recipe, lr=lr, seed=seed,
                                      progress=progress, label=f"[{name}] lr {lr:g} seed {seed}")
                run = {"seed": seed, "epoch": result.epoch, "validation": _points(result.metrics),
                       "history": [_points(h, keep=("epoch",)) for h in result.history]}
                if "test" in self.splits:
                    model.load_state_dict(result.state)
                    metrics, _ = recipe.evaluate(self.task, model, self.features["test"], self.splits["test"].examples,
                                                 self.labels, self.recipe)
                    run["test"] = _points(metrics)
                if pretrained and (self.best is None or result.metrics["score"] > self.best["score"]):
                    self.best = {"score": result.metrics["score"], "state": result.state, "model_dir": model_dir,
                                 "source": name, "lr": lr, "seed": seed, "epoch": result.epoch}
                runs.append(run)
            valid_mean, valid_se = mean_and_se([r["validation"]["score"] for r in runs])
            per_lr[lr] = {"validation_mean": valid_mean, "validation_se": valid_se, "runs": runs}
        lr = max(per_lr, key=lambda k: per_lr[k]["validation_mean"])
        scored_on = "test" if "test" in self.splits else "validation"
        mean, se = mean_and_se([r[scored_on]["score"] for r in per_lr[lr]["runs"]])
        return {"lr": lr, "mean": mean, "se": se, "scores": [r[scored_on]["score"] for r in per_lr[lr]["runs"]],
                "runs": per_lr[lr]["runs"],
                "per_lr": {f"{k:g}": {"validation_mean": v["validation_mean"], "validation_se": v["validation_se"]}
                           for k, v in per_lr.items()}}

    def save_best(self, tokenizer, directory: str) -> list[dict]:
        """Write the best run as a HuggingFace directory; its test predictions (empty without --test)."""
        b = self.best
        model = build_model(self.task, b["model_dir"], self.head, self.config.dropout, b["seed"], True)
        model.load_state_dict(b["state"])
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        if "test" not in self.splits:
            return []
        _, predicted = recipe.evaluate(self.task, model, self.features["test"], self.splits["test"].examples,
                                       self.labels, self.recipe)
        return tasks.prediction_records(self.task, self.splits["test"].examples, predicted, self.labels)


def _points(metrics: dict, keep: tuple[str, ...] = ()) -> dict:
    return {k: (v if k in keep else round(100 * v, 4)) for k, v in metrics.items()}


def _gain(a: dict, b: dict) -> dict:
    return {"mean": a["mean"] - b["mean"], "se": (a["se"] ** 2 + b["se"] ** 2) ** 0.5}


def run(config: FinetuneConfig) -> int:
    import transformers

    started = time.time()
    _EXPORTED.clear()  # exports live in this run's temporary directory
    sources = model_sources(config.model, config.checkpoints)
    with tempfile.TemporaryDirectory(prefix="clozeforge-finetune-exports.") as exports, \
            output.staged_output(config.output, config.overwrite) as out:
        first_dir, _ = export_dir(config.model, sources[0][1], exports)
        tokenizer = transformers.AutoTokenizer.from_pretrained(first_dir)
        hidden = transformers.AutoConfig.from_pretrained(first_dir).hidden_size
        job = Job(config, tokenizer, hidden)
        for name, split in job.splits.items():
            dropped = f", dropped {dict(split.dropped)}" if split.dropped else ""
            print(f"{name}: {split.url}  {split.read} read, {len(split.examples)} examples{dropped}", flush=True)
        models = len(sources) + (config.baseline == "scratch")
        progress = recipe.Progress(models * len(job.lrs) * config.seeds * config.epochs)
        points = []
        for step, tag in sources:
            model_dir, step = export_dir(config.model, tag, exports)
            name = "pretrained" if step is None else f"step {step}"
            points.append({"step": step, **job.runs(model_dir, True, name, progress)})
        baseline = job.runs(first_dir, False, "scratch", progress) if config.baseline == "scratch" else None
        if baseline:
            for p in points:
                p["gain"] = _gain(p, baseline)
        os.makedirs(os.path.join(out, "model"))
        predictions = job.save_best(tokenizer, os.path.join(out, "model"))
        if predictions:
            with open(os.path.join(out, "predictions.jsonl"), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions)
        metric = "pearson" if job.labels is None and config.task in ("classify", "pair") else METRIC[config.task]
        if len(points) > 1:
            output.plot_sweep(points, baseline, metric, os.path.join(out, "downstream.png"),
                              f"{config.task} on {os.path.basename(config.train)}: {config.model}")
            with open(os.path.join(out, "downstream.md"), "w", encoding="utf-8") as f:
                f.write(output.sweep_table(points, baseline, metric))
        results = _results(config, job, points, baseline, metric, time.time() - started)
        with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    _summary(config, points, baseline, metric, results["scored_on"])
    return 0


def _results(config, job: Job, points, baseline, metric, seconds) -> dict:
    b = job.best
    recipe_fields = {k: v for k, v in dataclasses.asdict(config).items()
                     if k not in ("model", "train", "validation", "test", "output", "overwrite", "checkpoints")}
    return {
        "written_by": output.OWNER, "format_version": 1, "task": config.task, "model": os.path.abspath(config.model),
        "metric": metric, "scored_on": "test" if "test" in job.splits else "validation", "units": "points (x 100)",
        "data": {name: s.report() for name, s in job.splits.items()},
        "labels": "regression" if job.labels is None and config.task != "span" else
                  (None if job.labels is None else [str(x) for x in job.labels.labels]),
        "recipe": {**recipe_fields, "lr_grid": list(job.lrs)},
        "pretrained": points[-1] if len(points) == 1 else None,
        "checkpoints": points if len(points) > 1 else None,
        "baseline": baseline,
        "gain": points[-1].get("gain"),
        "best_model": {"source": b["source"], "lr": b["lr"], "seed": b["seed"], "epoch": b["epoch"],
                       "validation_score": round(100 * b["score"], 4), "pipeline": PIPELINE[config.task]},
        "seconds": round(seconds, 1),
    }


def _summary(config, points, baseline, metric, scored_on) -> None:
    for p in points:
        name = "pretrained" if p["step"] is None else f"step {p['step']}"
        gain = f"   gain {p['gain']['mean']:+.2f} ± {p['gain']['se']:.2f}" if p.get("gain") else ""
        print(f"{name:<12} {scored_on} {metric} {p['mean']:.2f} ± {p['se']:.2f}  (lr {p['lr']:g}, "
              f"{config.seeds} seeds){gain}")
    if baseline:
        print(f"{'scratch':<12} {scored_on} {metric} {baseline['mean']:.2f} ± {baseline['se']:.2f}  (lr {baseline['lr']:g}, "
              f"{config.seeds} seeds)")
    print(f"wrote {config.output}/results.json, {config.output}/model")


def finetune_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge finetune",
                                 description="Fine-tune an exported model (or a run's checkpoints) on labelled data "
                                             "and score it, optionally beside the same model trained from scratch.")
    ap.add_argument("model", metavar="MODEL", help=field_docs(FinetuneConfig)["model"].removeprefix("(the positional MODEL) "))
    add_flags(ap, FinetuneConfig)
    return ap


def finetune_main(argv: list[str] | None = None) -> int:
    args = finetune_parser().parse_args(argv)
    try:
        config = dataclasses.replace(from_flags(FinetuneConfig, args), model=args.model)
    except ValueError as e:
        return _fail(str(e))
    try:
        import sklearn  # noqa: F401
        import transformers
    except ImportError as e:
        return _fail(f"missing dependency ({e.name}); install it with: pip install 'clozeforge[demo]'")
    # "some weights were newly initialised" is the point of fine-tuning, and a bar per model load says nothing the
    # epoch lines do not; both are put back after, for a caller that runs this in its own process
    verbosity, bars = transformers.logging.get_verbosity(), transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        return run(config)
    except (data_mod.DataError, output.OutputError, ContractError, FileNotFoundError) as e:
        return _fail(str(e))
    except ValueError as e:  # export's ExportError and the model's own refusals
        return _fail(str(e).splitlines()[0])
    except KeyboardInterrupt:  # the staged output is discarded: --output holds what it held before
        print("clozeforge finetune: interrupted; --output is as it was, rerun the same command", file=sys.stderr)
        return 130
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bars:
            transformers.utils.logging.enable_progress_bar()


def _fail(message: str) -> int:
    print(f"clozeforge finetune: error: {message}", file=sys.stderr)
    return 2
