"""How clozeforge's processes use CPU cores that something else may be using too: threading defaults set before
torch loads its OpenMP runtime, and the threads a rank takes.

In:  the environment of the process. Out: `apply()` sets the variables of DEFAULTS that the user has not set,
     in os.environ, so every child inherits them (the ranks `clozeforge train --nproc-per-node` and DeepSpeed's
     or torchrun's launchers start, DataLoader workers, the demo's stages, the test suite's runs);
     `intra_op_threads(local_ranks)` is the torch thread count of one rank.

Why: torch's CPU kernels run on OpenMP (GNU libgomp in the pip wheels). When a parallel region ends, libgomp's
threads busy-wait for the next one (GOMP_SPINCOUNT, 300,000 polls by default) before they sleep. On a quiet
machine that saves a wake-up; on a shared one the spinning threads hold the cores that the other job, or
this job's own descheduled thread that everyone waits for, needs: two runs of the demo's training side by side
each got 0.25x of one alone, and one beside a single-threaded busy loop 0.29x (issue 28; `python bench/run.py
train --contended` measures it, with and without these defaults, in bench/README.md). OMP_WAIT_POLICY=PASSIVE
lets a waiting thread sleep at once (libgomp then spins 0 times; Intel's OpenMP reads the same variable).

NOTE: libgomp reads its environment once, when it is loaded, which `import torch` does: set later, these
variables reach only child processes. So the trainer package applies them when it is imported
(trainer/__init__.py), and every entry point imports it before torch: clozeforge.py, trainer.pretrain and
trainer.launch (and so the ranks of `deepspeed`/`torchrun`), bench/run.py, tests/conftest.py. Standard library
only, so `clozeforge prep` can import it without torch.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

DEFAULTS: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE"}
"""Threading variables clozeforge sets when the user has not: a value already in the environment always wins."""


def apply(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set the DEFAULTS missing from `environ`; return what was set (empty when the user set them all)."""
    missing = {name: value for name, value in DEFAULTS.items() if name not in environ}
    environ.update(missing)
    return missing


def usable_cores() -> int:
    """CPUs this process may run on: its affinity mask (a container's or `taskset`'s limit), not the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def intra_op_threads(local_ranks: int) -> int:
    """torch threads for one of `local_ranks` ranks on this host: the usable cores split between them, at least
    one (more threads than cores would only make them wait for each other)."""
    return max(1, usable_cores() // max(local_ranks, 1))
