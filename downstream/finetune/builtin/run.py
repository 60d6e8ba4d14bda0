"""`clozeforge finetune MODEL --task NAME [--test-language CODE] --output DIR` for a built-in task (TASKS in
builtin/__init__.py): its splits written from this machine's text into a temporary directory, then one job on them.

In:  a FinetuneConfig whose --task names a built-in task; with --test-language, a zero-shot transfer (transfer.py:
     English train and validation, the test split in CODE).
Out: the job's output (job.py, output.py), whose results.json also holds `builtin`: the task, the language it
     trained and picked its lr in and the one it was tested in, the classes, rows and pages per split, each
     language's pages read, kept and dropped per reason. The summary's score lines say `test [en -> CODE]`.

The rows are the task's seed-0 rows (the demo's), so two runs score the same examples; --seeds varies the runs.
Unlike the rest of builtin/, this module imports the fine-tuning job (torch): the demo's process never imports it.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

from downstream.finetune.builtin import TASKS
from downstream.finetune.builtin.transfer import write_transfer
from downstream.finetune.job import run_task


class BuiltinError(ValueError):
    """The machine lacks a built-in task's text (a language, enough pages): one line, exit 2."""


def run_builtin(config, place, dirs) -> int:
    task = TASKS[config.task]
    with tempfile.TemporaryDirectory(prefix="clozeforge-builtin-rows.") as rows:
        try:
            if config.test_language:
                written = write_transfer(task, rows, config.test_language)
            else:
                written = {"task": task.name, "train_language": task.language, "test_language": task.language,
                           "zero_shot": False, "classes": task.write(rows), "text": {task.language: task.text_root}}
        except LookupError as e:
            raise BuiltinError(str(e)) from None
        if place.rank == 0:
            print(_heading(task, written), flush=True)
        files = {split: os.path.join(rows, f"{split}.jsonl") for split in ("train", "validation", "test")}
        job = dataclasses.replace(config, task=task.kind, written=written, **files)
        return run_task(job, place, dirs)


def _heading(task, written: dict) -> str:
    classes = f"{len(written['classes'])} classes ({', '.join(written['classes'])})"
    if not written["zero_shot"]:
        return f"== {task.name}: {task.kind}, {classes}, from {task.source}"
    test, rows = written["test_language"], written["rows"]
    read = written["read"][test]
    return (f"== {task.name}, zero-shot en -> {test}: {task.kind}, {classes}; trained and selected on English "
            f"({rows['train']} train, {rows['validation']} validation rows, {written['read']['en']['left_out']} "
            f"English pages left out as {test} translates them), tested on {rows['test']} rows of "
            f"{written['pages']['test']} {test} pages ({written['text'][test]}: {read['read']} read, {read['kept']} "
            f"with prose, dropped {read['dropped']})")
