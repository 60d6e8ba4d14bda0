"""python -m downstream.finetune.builtin NAME DIR [SEED]: write one built-in task, print its classes."""

import sys

from downstream.finetune.builtin import TASKS

if len(sys.argv) not in (3, 4) or sys.argv[1] not in TASKS:
    sys.exit(f"usage: python -m downstream.finetune.builtin {{{','.join(TASKS)}}} DIR [SEED]")
print(" ".join(TASKS[sys.argv[1]].write(sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else 0)))
