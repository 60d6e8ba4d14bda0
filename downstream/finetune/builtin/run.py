"""`clozeforge finetune MODEL --builtin-task NAME [--test-language CODE] --output DIR` for a built-in task (TASKS in
builtin/__init__.py): its splits written from this machine's text into a temporary directory, then one job on them.

In:  a FinetuneConfig whose --builtin-task names a built-in task; with --test-language, a zero-shot transfer (transfer.py:
     English train and validation, the test split in CODE).
Out: the job's output (job.py, output.py), whose results.json also holds `builtin`: the task, the language it
     trained and picked its lr in and the one it was tested in, the classes, rows and pages per split, each
     language's pages read, kept and dropped per reason. The summary's score lines say `test [en -> CODE]`.

The rows are the task's seed-0 rows (the demo's), so two runs score the same examples; --seeds varies the runs.
`written` turns the config into an ordinary --task KIND --train/--validation/--test job before the job starts (command.py), as
MODEL is turned into export directories: the job itself never meets a built-in task.
"""

from __future__ import annotations

import dataclasses
import os

from downstream.finetune.builtin import TASKS
from downstream.finetune.builtin.transfer import write_transfer


class BuiltinError(ValueError):
    """The machine lacks a built-in task's text (a language, enough pages): one line, exit 2."""


def written(config, directory: str):
    """`config` of a --builtin-task as the job that fine-tunes on its splits, written into `directory` (whose life
    is the command's); the task's heading printed by the first rank."""
    task, rows = TASKS[config.builtin_task], os.path.join(directory, "builtin-rows")
    os.makedirs(rows)
    try:
        if config.test_language:
            record = write_transfer(task, rows, config.test_language)
        else:
            record = {"task": task.name, "train_language": task.language, "test_language": task.language,
                      "zero_shot": False, "classes": task.write(rows), "text": {task.language: task.text_root}}
    except LookupError as e:
        raise BuiltinError(str(e)) from None
    if os.environ.get("RANK", "0") == "0":
        print(_heading(task, record), flush=True)
    files = {split: os.path.join(rows, f"{split}.jsonl") for split in ("train", "validation", "test")}
    return dataclasses.replace(config, task=task.kind, builtin_task=None, written=record, **files)


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
