"""Labelled data for fine-tuning: read a split's rows, and hand each to the task, which makes it an example.

In:  fsspec URLs of JSON-lines (.jsonl, .json), CSV (.csv, .tsv) or Parquet (.parquet) files, and a `tasks.Task`
     (its columns, and how one row becomes one example: see tasks/).
Out: `Split` (examples, the rows dropped per reason, the file's sha256); `LabelMap` (sorted labels, so ids do not
     depend on row order), which the tasks fit on the training split.

Every problem is a `DataError` whose message is one line naming the file, the line (the row number in a
Parquet file) and the column, or, for a row that is only empty (no text, no label), a counted drop. Problems
that mean the file is not what the user thinks (a missing column, invalid UTF-8, an empty split, a validation
label the training split never showed, a label column with more distinct values than the rows can teach)
are always errors; a row that contradicts itself (an answer not where its offsets say, a tag count that differs
from its token count) is an error too, unless the user asked to count such rows as drops (`skip_bad_rows`).
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import hashlib
import io
from typing import Any

import fsspec

from schemas.jsonl import json_objects


class DataError(ValueError):
    """Labelled data that cannot be used as given; the message names file, line and column."""


@dataclasses.dataclass
class Split:
    url: str
    sha256: str
    examples: list[dict[str, Any]]
    """What the task's `read` makes of each kept row, plus its "line" (see tasks/)."""
    read: int = 0
    dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)


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


def _rows(url: str) -> tuple[list[tuple[int, dict]], str]:
    """[(line number, row dict)] and the sha256 of the file's bytes."""
    try:
        with fsspec.open(url, "rb", compression="infer") as f:
            raw = f.read()
    except FileNotFoundError:
        raise DataError(f"{url}: no such file") from None
    digest = hashlib.sha256(raw).hexdigest()
    name = url.rsplit("/", 1)[-1].lower().removesuffix(".gz").removesuffix(".zst")
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(io.BytesIO(raw))
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a file that is not Parquet
            raise DataError(f"{url}: not a Parquet file ({str(e).splitlines()[0]})") from None
        return list(enumerate(table.to_pylist(), start=1)), digest
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{url}:{number}: invalid UTF-8 at byte column {e.start + 1}") from None
    text = raw.decode("utf-8").removeprefix("\ufeff")
    if name.endswith((".csv", ".tsv")):
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if name.endswith(".tsv") else ",")
        rows = []
        for row in reader:
            if None in row:  # more fields than the header names
                raise DataError(f"{url}:{reader.line_num}: {len(row) - 1 + len(row[None])} fields, the header has {len(row) - 1}")
            rows.append((reader.line_num, row))
        return rows, digest
    try:
        return list(json_objects(text.split("\n"), url)), digest
    except ValueError as e:
        raise DataError(str(e)) from None


def read_split(url: str, task, *, skip_bad_rows: bool = False) -> Split:
    """The examples of one file for `task` (a tasks.Task, which reads each row); see the module docstring."""
    from trainer.downstream.finetune.tasks import BadRow, Drop

    rows, digest = _rows(url)
    split = Split(url=url, sha256=digest, examples=[], read=len(rows))
    if not rows:
        raise DataError(f"{url}: empty split (no rows)")
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
            split.dropped[drop.reason] += 1
        except BadRow as bad:
            if not skip_bad_rows:
                raise DataError(f"{where}: {bad.message} (--skip-bad-rows counts such rows as drops instead)") from None
            split.dropped[bad.reason] += 1
    if not split.examples:
        raise DataError(f"{url}: empty split (all {len(rows)} rows dropped: {dict(split.dropped)})")
    return split
