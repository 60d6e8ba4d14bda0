"""`clozeforge finetune MODEL --task classify|pair|tag|span --train URL --validation URL [--test URL] --output DIR`.

In:  MODEL, an export directory or a training RUN (its latest checkpoint, or those of --checkpoints, exported
     on the fly with downstream.export); labelled splits (data.py, read row by row by the task: tasks/);
     the recipe flags (config.py); --baseline scratch|MODEL2, the arm the model is compared with.
Out, in DIR (written beside it, then renamed in: see output.py):
    results.json       task, metric; per data file its sha256, lines and records read,
                       examples kept, drops per reason with their first line numbers (read == kept + dropped,
                       checked); the sequence
                       length; per arm (the model or each checkpoint, the baseline): its lr grid and epochs,
                       each lr's validation mean ± SE, the chosen lr, per-seed validation (and test) metrics;
                       the gain over the baseline: paired mean ± SE over seeds and a bootstrap 95% interval
                       over test examples (protocol.py)
    model/             the chosen lr's best seed (by validation) as a HuggingFace directory with its tokenizer
                       and label names: transformers.pipeline(<the task's pipeline>, model=DIR/model) loads it
                       with no clozeforge code
    predictions.jsonl  that model's predictions on the test split (with --test)
    downstream.png, downstream.md   with --checkpoints: score against pretraining step (mean ± SE)
Scores are in points (x 100): on the test split when there is one, else on validation (which also picked the
lr, so it flatters a little; results.json says which).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import time

from downstream.finetune import data as data_mod
from downstream.finetune import output, protocol, recipe, tasks
from downstream.finetune import place as placement
from downstream.finetune.config import FinetuneConfig
from downstream.finetune.job import (
    _EXPORTED,
    Arm,
    ArmResult,
    Job,
    export_dir,
    model_sources,
    trained_length,
)
from downstream.finetune.job import progress as job_progress
from downstream.finetune.suites import SuiteError
from schemas import ContractError
from schemas.config import add_flags, field_docs, from_flags


def _warn(message: str) -> None:
    print(f"clozeforge finetune: warning: {message}", file=sys.stderr, flush=True)


def sequence_length(config: FinetuneConfig, model_dirs: list[str]) -> tuple[int, str]:
    """(--max-seq-len, where it came from): by default the shortest trained length among the arms' models, so
    both arms see the same inputs; longer than that only on request (one warning), never past the positions."""
    lengths = [trained_length(d) for d in dict.fromkeys(model_dirs)]
    trained, positions = min(t for t, _ in lengths), min(p for _, p in lengths)
    if config.max_seq_len is None:
        return trained, "the model's trained length (model_max_length, else its positions)"
    if config.max_seq_len > trained:
        cut = min(config.max_seq_len, positions)
        _warn(f"--max-seq-len {config.max_seq_len} is longer than the model trained on ({trained}); positions past it "
              f"were never trained" + (f"; cut to the model's {positions} positions" if cut < config.max_seq_len else ""))
        return cut, "--max-seq-len"
    return config.max_seq_len, "--max-seq-len"


def _baseline_arm(config: FinetuneConfig, first_dir: str, tokenizer, hidden: int, exports: str) -> Arm | None:
    import transformers

    if config.baseline == "none":
        return None
    if config.baseline == "scratch":
        lrs, grid = ((config.baseline_lr, "--baseline-lr") if config.baseline_lr else
                     (protocol.baseline_lrs(hidden), "default scratch grid (protocol.baseline_lrs)"))
        return Arm("scratch", first_dir, False, lrs, grid, config.baseline_epochs or 2 * config.epochs,
                   tokenizer=tokenizer, saved=False)
    model_dir, _ = export_dir(config.baseline, None, exports)
    width = transformers.AutoConfig.from_pretrained(model_dir).hidden_size
    lrs, grid = ((config.baseline_lr, "--baseline-lr") if config.baseline_lr else
                 (recipe.default_lrs(width), "default (BERT's grid x 768/hidden)"))
    name = os.path.basename(os.path.normpath(config.baseline)) or "baseline"
    return Arm(name, model_dir, True, lrs, grid, config.baseline_epochs or config.epochs,
               tokenizer=transformers.AutoTokenizer.from_pretrained(model_dir), saved=False)


def run(config: FinetuneConfig) -> int:
    place = placement.join(config.device, config.precision, config.data_parallel)
    try:
        if config.suite:  # each of the suite's tasks comes back here as one --task job (suites/run.py)
            from downstream.finetune.suites import run as suite_run

            if place.world_size > 1:
                raise ContractError(placement.SUITE_IN_ONE_PROCESS)
            return suite_run.run_suite(config, lambda task_config: _run(task_config, place))
        return _run(config, place)
    finally:
        placement.leave()


def _run(config: FinetuneConfig, place: placement.Place) -> int:
    import transformers

    started = time.time()
    _EXPORTED.clear()  # exports live in this run's temporary directory
    sources = model_sources(config.model, config.checkpoints)
    if config.baseline not in ("none", "scratch"):
        model_sources(config.baseline, None)  # an export or a RUN, or one line saying neither
    writes = place.rank == 0  # the other ranks compute runs and hand them to rank 0
    with tempfile.TemporaryDirectory(prefix="clozeforge-finetune-exports.") as exports, \
            (output.staged_output(config.output, config.overwrite) if writes else contextlib.nullcontext()) as out:
        task = tasks.make(config.task, config)
        read = lambda url: data_mod.read_split(url, task, skip_bad_rows=config.skip_bad_rows, quoting=config.quoting)  # noqa: E731
        splits = {"train": read(config.train), "validation": read(config.validation)}
        if config.test:
            splits["test"] = read(config.test)
        task.prepare(splits["train"], [s for name, s in splits.items() if name != "train"])
        first_dir, _ = export_dir(config.model, sources[0][1], exports)
        tokenizer = transformers.AutoTokenizer.from_pretrained(first_dir)
        hidden = transformers.AutoConfig.from_pretrained(first_dir).hidden_size
        baseline_arm = _baseline_arm(config, first_dir, tokenizer, hidden, exports)
        max_len, length_from = sequence_length(config, [first_dir] + ([baseline_arm.model_dir] if baseline_arm else []))
        job = Job(config, task, splits, max_len)
        for name, split in splits.items():
            dropped = f", dropped {dict(split.dropped)}" if split.dropped else ""
            if writes:
                print(f"{name}: {split.url}  {split.read} read, {len(split.examples)} examples{dropped}", flush=True)
        lrs, grid = (config.lr, "--lr") if config.lr else (recipe.default_lrs(hidden), "default (BERT's grid x 768/hidden)")
        arms = []
        for step, tag in sources:
            model_dir, step = export_dir(config.model, tag, exports)
            arms.append(Arm("pretrained" if step is None else f"step {step}", model_dir, True, lrs, grid, config.epochs,
                            step=step, tokenizer=tokenizer))
        everything = arms + ([baseline_arm] if baseline_arm else [])
        progress = job_progress(job.plan(everything), [a.epochs for a in everything], place)
        done = job.run_arms(everything, progress, place)
        if not writes:
            return 0
        points, baseline = done[:len(arms)], (done[-1] if baseline_arm else None)
        if baseline:
            gold = task.gold(splits[job.scored_on].examples)
            for p in points:
                p.record["gain"] = protocol.gain(task, gold, p.scores, p.predictions, baseline.scores, baseline.predictions,
                                                 resamples=config.bootstrap, split=job.scored_on)
        chosen = max(points, key=lambda p: p.validation_mean)  # the first of equals, as run_arms keeps it
        os.makedirs(os.path.join(out, "model"))
        predictions = job.save(chosen, os.path.join(out, "model"))
        if predictions:
            with open(os.path.join(out, "predictions.jsonl"), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions)
        records = [{"step": p.arm.step, **p.record} for p in points]
        base_record = {"name": baseline.arm.name, "kind": "scratch" if not baseline.arm.pretrained else "model",
                       "model": None if not baseline.arm.pretrained else os.path.abspath(config.baseline),
                       **baseline.record} if baseline else None
        if len(points) > 1:
            output.plot_sweep(records, base_record, task.metric, os.path.join(out, "downstream.png"),
                              f"{task.name} on {os.path.basename(config.train)}: {config.model}")
            with open(os.path.join(out, "downstream.md"), "w", encoding="utf-8") as f:
                f.write(output.sweep_table(records, base_record, task.metric))
        results = _results(config, job, records, base_record, chosen, (max_len, length_from), time.time() - started)
        results["devices"] = {"device": place.device.type, "precision": place.precision, "processes": place.world_size,
                              "data_parallel": place.data_parallel}
        with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    _summary(config, records, base_record, task.metric, job.scored_on)
    return 0


def _results(config, job: Job, points: list[dict], baseline: dict | None, chosen: ArmResult, length, seconds) -> dict:
    task, b = job.task, chosen.best
    recipe_fields = {k: v for k, v in dataclasses.asdict(config).items()
                     if k not in ("model", "train", "validation", "test", "output", "overwrite", "checkpoints")}
    return {
        "written_by": output.OWNER, "format_version": 2, "task": task.name, "model": os.path.abspath(config.model),
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
    }


def _summary(config, points, baseline, metric, scored_on) -> None:
    for p in points:
        name = "pretrained" if p["step"] is None else f"step {p['step']}"
        print(f"{name:<12} {scored_on} {metric} {p['mean']:.2f} ± {p['se']:.2f}  (lr {p['lr']:g}, "
              f"{config.seeds} seeds){_gain_text(p.get('gain'), scored_on)}")
    if baseline:
        print(f"{baseline['name']:<12} {scored_on} {metric} {baseline['mean']:.2f} ± {baseline['se']:.2f}  "
              f"(lr {baseline['lr']:g} of its grid {'/'.join(f'{x:g}' for x in baseline['grid']['lrs'])}, "
              f"{baseline['grid']['epochs']} epoch{'s' * (baseline['grid']['epochs'] != 1)}, {config.seeds} seeds)")
    print(f"wrote {config.output}/results.json, {config.output}/model")
    within = [p for p in points if p.get("gain") and p["gain"]["within_se"]]
    if within:
        g = within[-1]["gain"]
        _warn(f"the gain over {baseline['name']} ({g['mean']:+.2f} ± {g['se']:.2f}) is within its standard error"
              f"{f' at {len(within)} of {len(points)} checkpoints' if len(points) > 1 else ''}: no measurable "
              f"difference at {config.seeds} seeds")


def _gain_text(gain: dict | None, scored_on: str) -> str:
    if not gain:
        return ""
    interval = (f", 95% bootstrap over {gain['bootstrap_examples']} {scored_on} examples "
                f"[{gain['bootstrap'][0]:+.2f}, {gain['bootstrap'][1]:+.2f}]") if "bootstrap" in gain else ""
    return f"   gain {gain['mean']:+.2f} ± {gain['se']:.2f} (paired SE{interval})"


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
            placement.check(config.device, config.precision, config.nproc_per_node, suite=bool(config.suite))
        except ValueError as e:
            return _fail(str(e))
        return placement.launch(config.nproc_per_node, argv)
    # "some weights were newly initialised" is the point of fine-tuning, and a bar per model load says nothing the
    # epoch lines do not; both are put back after, for a caller that runs this in its own process
    verbosity, bars = transformers.logging.get_verbosity(), transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        return run(config)
    except (data_mod.DataError, output.OutputError, ContractError, FileNotFoundError, SuiteError) as e:
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
