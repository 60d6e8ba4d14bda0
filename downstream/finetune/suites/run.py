"""`clozeforge finetune MODEL --suite NAME --data DIR --output OUT`: every task of a benchmark, then its table.

In:  a FinetuneConfig with --suite and --data (the recipe flags apply to every task), the process's Place and MODEL's
     and MODEL2's export directories; each task goes through job.run_task as one `--task` job on its rows written
     as JSON lines.
Out, in OUT (staged and swapped in whole, as a single job's output is):
    <task>/            that task's job: results.json, model/, predictions.jsonl
    <suite>.md/.json/.png   each task's score ± SE over its seeds and the suite's average, per arm (suites/table.py)
    results.json       the suite, its data files with sha256 and drops, each task's settings, where its scores
                       came from, and whether the model's pretraining data was decontaminated against them

Each task runs with its benchmark's settings: its kind, selection metric (--metric), regression, and seeds
(MosaicBERT's per GLUE task, in place of --seeds); tasks that start from another task's model (RTE, MRPC, STS-B
from MNLI's, unless --no-from-mnli) run after it, from OUT/<that task>/model, their head initialised anew. With a
--baseline they start from the model itself, as the baseline does: only the model's arm has an MNLI model, and
the gain would count MNLI's transfer as pretraining's. A task
scored on two splits without a test split (MNLI: matched selects and is reported, mismatched is reported too)
hands the second to the job as its test split; with --suite-holdout MNLI's mismatched dev set is not scored (a
job scores one test split) and results.json says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from downstream.finetune.job import run_task
from downstream.finetune.suites import SUITES, SuiteError, SuiteTask, load
from downstream.finetune.suites.table import TaskScores, task_scores, write_table
from schemas import run_dir


def _job_splits(task: SuiteTask, files: dict[str, str]) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """({job split: file}, {suite split: job split} for the scored splits, suite splits left unscored)."""
    job = {"train": files["train"], "validation": files["validation"]}
    where = {"validation": "validation"}
    extras = [s for s in task.splits if s not in ("train", "validation", "test")]
    if "test" in task.splits:
        job["test"], where["test"] = files["test"], "test"
    elif extras:
        job["test"], where[extras[0]] = files[extras[0]], "test"
        extras = extras[1:]
    return job, where, extras


def _prep_record(model: str) -> dict | None:
    """The decontamination record of the prep run behind MODEL when it is a training RUN (its train_config.json
    names the pairs directory, whose manifest keeps it); None for an export, which does not say where its data is."""
    try:
        with open(os.path.join(model, run_dir.TRAIN_CONFIG), encoding="utf-8") as f:
            pairs = json.load(f)["data"]
        with open(os.path.join(pairs, "manifest.json"), encoding="utf-8") as f:
            return json.load(f).get("config", {}).get("decontamination", {"ngram": None, "files": []})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def run_suite(config, place, dirs) -> int:
    from downstream.finetune import output

    options, notes = config.suite_options, []
    if options.from_mnli and config.baseline != "none":
        # the baseline arm has no MNLI model of its own to start from: started from MNLI's, the model's arm would
        # count MNLI's transfer as its gain, so both arms start where they are
        options = dataclasses.replace(options, from_mnli=False)
        notes.append("RTE, MRPC and STS-B start from the model itself, not MNLI's: the baseline has no MNLI model "
                     "of its own, and the gain would count MNLI's transfer")
        print(f"clozeforge finetune: note: {notes[-1]}", flush=True)
    prep = _prep_record(config.model)
    tasks = load(config.suite, config.data, options)
    arms: dict[str, list[TaskScores]] = {}
    record: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="clozeforge-suite-rows.") as rows:
        # every task's rows written as its job's splits, in the order the tasks run, and whether MODEL's prep was
        # decontaminated against the scored ones, before --output is touched
        jobs = [(task, *_job_splits(task, task.write_rows(os.path.join(rows, task.name))))
                for round_ in rounds(tasks) for task in round_]
        clean = {task.name: decontamination(prep, {s: task.files[s] for s in where}) for task, _, where, _ in jobs}
        with output.staged_output(config.output, config.overwrite) as out:
            for task, job_files, where, unscored in jobs:
                model = os.path.join(out, task.start_from, "model") if task.start_from else config.model
                # a task that starts from another's model reads that model's export; the others MODEL's
                task_dirs = dataclasses.replace(dirs, model=((None, model),)) if task.start_from else dirs
                print(f"== {config.suite} {task.name}: {task.kind}{' (regression)' if task.regression else ''}, "
                      f"selected by {task.selection}, {task.seeds} seeds, from {task.start_from or 'the model'}",
                      flush=True)
                sub = dataclasses.replace(
                    config, suite=None, data=None, model=model, task=task.kind, train=job_files["train"],
                    validation=job_files["validation"], test=job_files.get("test"), output=os.path.join(out, task.name),
                    overwrite=False, seeds=task.seeds, metric=task.selection, regression=task.regression)
                run_task(sub, place, task_dirs)
                with open(os.path.join(out, task.name, "results.json"), encoding="utf-8") as f:
                    results = json.load(f)
                scored = dataclasses.replace(task, splits={s: v for s, v in task.splits.items() if s not in unscored})
                for arm, body in _arms(results):
                    runs = [{s: r[job] for s, job in where.items() if job in r} for r in body["runs"]]
                    arms.setdefault(arm, []).append(task_scores(scored, runs))
                record[task.name] = {
                    "kind": task.kind, "regression": task.regression, "metrics": list(task.metrics),
                    "selection": task.selection, "seeds": task.seeds, "start_from": task.start_from,
                    "tag_scheme": task.tag_scheme, "files": task.files, "dropped": task.dropped,
                    "scored": {s: job for s, job in where.items()}, "not_scored": unscored,
                    "decontamination": clean[task.name],
                }
            paths = write_table(out, config.suite, arms, expected=SUITES[config.suite].task_count)
            with open(paths["json"], encoding="utf-8") as f:
                table = json.load(f)
            with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
                json.dump({"written_by": output.OWNER, "format_version": 2, "suite": config.suite,
                           "model": os.path.abspath(config.model), "data": config.data,
                           "options": dataclasses.asdict(options), "notes": notes, "tasks": record,
                           "table": table["arms"]}, f, indent=2)
                f.write("\n")
    with open(os.path.join(config.output, f"{config.suite}.md"), encoding="utf-8") as f:
        print(f.read(), end="")
    print(f"wrote {config.output}/{config.suite}.md, .json, .png and each task's directory")
    return 0


def _arms(results: dict) -> list[tuple[str, dict]]:
    """(arm name, its results.json record): the model, and the baseline when there is one."""
    out = [("model", results["pretrained"])]
    if results.get("baseline"):
        out.append((results["baseline"]["name"], results["baseline"]))
    return out


def rounds(tasks: list[SuiteTask]) -> list[list[SuiteTask]]:
    """The tasks in the order they can run, as MosaicBERT's GLUE runner does: first every task that starts from the
    pretrained model, then those that start from another task's fine-tuned model (RTE, MRPC, STS-B from MNLI's)."""
    names = {t.name for t in tasks}
    missing = [f"{t.name} (from {t.start_from})" for t in tasks if t.start_from and t.start_from not in names]
    if missing:
        raise SuiteError(f"tasks start from tasks that are not loaded: {', '.join(missing)}")
    first = [t for t in tasks if t.start_from is None]
    second = [t for t in tasks if t.start_from is not None]
    return [first, second] if second else [first]


def decontamination(record: Mapping[str, Any] | None, files: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """Was the model's pretraining corpus decontaminated against the files the task scores on? `record` is the
    `decontamination` record of the prep run behind the model ({"ngram", "files": [{"url", "sha256"}]}, from its
    pairs/manifest.json; None when that run is unknown), `files` the task's scored files ({split: {"url", "sha256"}}).
    {"decontaminated": true | false | null, "ngram": n, "files": {split: true | false}}: true when every scored file
    was among prep's --decontaminate files, compared by content (sha256), so that a copy of the benchmark in another
    folder or bucket still counts."""
    if record is None:
        return {"decontaminated": None, "files": {split: None for split in files},
                "note": "the prep run of this model's data is unknown"}
    known = {f["sha256"] for f in record.get("files", [])}
    per_split = {split: f["sha256"] in known for split, f in files.items()}
    return {"decontaminated": bool(per_split) and all(per_split.values()), "ngram": record.get("ngram"),
            "files": per_split}
