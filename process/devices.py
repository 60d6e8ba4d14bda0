"""Which device a downstream command computes on: `--device auto|cpu|cuda` for this process's local rank.

In:  the flag, the process's local rank and the processes per node. Out: a torch.device, or a ValueError in one line
     (a GPU asked for and absent, more processes than GPUs). Fine-tuning, embed, senses, similarity, retrieve and
     score read it; the trainer's ranks take theirs from the launcher (trainer/run/runtime.py).
"""

from __future__ import annotations

import torch

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(flag: str, local_rank: int = 0, nproc: int = 1) -> torch.device:
    """The device `--device flag` names for the process of this local rank; a ValueError (one line) if absent."""
    if flag not in DEVICES:
        raise ValueError(f"--device must be one of {', '.join(DEVICES)}, got {flag!r}")
    if flag == "cpu" or (flag == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA GPU is visible to torch (use --device auto or cpu)")
    if nproc > torch.cuda.device_count():
        raise ValueError(f"--nproc-per-node {nproc}: one process per GPU, and {torch.cuda.device_count()} are visible")
    return torch.device("cuda", local_rank)
