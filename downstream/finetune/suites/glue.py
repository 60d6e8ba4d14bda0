"""GLUE as its download script lays it out: one folder per task (CoLA/, SST-2/, MRPC/, QQP/, STS-B/, MNLI/, QNLI/,
RTE/), each with train.tsv and dev.tsv (MNLI: dev_matched.tsv and dev_mismatched.tsv).

In:  the glue_data directory. Out: one SuiteTask per task folder present (at least one must be); validation is the
     dev file and there is no test split, because GLUE's test labels are private: the anchors report dev (with
     --suite-holdout, validation is a share of train and the dev files are the test splits).

Columns, read by position or header name, with no CSV quoting (base.tsv_lines):
    CoLA   no header; source, label, original label, sentence             classify, MCC
    SST-2  header sentence, label                                          classify, accuracy
    MRPC   header Quality, #1 ID, #2 ID, #1 String, #2 String              pair, F1 (of label 1) and accuracy
    QQP    header id, qid1, qid2, question1, question2, is_duplicate        pair, F1 (of label 1) and accuracy
    STS-B  header ... sentence1, sentence2, score (a float 0-5)            pair regression, Pearson and Spearman
    MNLI   header ... sentence1, sentence2, ..., gold_label (last)          pair, accuracy, matched and mismatched
    QNLI   header index, question, sentence, label                        pair, accuracy
    RTE    header index, sentence1, sentence2, label                       pair, accuracy
WNLI is left out, as BERT, RoBERTa and MosaicBERT leave it out (its train and dev sets are adversarial: models
score below the majority class). A line with too few columns is a counted drop (`missing_columns`; QQP's train
file has a few); an unparsable label is an error naming file and line.

Seeds follow MosaicBERT's GLUE recipe (mosaicml/examples, examples/bert/yamls/glue/mosaic-bert-base-uncased.yaml):
5 on RTE, MRPC and STS-B, 4 on CoLA, 3 on SST-2, its one default seed on MNLI, QNLI and QQP (the large tasks),
and RTE, MRPC and STS-B start from the fine-tuned MNLI model (its glue.py runs
them in a second round from the MNLI checkpoint); --no-from-mnli starts them from the pretrained model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from downstream.finetune.suites.base import (
    Suite,
    SuiteError,
    SuiteOptions,
    SuiteTask,
    drops,
    exists,
    hold_out,
    join,
    read_text,
    tsv_lines,
)


def _int_label(value: str) -> int:
    return int(value)


def _float_label(value: str) -> float:
    return float(value)


def _str_label(value: str) -> str:
    if not value:
        raise ValueError("empty label")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class GlueTask:
    """How one GLUE task's files read and how it is scored."""

    name: str
    folder: str
    text: str | int
    """Column (header name, or position in a file without header) of the first text."""
    label: str | int
    text_pair: str | int | None = None
    header: bool = True
    parse: Callable[[str], Any] = _str_label
    metrics: tuple[str, ...] = ("accuracy",)
    selection: str = "accuracy"
    seeds: int = 1
    regression: bool = False
    positive: Any = None
    from_mnli: bool = False
    dev: tuple[tuple[str, str], ...] = (("validation", "dev.tsv"),)
    """(split, file) of the evaluation files."""


