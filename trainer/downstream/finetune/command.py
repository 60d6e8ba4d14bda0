"""`clozeforge finetune MODEL --task classify|pair|tag|span --train URL --validation URL [--test URL] --output DIR`.

In:  MODEL, an export directory or a training RUN (its latest checkpoint, or those of --checkpoints, exported
     on the fly with trainer.downstream.export); labelled splits (see data.py); the recipe flags (config.py).
Out, in DIR (written beside it, then renamed in: see output.py):
    results.json       task; data files with sha256, rows read and dropped per reason; recipe and lr grid;
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
import contextlib
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
from trainer.downstream.finetune import output, ranks, recipe, tasks
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
        read = lambda url: data_mod.read_split(url, c.task, columns, skip_bad_rows=c.skip_bad_rows)  # noqa: E731
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

    def plan(self, arms: list[tuple[str, bool, str]]) -> list[tuple[int, float, int]]:
        """Every run of the job, (arm, lr, seed), in the order one process runs them; an arm is one starting point
        (model_dir, pretrained, name): each checkpoint, then scratch."""
        return [(arm, lr, seed) for arm in range(len(arms)) for lr in self.lrs for seed in range(self.config.seeds)]

    def one_run(self, arms, spec, progress: recipe.Progress, place: recipe.Place) -> dict:
        """One (arm, lr, seed) run → its record; the weights of the best pretrained run so far stay in self.best."""
        arm, lr, seed = spec
        model_dir, pretrained, name = arms[arm]
        model = build_model(self.task, model_dir, self.head, self.config.dropout, seed, pretrained)
        result = recipe.train(self.task, model, self.features["train"], self.features["validation"],
                              self.splits["validation"].examples, self.labels, self.recipe, lr=lr, seed=seed,
                              progress=progress, label=f"[{name}] lr {lr:g} seed {seed}", place=place)
        run = {"seed": seed, "epoch": result.epoch, "validation": _points(result.metrics),
               "history": [_points(h, keep=("epoch",)) for h in result.history]}
        if "test" in self.splits:
            model.load_state_dict(result.state)
            metrics, _ = recipe.evaluate(self.task, model, self.features["test"], self.splits["test"].examples,
                                         self.labels, self.recipe, place)
            run["test"] = _points(metrics)
        if pretrained and (self.best is None or result.metrics["score"] > self.best["score"]):
            self.best = {"score": result.metrics["score"], "state": result.state, "model_dir": model_dir,
                         "source": name, "lr": lr, "seed": seed, "epoch": result.epoch, "spec": list(spec)}
        return {"spec": list(spec), "score": result.metrics["score"], "run": run}

    def chosen(self, arms, records: list[dict]) -> dict:
        """The best pretrained run by validation (the first of equals, in plan order), as self.best describes it."""
        record = None
        for r in records:
            if arms[r["spec"][0]][1] and (record is None or r["score"] > record["score"]):
                record = r
        arm, lr, seed = record["spec"]
        return {"score": record["score"], "model_dir": arms[arm][0], "source": arms[arm][2], "lr": lr, "seed": seed,
                "epoch": record["run"]["epoch"], "spec": record["spec"]}

    def summary(self, arm: int, records: list[dict]) -> dict:
        """One arm's runs: each lr's mean ± SE on validation; the lr with the best mean is reported."""
        per_lr = {}
        for lr in self.lrs:
            runs = [r["run"] for r in records if r["spec"][0] == arm and r["spec"][1] == lr]
            valid_mean, valid_se = mean_and_se([r["validation"]["score"] for r in runs])
            per_lr[lr] = {"validation_mean": valid_mean, "validation_se": valid_se, "runs": runs}
        lr = max(per_lr, key=lambda k: per_lr[k]["validation_mean"])
        scored_on = "test" if "test" in self.splits else "validation"
        mean, se = mean_and_se([r[scored_on]["score"] for r in per_lr[lr]["runs"]])
        return {"lr": lr, "mean": mean, "se": se, "scores": [r[scored_on]["score"] for r in per_lr[lr]["runs"]],
                "runs": per_lr[lr]["runs"],
                "per_lr": {f"{k:g}": {"validation_mean": v["validation_mean"], "validation_se": v["validation_se"]}
                           for k, v in per_lr.items()}}

    def save_best(self, tokenizer, directory: str, place: recipe.Place = recipe.Place()) -> list[dict]:
        """Write the best run as a HuggingFace directory; its test predictions (empty without --test)."""
        b = self.best
        model = build_model(self.task, b["model_dir"], self.head, self.config.dropout, b["seed"], True)
        model.load_state_dict(b["state"])
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        if "test" not in self.splits:
            return []
        _, predicted = recipe.evaluate(self.task, model.to(place.device), self.features["test"], self.splits["test"].examples,
                                       self.labels, self.recipe, place)
        return tasks.prediction_records(self.task, self.splits["test"].examples, predicted, self.labels)


def _points(metrics: dict, keep: tuple[str, ...] = ()) -> dict:
    return {k: (v if k in keep else round(100 * v, 4)) for k, v in metrics.items()}


def _gain(a: dict, b: dict) -> dict:
    return {"mean": a["mean"] - b["mean"], "se": (a["se"] ** 2 + b["se"] ** 2) ** 0.5}


def run(config: FinetuneConfig) -> int:
    place = ranks.join(config.device, config.precision, config.data_parallel)
    try:
        return _run(config, place)
    finally:
        ranks.leave()


def _run(config: FinetuneConfig, place: recipe.Place) -> int:
    import transformers

    started = time.time()
    _EXPORTED.clear()  # exports live in this run's temporary directory
    sources = model_sources(config.model, config.checkpoints)
    writes = place.rank == 0  # the other ranks compute runs and hand them to rank 0
    with tempfile.TemporaryDirectory(prefix="clozeforge-finetune-exports.") as exports, \
            (output.staged_output(config.output, config.overwrite) if writes else contextlib.nullcontext()) as out:
        first_dir, _ = export_dir(config.model, sources[0][1], exports)
        tokenizer = transformers.AutoTokenizer.from_pretrained(first_dir)
        hidden = transformers.AutoConfig.from_pretrained(first_dir).hidden_size
        job = Job(config, tokenizer, hidden)
        for name, split in job.splits.items():
            dropped = f", dropped {dict(split.dropped)}" if split.dropped else ""
            if writes:
                print(f"{name}: {split.url}  {len(split.examples)} examples{dropped}", flush=True)
        arms = []
        for step, tag in sources:
            model_dir, step = export_dir(config.model, tag, exports)
            arms.append((model_dir, True, "pretrained" if step is None else f"step {step}"))
        if config.baseline == "scratch":
            arms.append((first_dir, False, "scratch"))
        plan = job.plan(arms)
        share = sum(ranks.owner(i, place) == place.rank for i in range(len(plan))) if not place.data_parallel else len(plan)
        quiet = place.data_parallel and place.rank != 0  # every rank computes the same epochs: rank 0 tells them
        prefix = f"rank {place.rank}: " if place.world_size > 1 and not place.data_parallel else ""
        progress = recipe.Progress(share * config.epochs, print_fn=(lambda *a, **k: None) if quiet else
                                   (lambda line, **k: print(prefix + line, **k)))
        records = ranks.spread(plan, lambda spec: job.one_run(arms, spec, progress, place), place)
        chosen = job.chosen(arms, records)
        mine = job.best if job.best and job.best["spec"] == chosen["spec"] else None
        state = ranks.fetch_state(mine and mine["state"], ranks.owner(plan.index(tuple(chosen["spec"])), place), place)
        if not writes:
            return 0
        job.best = {**chosen, "state": state}
        points = [{"step": step, **job.summary(arm, records)} for arm, (step, _) in enumerate(sources)]
        baseline = job.summary(len(sources), records) if config.baseline == "scratch" else None
        if baseline:
            for p in points:
                p["gain"] = _gain(p, baseline)
        os.makedirs(os.path.join(out, "model"))
        predictions = job.save_best(tokenizer, os.path.join(out, "model"), place)
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
        results["devices"] = {"device": place.device.type, "precision": place.precision, "processes": place.world_size,
                              "data_parallel": place.data_parallel}
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
        "data": {name: {"url": s.url, "sha256": s.sha256, "rows_read": s.read, "examples": len(s.examples),
                        "dropped": dict(s.dropped)} for name, s in job.splits.items()},
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
    argv = list(sys.argv[1:] if argv is None else argv)
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
    if config.nproc_per_node > 1 and "RANK" not in os.environ:  # not yet inside a launcher: become one
        try:
            ranks.check(config.device, config.precision, config.nproc_per_node)
        except ValueError as e:
            return _fail(str(e))
        return ranks.launch(config.nproc_per_node, argv)
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
    if os.environ.get("RANK", "0") == "0":  # every rank reads the same inputs: rank 0 says what is wrong, once
        print(f"clozeforge finetune: error: {message}", file=sys.stderr)
    return 2
