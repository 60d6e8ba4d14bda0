"""The kinds of fine-tuning task, one class each, and the one table that registers them.

    classify  (sequence.py)  one text → a class, or a regression target (float labels, or --regression)
    pair      (sequence.py)  two texts → a class or a regression target
    tag       (tag.py)       words → one tag each (entities)
    span      (span.py)      question + context → an answer span, or none (SQuAD v1.1 / v2)

`make(name, config)` builds a job's task; `Columns`, the column flags of `clozeforge finetune`, is the union of
the kinds' column configs, so a new kind (its class, its columns) is one new module and one line in `TASK_KINDS`.
The interface every kind implements is `base.Task`.
"""

from __future__ import annotations

import dataclasses

from downstream.finetune.tasks.base import Evaluation, Features, Task
from downstream.finetune.tasks.sequence import Classify, Pair, SequenceColumns
from downstream.finetune.tasks.span import Span, SpanColumns
from downstream.finetune.tasks.tag import Tag, TagColumns

TASK_KINDS: dict[str, type[Task]] = {t.name: t for t in (Classify, Pair, Tag, Span)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Columns(SpanColumns, TagColumns, SequenceColumns):  # reversed: the flags list text first
    """The column flags of `clozeforge finetune` (nested in its FinetuneConfig)."""


def make(name: str, config) -> Task:
    """The task `name` for a FinetuneConfig (or anything with its fields: columns, metric, regression, ...)."""
    return TASK_KINDS[name].from_config(config)


def of(name: str, columns: Columns | None = None, **options) -> Task:
    """The task `name` with these columns (default names) and options (metric, regression, stride, ...)."""
    return TASK_KINDS[name](columns or Columns(), **options)


__all__ = ["TASK_KINDS", "Columns", "Evaluation", "Features", "Task", "make", "of"]
