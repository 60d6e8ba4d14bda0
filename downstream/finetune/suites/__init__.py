"""Benchmark suites in their official files: one small class per suite, registered in SUITES.

    base.py       SuiteTask (a task's rows and settings), the shared reading (UTF-8, tab-split TSV without quoting)
    glue.py       GLUE's task folders (eight tasks, WNLI left out), MosaicBERT's seeds, RTE/MRPC/STS-B from MNLI
    squad.py      SQuAD v1.1 and v2.0 JSON (v2.0 keeps its unanswerable questions)
    conll2003.py  CoNLL-2003 column files, IOB1 as distributed or BIO/BIOES
    table.py      one table per suite: each task's score ± SE and the suite's average (markdown, JSON, PNG)
    run.py        `clozeforge finetune --suite NAME --data DIR`: each task as one fine-tuning job, in rounds (a task
                  that starts from another's model after it), whether the model's prep was decontaminated against
                  the task's files, then the table

`load(name, data_url)` gives the suite's tasks for the fine-tuning command (`clozeforge finetune --suite NAME
--data DIR`) to run, each on its own splits with its own metrics, selection metric and seeds.
"""

from __future__ import annotations

from downstream.finetune.suites.base import Suite, SuiteError, SuiteOptions, SuiteTask
from downstream.finetune.suites.conll2003 import Conll2003
from downstream.finetune.suites.glue import Glue
from downstream.finetune.suites.squad import Squad, SquadV2

SUITES: dict[str, Suite] = {s.name: s for s in (Glue(), Squad(), SquadV2(), Conll2003())}
"""Every suite by its --suite name."""


def load(name: str, data_url: str, options: SuiteOptions | None = None) -> list[SuiteTask]:
    """The tasks of suite `name` read from `data_url` (a directory, local or any fsspec URL), set up by `options`
    (MNLI as the start of RTE, MRPC and STS-B; a validation split held out of train)."""
    if name not in SUITES:
        raise SuiteError(f"--suite must be one of {', '.join(SUITES)}, got {name!r}")
    return SUITES[name].load(data_url, options or SuiteOptions())


__all__ = ["SUITES", "Suite", "SuiteError", "SuiteOptions", "SuiteTask", "load"]