GLUE_TASKS = (
    GlueTask(name="cola", folder="CoLA", header=False, text=3, label=1, parse=_int_label, metrics=("mcc",),
             selection="mcc", seeds=4),
    GlueTask(name="sst2", folder="SST-2", text="sentence", label="label", parse=_int_label, seeds=3),
    GlueTask(name="mrpc", folder="MRPC", text="#1 String", text_pair="#2 String", label="Quality", parse=_int_label,
             metrics=("f1", "accuracy"), selection="f1", positive=1, seeds=5, from_mnli=True),
    GlueTask(name="qqp", folder="QQP", text="question1", text_pair="question2", label="is_duplicate", parse=_int_label,
             metrics=("f1", "accuracy"), selection="f1", positive=1),
    GlueTask(name="stsb", folder="STS-B", text="sentence1", text_pair="sentence2", label="score", parse=_float_label,
             metrics=("pearson", "spearman"), selection="pearson", regression=True, seeds=5, from_mnli=True),
    GlueTask(name="mnli", folder="MNLI", text="sentence1", text_pair="sentence2", label="gold_label",
             dev=(("validation", "dev_matched.tsv"), ("validation_mismatched", "dev_mismatched.tsv"))),
    GlueTask(name="qnli", folder="QNLI", text="question", text_pair="sentence", label="label"),
    GlueTask(name="rte", folder="RTE", text="sentence1", text_pair="sentence2", label="label", seeds=5, from_mnli=True),
)
"""The eight tasks, in the order of the GLUE paper's table (WNLI left out)."""


def read_task_file(task: GlueTask, url: str) -> tuple[list[dict], dict[str, int], str]:
    """(rows, drops per reason, sha256) of one of a task's files."""
    read = read_text(url)
    lines = tsv_lines(read.text)
    if task.header:
        if not lines:
            raise SuiteError(f"{url}: empty file, expected a header line")
        names = lines[0][1]
        wanted = [c for c in (task.text, task.text_pair, task.label) if c is not None]
        missing = [c for c in wanted if c not in names]
        if missing:
            raise SuiteError(f"{url}:1: no column {', '.join(map(repr, missing))} in the header "
                             f"(found {', '.join(names)}); is this GLUE's {task.folder}?")
        # MNLI's gold_label is the last column: its dev files have five annotator labels before it
        index = {c: (len(names) - 1 - names[::-1].index(c)) for c in wanted}
        lines = lines[1:]
    else:
        index = {c: c for c in (task.text, task.text_pair, task.label) if c is not None}
    width = max(index.values()) + 1
    rows, dropped = [], drops()
    for number, fields in lines:
        if len(fields) < width:
            dropped["missing_columns"] += 1
            continue
        try:
            label = task.parse(fields[index[task.label]].strip())
        except ValueError:
            value = fields[index[task.label]]
            raise SuiteError(f"{url}:{number}: label {value!r} is not a {task.name} label") from None
        row = {"text": fields[index[task.text]], "label": label, "line": number}
        if task.text_pair is not None:
            row["text_pair"] = fields[index[task.text_pair]]
        rows.append(row)
    return rows, dict(dropped), read.sha256


class Glue(Suite):
    name = "glue"
    description = "GLUE's eight scored tasks (WNLI left out), dev sets, MosaicBERT's seeds"
    task_count = len(GLUE_TASKS)

    def load(self, root: str, options: SuiteOptions) -> list[SuiteTask]:
        present = [t for t in GLUE_TASKS if exists(join(root, t.folder))]
        if not present:
            raise SuiteError(f"{root}: no GLUE task folder ({', '.join(t.folder for t in GLUE_TASKS)}); "
                             "point --data at the directory GLUE's download script writes")
        mnli = any(t.name == "mnli" for t in present)
        out = []
        for task in present:
            splits, files, dropped = {}, {}, {}
            for split, name in (("train", "train.tsv"), *task.dev):
                url = join(root, task.folder, name)
                rows, dropped[split], sha256 = read_task_file(task, url)
                if not rows:
                    raise SuiteError(f"{url}: no rows")
                splits[split], files[split] = rows, {"url": url, "sha256": sha256}
            splits, files, dropped = hold_out(splits, files, dropped, options.suite_holdout,
                                              lambda r: f"{r['text']}\t{r.get('text_pair', '')}")
            out.append(SuiteTask(
                suite=self.name, name=task.name, kind="pair" if task.text_pair is not None else "classify",
                splits=splits, files=files, dropped=dropped, metrics=task.metrics, selection=task.selection,
                seeds=task.seeds, regression=task.regression, positive=task.positive,
                start_from="mnli" if task.from_mnli and options.from_mnli and mnli else None))
        return out
