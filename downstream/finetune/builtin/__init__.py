"""Built-in downstream tasks, made from text already on the machine; each writes train/validation/test JSONL for
`clozeforge finetune`. The demo pretrains on the same machine's documentation (demo/corpus.py: docstrings, man pages,
GNU manuals) with every task's validation and test text left out (`prep --decontaminate`).

    man-sections     classify  which section (1 2 3 5 7 8) a man-page paragraph comes from    /usr/share/man
    info-pairs       pair      does paragraph B follow A in the same GNU manual, or not         /usr/share/info
    licences         classify  GPL, LGPL or BSD: the family of a licence paragraph             /usr/share/doc/*/copyright
    raise-messages   classify  ValueError, TypeError or RuntimeError for an error message      stdlib source code
    stdlib-comments  classify  which stdlib package a source comment comes from                stdlib source code

A task is one row of TASKS (common.BuiltinTask: name, kind, where its text lies, split sizes, where its
translations lie) and one module that reads its text. `clozeforge finetune MODEL --builtin-task NAME` writes a task for the
job (run.py, which alone here imports torch); with `--test-language CODE` a task with translations is a zero-shot
transfer: English train/validation, a test split in CODE (transfer.py; man-sections: /usr/share/man/CODE). The demo scores DEMO; HELD_OUT is kept out of it, to check that what the demo's recipe earns holds
on tasks it was not chosen on (experiments/recipe_trial.py scores both). `python -m downstream.finetune.builtin NAME DIR` writes
one. The rows are the same for the same seed on the same machine image (sorted reads, seeded choices). Standard
library only: the demo's own process never imports torch.
"""

from __future__ import annotations

from downstream.finetune.builtin import (
    info_pairs,
    licences,
    man_sections,
    raise_messages,
    stdlib_comments,
)
from downstream.finetune.builtin.common import BuiltinTask, Sizes

TASKS: dict[str, BuiltinTask] = {t.name: t for t in (
    BuiltinTask(name="man-sections", source="English man pages, /usr/share/man", root=man_sections.ROOT,
                sizes=Sizes(train=32, validation=24, test=64, per_group=2), min_words=12, grouped=man_sections.grouped,
                translations="{root}/{language}"),
    BuiltinTask(name="info-pairs", kind="pair", source="GNU info manuals, /usr/share/info", root="/usr/share/info",
                sizes=Sizes(train=96, validation=32, test=96, per_group=2), min_words=10, writer=info_pairs.write),
    BuiltinTask(name="licences", source="licence texts of Debian copyright files, /usr/share/doc/*/copyright",
                root="/usr/share/doc", sizes=Sizes(train=32, validation=24, test=48, per_group=4), min_words=12,
                grouped=licences.grouped),
    BuiltinTask(name="raise-messages", source="error messages in the standard library's source code",
                sizes=Sizes(train=32, validation=24, test=48, per_group=8), min_words=3, grouped=raise_messages.grouped),
    BuiltinTask(name="stdlib-comments", source="comments in the standard library's source code", min_words=6,
                writer=stdlib_comments.write),
)}
DEMO = ("man-sections", "info-pairs", "licences")
HELD_OUT = ("raise-messages", "stdlib-comments")
