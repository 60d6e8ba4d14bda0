"""Labelled data for fine-tuning: read a split, check it, and turn it into the examples one task needs.

In:  fsspec URLs of JSON-lines (.jsonl, .json), TSV (.tsv), CSV (.csv) or Parquet (.parquet) files, read by
     schemas/tables.py (every record kept or dropped with a reason; .tsv unquoted, .csv RFC 4180, or --quoting),
     and the column names (defaults: text / text_pair / label; tokens / tags; question / context / answers,
     SQuAD's layout where `answers` is {"text": [...], "answer_start": [...]} with character offsets into the
     context).
Out: `Split` (examples, the file's sha256, and its account: lines and records read, rows dropped per reason, with
     `read == examples + Σ dropped` checked) and `LabelMap` (sorted labels of the training split, or None for
     regression: float labels).

Every problem is a `DataError` whose message is one line naming the file, the line (the row number in a
Parquet file) and the column, or, for a row that is only empty (no text, no label), a counted drop. Problems
that mean the file is not what the user thinks (a missing column, invalid UTF-8, an empty split, a validation
label the training split never showed, a label column with more distinct values than the rows can teach)
are always errors; a row whose answer is not where its offsets say or whose tag count differs from its token
count is an error too, unless the user asked to count such rows as drops (`skip_bad_rows`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from schemas.config import Config, flag
from schemas.tables import Account, Table, TableError, TableReading, read_table


class DataError(TableError):
    """Labelled data that cannot be used as given; the message names file, line and column."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Columns(Config):
    """The column flags of `clozeforge finetune` (nested in its FinetuneConfig)."""

    text_column: str = flag("text", metavar="NAME")
    """Column of the (first) text."""
    text_pair_column: str = flag("text_pair", metavar="NAME")
    """Column of the second text (--task pair)."""
    label_column: str = flag("label", metavar="NAME")
    """Column of the label: strings or integers are classes, floats a regression target."""
    tokens_column: str = flag("tokens", metavar="NAME")
    """Column of the word list (--task tag)."""
    tags_column: str = flag("tags", metavar="NAME")
    """Column of the tags, one per word (--task tag)."""
    question_column: str = flag("question", metavar="NAME")
    """Column of the question (--task span)."""
    context_column: str = flag("context", metavar="NAME")
    """Column of the context (--task span)."""
    answers_column: str = flag("answers", metavar="NAME")
    """Column of the answers, {"text": [...], "answer_start": [...]} as in SQuAD (--task span)."""


@dataclasses.dataclass
class Split:
    url: str
    sha256: str
    examples: list[dict[str, Any]]
    """Per task: {text, text_pair?, label, line} / {tokens, tags, line} / {question, context, answers, line}."""
    account: Account
    """Every record of the file: read, and dropped per reason by the reader or by the task (`dropped`)."""

    @property
    def read(self) -> int:
        return self.account.read

    @property
    def dropped(self):
        """{reason: rows}; a task's own drops are counted here too."""
        return self.account.dropped

    def report(self) -> dict[str, Any]:
        """results.json's entry: the file, its lines and records read, examples kept, drops by reason."""
        return {"url": self.url, "sha256": self.sha256, **self.account.report(len(self.examples)),
                "examples": len(self.examples)}


class LabelMap:
    """Class names <-> ids, in sorted order (ints numerically, strings lexically) so ids do not depend on row order."""

    def __init__(self, labels: list) -> None:
        self.labels = labels
        self.ids = {label: i for i, label in enumerate(labels)}

    @classmethod
    def of(cls, values) -> LabelMap:
        return cls(sorted(set(values), key=lambda v: (isinstance(v, str), v)))

    def __len__(self) -> int:
        return len(self.labels)


def _rows(url: str, reading: TableReading) -> Table:
    """Every record of the file, through the one reader of users' tables (schemas/tables.py)."""
    try:
        return read_table(url, reading)
    except TableError as e:
        raise DataError(str(e)) from None


