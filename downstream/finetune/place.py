"""Where fine-tuning runs: the `Place` of a run (device, arithmetic, the ranks it shares), and the processes of a job.

In:  --device, --precision, --nproc-per-node, --data-parallel (FinetuneConfig), and the environment of a launcher
     (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT, as torchrun sets them) when one started this process.
Out: `join` → this process's Place after the process group is up (`leave` tears it down); `check` → the flags'
     user errors, before any rank starts; `launch` → N ranks of `python -m downstream.finetune ARGV` (`clozeforge
     train`'s launcher, trainer/run/launch.py: signals passed on, a failed rank ends the others). How a job's runs
     are shared out between the ranks, and gathered back, is job.py's.

One process per GPU (cuda:LOCAL_RANK, NCCL for DDP's gradients), or several on a CPU (gloo, the cores split
between them as `train` splits them). A Place puts a batch on its device and autocasts in bf16 or fp16 (weights and
optimizer state stay fp32); the default Place (CPU, fp32, one process) is the tested default.
`--precision auto` is `train`'s choice on a GPU (trainer/precision.py: bf16 where the GPU supports it); on a
CPU it is fp32, the tested default, whatever the CPU's bf16 instructions (`--precision bf16` asks for autocast).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import torch
import torch.distributed as dist

from trainer.precision import Precision, resolve_precision

DEVICES = ("auto", "cpu", "cuda")
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a run computes: its device and arithmetic, and the ranks it shares each step with (`join` builds it)."""

    device: torch.device = torch.device("cpu")
    precision: str = "fp32"
    """fp32, or bf16 / fp16 autocast over fp32 weights (fp16 with a GradScaler)."""
    rank: int = 0
    world_size: int = 1
    data_parallel: bool = False
    """Every run is computed by all `world_size` ranks together, each on a slice of each batch (DDP)."""

    @property
    def ddp(self) -> bool:
        return self.data_parallel and self.world_size > 1

    def autocast(self):
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_AUTOCAST[self.precision])

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A host batch on the device: pinned and copied asynchronously to a GPU (the copy overlaps the previous
        step's kernels); CPU tensors as they are."""
        if self.device.type != "cuda":
            return batch
        return {k: v.pin_memory().to(self.device, non_blocking=True) for k, v in batch.items()}


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


def resolve(flag: str, device: torch.device) -> Precision:
    """`--precision flag` on `device` (see the module docstring for `auto` on a CPU); a ValueError for fp16 on a CPU."""
    if flag == "auto" and device.type != "cuda":
        return Precision("fp32", False, "auto: fp32 on a CPU; --precision bf16 for autocast")
    on_gpu = device.type == "cuda"
    return resolve_precision(flag, on_gpu=on_gpu, gpu_bf16=on_gpu and torch.cuda.is_bf16_supported())


SUITE_IN_ONE_PROCESS = ("--suite runs in one process for now (a task can start from another's model in its staged "
                        "output); drop --nproc-per-node, or run the suite's tasks as --task jobs")


def check(device: str, precision: str, nproc: int, suite: bool = False) -> None:
    """The flags' user errors, raised (ValueError) in the launching process before any rank starts."""
    if suite:
        raise ValueError(SUITE_IN_ONE_PROCESS)
    resolve(precision, resolve_device(device, 0, nproc))


def join(device: str, precision: str, data_parallel: bool) -> Place:
    """This process's Place: alone (no launcher), or one rank of a launched job, with the process group up."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", rank))
    where = resolve_device(device, local, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    chosen = resolve(precision, where)
    if world > 1:
        if where.type == "cuda":
            torch.cuda.set_device(where)
        else:  # one rank per core group, not every rank on every core
            from trainer.cpu_sharing import intra_op_threads

            torch.set_num_threads(intra_op_threads(int(os.environ.get("LOCAL_WORLD_SIZE", world))))
        if not dist.is_initialized():
            dist.init_process_group("cpu:gloo,cuda:nccl" if where.type == "cuda" else "gloo", rank=rank, world_size=world)
        from trainer.run.stopping import follow_launcher

        follow_launcher()  # a launcher killed by -9 leaves no rank fine-tuning on as an orphan
    if rank == 0:
        gpu = f" ({torch.cuda.get_device_name(where)})" if where.type == "cuda" else ""
        ways = f", {world} processes, {'one run data-parallel' if data_parallel else 'runs spread'}" if world > 1 else ""
        print(f"device: {where}{gpu}{ways}; precision: {chosen.name} ({chosen.reason})", flush=True)
    return Place(device=where, precision=chosen.name, rank=rank, world_size=world, data_parallel=data_parallel and world > 1)


def leave() -> None:
    """Tear the process group down (a barrier first: no rank leaves while another still talks to it)."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def launch(nproc: int, argv: list[str]) -> int:
    """Start `nproc` ranks of this job on this machine and supervise them to the end; their exit status."""
    from trainer.run.launch import launch as start

    return start(nproc, argv, module="downstream.finetune", prog="clozeforge finetune")
