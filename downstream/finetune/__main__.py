"""`python -m downstream.finetune ARGV`: one rank of a fine-tuning job, as `clozeforge finetune --nproc-per-node N`
(ranks.launch) or `torchrun -m downstream.finetune` starts it; the same flags as `clozeforge finetune`."""

import sys

from downstream.finetune.command import finetune_main
from process.exits import exit_with

exit_with(finetune_main(sys.argv[1:]))