def _json_field(value, where: str, column: str):
    """A list or dict column read from CSV arrives as text: parse it."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise DataError(f"{where}: column {column!r} is not a JSON list/object: {value[:40]!r}") from None
    return value


def read_split(url: str, task: str, columns: Columns, *, skip_bad_rows: bool = False, pair: bool = False,
               quoting: str = "auto") -> Split:
    """The examples of one file for `task` (classify, pair, tag, span); see the module docstring."""
    table = _rows(url, TableReading(quoting=quoting, skip_bad_rows=skip_bad_rows))
    rows = table.rows
    split = Split(url=url, sha256=table.sha256, examples=[], account=table.account)
    if not rows:
        raise DataError(f"{url}: empty split (no rows" + (f"; all {split.read} records dropped: {dict(split.dropped)})" if split.read else ")"))
    needed = {"classify": [columns.text_column, columns.label_column], "pair": [columns.text_column, columns.text_pair_column, columns.label_column],
              "tag": [columns.tokens_column, columns.tags_column], "span": [columns.question_column, columns.context_column, columns.answers_column]}[task]
    line, first = rows[0]
    for column in needed:
        if column not in first:
            raise DataError(f"{url}:{line}: no column {column!r} (columns: {', '.join(map(str, first))}; "
                            f"name yours with --{_flag_of(columns, column)})")

    def bad(where: str, reason: str, message: str) -> None:
        if not skip_bad_rows:
            raise DataError(f"{where}: {message} (--skip-bad-rows counts such rows as drops instead)")
        split.dropped[reason] += 1

    for line, row in rows:
        where = f"{url}:{line}"
        missing = [c for c in needed if c not in row]
        if missing:
            raise DataError(f"{where}: no column {missing[0]!r}")
        if task in ("classify", "pair"):
            text, label = row[columns.text_column], row[columns.label_column]
            if text in (None, "") or label in (None, ""):
                split.dropped["empty_text" if text in (None, "") else "empty_label"] += 1
                continue
            example = {"text": str(text), "label": label, "line": line}
            if task == "pair":
                example["text_pair"] = "" if row[columns.text_pair_column] is None else str(row[columns.text_pair_column])
            split.examples.append(example)
        elif task == "tag":
            tokens = _json_field(row[columns.tokens_column], where, columns.tokens_column)
            tags = _json_field(row[columns.tags_column], where, columns.tags_column)
            if not tokens:
                split.dropped["empty_tokens"] += 1
                continue
            if len(tokens) != len(tags):
                bad(where, "tag_count_differs", f"column {columns.tags_column!r} has {len(tags)} tags for {len(tokens)} tokens")
                continue
            split.examples.append({"tokens": [str(t) for t in tokens], "tags": [str(t) for t in tags], "line": line})
        else:
            context, question = str(row[columns.context_column] or ""), str(row[columns.question_column] or "")
            answers = _json_field(row[columns.answers_column], where, columns.answers_column) or {}
            texts, starts = list(answers.get("text") or []), list(answers.get("answer_start") or [])
            if not context or not question:
                split.dropped["empty_question_or_context"] += 1
                continue
            if not texts:
                split.dropped["no_answer"] += 1  # SQuAD 2.0's unanswerable questions: not trained here
                continue
            if len(texts) != len(starts):
                raise DataError(f"{where}: column {columns.answers_column!r} has {len(texts)} texts and {len(starts)} answer_start")
            wrong = next(((t, s) for t, s in zip(texts, starts) if context[int(s): int(s) + len(t)] != t), None)
            if wrong is not None:
                t, s = wrong
                bad(where, "answer_not_at_offset", f"column {columns.answers_column!r}: answer {t!r} is not at character {s} "
                    f"of the context (found {context[int(s): int(s) + len(t)]!r})")
                continue
            split.examples.append({"question": question, "context": context, "answers": texts,
                                   "starts": [int(s) for s in starts], "line": line})
    if not split.examples:
        raise DataError(f"{url}: empty split (all {split.read} rows dropped: {dict(split.dropped)})")
    split.account.check(len(split.examples), url)  # as prep's report: a row lost or counted twice fails the run
    return split


def _flag_of(columns: Columns, column: str) -> str:
    field = next(f.name for f in dataclasses.fields(columns) if getattr(columns, f.name) == column)
    return field.replace("_", "-")


def label_map(train: Split, label_column: str) -> LabelMap | None:
    """The training split's classes, or None when its labels are floats (regression). Refuses a label column
    with more distinct values than half its rows: fewer than two rows a class cannot teach a classifier, and
    it is usually an id or a free-text column named by mistake."""
    values = [e["label"] for e in train.examples]
    numbers = [_number(v) for v in values]
    if None not in numbers and not all(n.is_integer() for n in numbers):  # "0.75" from a CSV is a float too
        for e, n in zip(train.examples, numbers):
            e["label"] = n
        return None
    if None not in numbers:  # integer classes, also when a CSV gives them as text: ordered 2 < 10, not "10" < "2"
        values = [int(n) for n in numbers]
    for e, v in zip(train.examples, values):
        e["label"] = v
    labels = LabelMap.of(values)
    if len(labels) < 2:
        raise DataError(f"{train.url}: column {label_column!r} has a single label ({labels.labels[0]!r}); nothing to classify")
    if len(labels) > len(values) / 2:
        raise DataError(f"{train.url}: column {label_column!r} has {len(labels)} distinct labels in {len(values)} rows "
                        "(more labels than half the rows: an id or free-text column?)")
    return labels


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def check_labels(split: Split, labels: LabelMap | None, label_column: str) -> None:
    """Every label of a validation/test split is one the training split taught (or a number, for regression)."""
    for e in split.examples:
        value = e["label"]
        if labels is None:
            try:
                e["label"] = float(value)
            except (TypeError, ValueError):
                raise DataError(f"{split.url}:{e['line']}: column {label_column!r}: {value!r} is not a number "
                                "(the training labels are floats: regression)") from None
            continue
        number = _number(value)
        if isinstance(labels.labels[0], int) and number is not None and number.is_integer():
            value = e["label"] = int(number)
        if value not in labels.ids:
            raise DataError(f"{split.url}:{e['line']}: column {label_column!r}: label {value!r} never appears in the "
                            f"training split ({len(labels)} labels: {', '.join(map(str, labels.labels[:8]))}"
                            f"{' ...' if len(labels) > 8 else ''})")


def tag_map(train: Split, others: list[Split], tags_column: str) -> LabelMap:
    labels = LabelMap.of(t for e in train.examples for t in e["tags"])
    for split in others:
        for e in split.examples:
            unseen = next((t for t in e["tags"] if t not in labels.ids), None)
            if unseen is not None:
                raise DataError(f"{split.url}:{e['line']}: column {tags_column!r}: tag {unseen!r} never appears in the training split")
    return labels
