"""The processes of a fine-tuning job: this one's `Place` (loop.py: device, arithmetic, ranks), built by `join_ranks`
from --device, --precision, --nproc-per-node, --data-parallel and a launcher's environment (RANK, WORLD_SIZE,
LOCAL_RANK, as torchrun sets them); the flags' errors checked before any rank starts; the ranks started and left.

In:  the flags and the environment. Out: a Place (the device from process/devices.py, the arithmetic from
     process/precision.py's `resolve_on`), with the process group up when the job has several ranks.
One process per GPU (cuda:LOCAL_RANK, NCCL for DDP's gradients), or several on a CPU (gloo, the cores split between
them as `train` splits them); `launch` starts N ranks of `python -m downstream.finetune ARGV` through process/launch.py,
and each rank follows its launcher (process/stopping.py). `--precision auto` is `train`'s choice on a GPU
(process/precision.py: bf16 where the GPU supports it) and fp32 on a CPU, whatever its bf16 instructions.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from process.devices import resolve_device
from process.exits import exit_past_teardown
from downstream.finetune.loop import Place
from process.precision import resolve_on

SUITE_IN_ONE_PROCESS = ("--suite runs in one process for now (a task can start from another's model in its staged "
                        "output); drop --nproc-per-node, or run the suite's tasks as --task jobs")


def check(device: str, precision: str, nproc: int, suite: bool = False) -> None:
    """The flags' user errors, raised (ValueError) in the launching process before any rank starts."""
    if suite:
        raise ValueError(SUITE_IN_ONE_PROCESS)
    resolve_on(precision, resolve_device(device, 0, nproc))


def join_ranks(device: str, precision: str, data_parallel: bool) -> Place:
    """This process's Place: alone (no launcher), or one rank of a launched job, with the process group up."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", rank))
    where = resolve_device(device, local, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    chosen = resolve_on(precision, where)
    if world > 1:
        if where.type == "cuda":
            torch.cuda.set_device(where)
        else:  # one rank per core group, not every rank on every core
            from process.cpu_sharing import intra_op_threads

            torch.set_num_threads(intra_op_threads(int(os.environ.get("LOCAL_WORLD_SIZE", world))))
        if not dist.is_initialized():
            dist.init_process_group("cpu:gloo,cuda:nccl" if where.type == "cuda" else "gloo", rank=rank, world_size=world)
        exit_past_teardown()  # gloo's threads must not meet the interpreter's teardown (process/exits.py)
        from process.stopping import follow_launcher

        follow_launcher()  # a launcher killed by -9 leaves no rank fine-tuning on as an orphan
    if rank == 0:
        gpu = f" ({torch.cuda.get_device_name(where)})" if where.type == "cuda" else ""
        ways = f", {world} processes, {'one run data-parallel' if data_parallel else 'runs spread'}" if world > 1 else ""
        print(f"device: {where}{gpu}{ways}; precision: {chosen.name} ({chosen.reason})", flush=True)
    return Place(device=where, precision=chosen.name, rank=rank, world_size=world, data_parallel=data_parallel and world > 1)


def leave_ranks() -> None:
    """Tear the process group down (a barrier first: no rank leaves while another still talks to it)."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def launch(nproc: int, argv: list[str]) -> int:
    """Start `nproc` ranks of this job on this machine and supervise them to the end; their exit status."""
    from process.launch import launch as start

    return start(nproc, argv, module="downstream.finetune", prog="clozeforge finetune")
