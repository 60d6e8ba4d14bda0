"""Which standard-library package a source comment comes from: the earlier demo task (demo_task.py) as a built-in
task, kept out of the demo's score and used as a held-out check.

In/Out: as trainer/downstream/finetune/demo_task.py (comment blocks of the 8 packages with the most, 32 training
rows per class).
"""

from __future__ import annotations

from trainer.downstream.finetune import demo_task
from trainer.downstream.finetune.builtin.common import BuiltinTask


class StdlibComments(BuiltinTask):
    name = "stdlib-comments"
    kind = "classify"
    source = "comments in the standard library's source code"

    def write(self, directory: str, seed: int = 0) -> list[str]:
        return demo_task.write_task(directory, seed=seed)
