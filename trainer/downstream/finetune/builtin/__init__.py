"""Built-in downstream tasks, made from text already on the machine that the demo's pretraining corpus (Python
docstrings) does not hold; each writes train/validation/test JSONL for `clozeforge finetune`.

    man-sections     classify  which section (1 2 3 5 7 8) a man-page paragraph comes from    /usr/share/man
    info-pairs       pair      does paragraph B follow A in the same GNU manual, or not         /usr/share/info
    licences         classify  GPL, LGPL or BSD: the family of a licence paragraph             /usr/share/doc/*/copyright
    raise-messages   classify  ValueError, TypeError or RuntimeError for an error message      stdlib source code
    stdlib-comments  classify  which stdlib package a source comment comes from (demo_task)    stdlib source code

The demo scores DEMO; HELD_OUT is kept out of it, to check that what the demo's recipe earns holds on tasks it was
not chosen on (bench/recipe.py scores both). `python -m trainer.downstream.finetune.builtin NAME DIR` writes one.
The rows are the same for the same seed on the same machine image (sorted reads, seeded choices).
"""

from __future__ import annotations

from trainer.downstream.finetune.builtin.common import BuiltinTask
from trainer.downstream.finetune.builtin.info_pairs import InfoPairs
from trainer.downstream.finetune.builtin.licences import Licences
from trainer.downstream.finetune.builtin.man_sections import ManSections
from trainer.downstream.finetune.builtin.raise_messages import RaiseMessages
from trainer.downstream.finetune.builtin.stdlib_comments import StdlibComments

TASKS: dict[str, BuiltinTask] = {t.name: t for t in (ManSections(), InfoPairs(), Licences(), RaiseMessages(), StdlibComments())}
DEMO = ("man-sections", "info-pairs", "licences")
HELD_OUT = ("raise-messages", "stdlib-comments")
