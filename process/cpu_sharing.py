"""How clozeforge's processes use CPU cores that something else may be using too: threading defaults set before
torch loads its OpenMP runtime, the threads a rank takes, and the allocator setting of a training process.

In:  the environment of the process. Out: `apply()` sets the variables of DEFAULTS that the user has not set,
     in os.environ, so every child inherits them (the ranks `clozeforge train --nproc-per-node` and DeepSpeed's
     or torchrun's launchers start, DataLoader workers, the demo's stages, the test suite's runs);
     `intra_op_threads(local_ranks)` is the torch thread count of one rank; `keep_freed_memory()` tells glibc's
     malloc to keep large freed blocks for reuse (a rank on CPU calls it as it starts).

Why: torch's CPU kernels run on OpenMP (GNU libgomp in the pip wheels). When a parallel region ends, libgomp's
threads busy-wait for the next one (GOMP_SPINCOUNT, 300,000 polls by default) before they sleep. On a quiet
machine that saves a wake-up; on a shared one the spinning threads hold the cores that the other job, or
this job's own descheduled thread that everyone waits for, needs: two runs of the demo's training side by side
each got 0.25x of one alone, and one beside a single-threaded busy loop 0.29x (issue 28; `python bench/run.py
train --contended` measures it, with and without these defaults, in bench/README.md). OMP_WAIT_POLICY=PASSIVE
lets a waiting thread sleep at once (libgomp then spins 0 times; Intel's OpenMP reads the same variable).

NOTE: alone on a quiet machine the policy costs a small model ~10-20% (a step is hundreds of short parallel regions,
each paying a wake-up). The alternatives measured do not win both ways: a bounded spin (GOMP_SPINCOUNT 3,000) bought
5-11% quiet and cost 12-26% beside a busy loop, one torch thread was slower in both cases (`python bench/run.py
finetune_vs_trainer --shapes ... --contended`, bench/README.md "Issue 62"). Fine-tuning is ahead of transformers'
Trainer quiet by computing less (a batch in pieces of similar length, dropout's masks from lanes: loop.py), not
by spinning.

NOTE: libgomp reads its environment once, when it is loaded, which `import torch` does: set later, these
variables reach only child processes. So this package applies them when it is imported (process/__init__.py),
and every entry point imports it before torch: clozeforge.py, trainer and downstream (their __init__, so
trainer.pretrain and the ranks of `deepspeed`/`torchrun`, and fine-tuning's), bench/run.py, experiments/run.py,
tests/conftest.py. Standard library only, so `clozeforge prep` can import it without torch.
"""

from __future__ import annotations

import ctypes
import os
import sys
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


MALLOC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")
"""glibc's own allocator settings: where the user set any of them, `keep_freed_memory` leaves malloc alone."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_KEPT_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Let glibc's malloc serve every block under 1 GiB from its heap and keep up to 1 GiB freed there; True when
    set.

    Why: glibc maps each block over its threshold (128 KiB to 32 MiB, adjusted as it goes) fresh from the kernel
    and unmaps it when freed, so a CPU training step whose activations and logits are such blocks pays a page
    fault per 4 KiB of them, every step: 6,000 faults a step for the tiny model (seq 128, batch 32), 130,000
    for transformers' BertForPreTraining with its dense MLM logits. Kept in the heap, the same memory is reused
    step after step: the tiny model's step 1.14x faster, measured in one process (bench/README.md). The cost is that freed memory goes
    back to the system only past the 1 GiB kept, and a process's resident size stays near its peak, which a
    training process reaches every step anyway. Linux with glibc only; elsewhere, or when the user set glibc's
    variables, nothing changes."""
    if not sys.platform.startswith("linux") or any(name in os.environ for name in MALLOC_VARIABLES):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc's; musl has none
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _KEPT_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEPT_BYTES))
