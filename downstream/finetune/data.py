"""Labelled data for fine-tuning: read a split's rows, and hand each to the task, which makes it an example.

In:  fsspec URLs of JSON-lines (.jsonl, .json), TSV (.tsv), CSV (.csv) or Parquet (.parquet) files, read by
     schemas/tables.py (every record kept or dropped with a reason; .tsv unquoted, .csv RFC 4180, or --quoting),
     and a `tasks.Task` (its columns, and how one row becomes one example: see tasks/).
Out: `Split` (examples, the file's sha256, and its account: lines and records read, rows dropped per reason with
     their lines, `read == examples + Σ dropped` checked); `LabelMap` (sorted labels, so ids do not depend on row
     order), which the tasks fit on the training split.

Every problem is a `DataError` whose message is one line naming the file, the line (the row number in a
Parquet file) and the column, or, for a row that is only empty (no text, no label), a counted drop. Problems
that mean the file is not what the user thinks (a missing column, invalid UTF-8, an empty split, a validation
label the training split never showed, a label column with more distinct values than the rows can teach)
are always errors; a row that contradicts itself (an answer not where its offsets say, a tag count that differs
from its token count) is an error too, unless the user asked to count such rows as drops (`skip_bad_rows`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from schemas.tables import Account, Table, TableError, TableReading, read_table


class DataError(TableError):
    """Labelled data that cannot be used as given; the message names file, line and column."""


class Drop(Exception):  # noqa: N818 - a signal, not an error
    """The row is empty for this task: counted under `reason`, never an error."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BadRow(Exception):  # noqa: N818
    """The row contradicts itself (an answer not at its offsets): an error, or a counted drop on request."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclasses.dataclass
class Split:
    url: str
    sha256: str
    examples: list[dict[str, Any]]
    """What the task's `read` makes of each kept row, plus its "line" (see tasks/)."""
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


def read_split(url: str, task, *, skip_bad_rows: bool = False, quoting: str = "auto") -> Split:
    """The examples of one file for `task` (a tasks.Task, which reads each row); see the module docstring."""
    table = _rows(url, TableReading(quoting=quoting, skip_bad_rows=skip_bad_rows))
    rows = table.rows
    split = Split(url=url, sha256=table.sha256, examples=[], account=table.account)
    if not rows:
        raise DataError(f"{url}: empty split (no rows" + (f"; all {split.read} records dropped: {dict(split.dropped)})" if split.read else ")"))
    needed = task.required()
    line, first = rows[0]
    for column, option in needed:
        if column not in first:
            raise DataError(f"{url}:{line}: no column {column!r} (columns: {', '.join(map(str, first))}; "
                            f"name yours with {option})")
    for line, row in rows:
        where = f"{url}:{line}"
        missing = [c for c, _ in needed if c not in row]
        if missing:
            raise DataError(f"{where}: no column {missing[0]!r}")
        try:
            split.examples.append({**task.read(row, where), "line": line})
        except Drop as drop:
            split.account.drop(drop.reason, line)
        except BadRow as bad:
            if not skip_bad_rows:
                raise DataError(f"{where}: {bad.message} (--skip-bad-rows counts such rows as drops instead)") from None
            split.account.drop(bad.reason, line)
    if not split.examples:
        raise DataError(f"{url}: empty split (all {split.read} rows dropped: {dict(split.dropped)})")
    split.account.check(len(split.examples), url)  # as prep's report: a row lost or counted twice fails the run
    return split


def read_splits(config, task, *, quiet: bool = False) -> dict[str, Split]:
    """The job's splits (train, validation, and test when given) read for `task`, which then fits its label map on
    train and checks the others against it; one line per split on stdout (not on the ranks that only compute)."""
    read = lambda url: read_split(url, task, skip_bad_rows=config.skip_bad_rows, quoting=config.quoting)  # noqa: E731
    splits = {"train": read(config.train), "validation": read(config.validation)}
    if config.test:
        splits["test"] = read(config.test)
    task.prepare(splits["train"], [s for name, s in splits.items() if name != "train"])
    for name, split in splits.items():
        dropped = f", dropped {dict(split.dropped)}" if split.dropped else ""
        if not quiet:
            print(f"{name}: {split.url}  {split.read} read, {len(split.examples)} examples{dropped}", flush=True)
    return splits
