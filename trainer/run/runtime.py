"""The process's place in the job: rank, world size, device, precision, and the collective helpers.

In:  the environment a launcher sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from `deepspeed` or
     `torchrun`), or nothing, for a single process.
Out: a Runtime after torch.distributed is up (gloo on CPU, nccl on GPU, through deepspeed.init_distributed).

On CPU, ranks on one host split the cores this process may use between them (torch would otherwise start one
thread per core in every rank and oversubscribe; the OpenMP wait policy is set before torch loads, by
process/cpu_sharing.py), malloc keeps freed blocks for reuse (cpu_sharing.keep_freed_memory), and DeepSpeed's
shared-memory comm op is turned off: it is JIT-compiled on first use (~2 min), and gloo moves our gradients fast
enough on one box.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import os

import torch
import torch.distributed as dist

from process.cpu_sharing import intra_op_threads, keep_freed_memory
from process.exits import exit_past_teardown
from process.ports import free_port
from process.precision import Precision, resolve_precision


@dataclasses.dataclass
class Runtime:
    rank: int
    world_size: int
    device: torch.device
    precision: str
    device_name: str
    autocast: bool = False
    """bf16 as torch autocast over fp32 weights (process/precision.py), not DeepSpeed's bf16 weights."""

    @property
    def resolved_precision(self) -> Precision:
        return Precision(self.precision, self.autocast, "")

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def log(self, message: str) -> None:
        if self.rank == 0:
            print(message, flush=True)

    def all_reduce_sum(self, values: dict[str, float]) -> dict[str, float]:
        if self.world_size == 1 or not values:
            return dict(values)
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return dict(zip(keys, t.tolist()))

    def all_reduce_mean(self, values: dict[str, float]) -> dict[str, float]:
        return {k: v / self.world_size for k, v in self.all_reduce_sum(values).items()}


def start_runtime(precision: str) -> Runtime:
    """Join the job (or start a one-process one) and resolve `--precision` for this device, printing the choice."""
    from trainer.config import TrainError

    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        name = torch.cuda.get_device_name(local)
        bf16 = torch.cuda.is_bf16_supported()
    else:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        torch.set_num_threads(intra_op_threads(local_world))
        keep_freed_memory()
        device, name, bf16 = torch.device("cpu"), "cpu", False
    try:
        chosen = resolve_precision(precision, on_gpu=on_gpu, gpu_bf16=bf16)
    except ValueError as e:
        raise TrainError(str(e)) from None
    import deepspeed
    import deepspeed.ops
    importlib.import_module("torch.distributed.nn")  # before the group exists: see shutdown_runtime

    if not on_gpu:
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo", verbose=False)
    exit_past_teardown()
    rt = Runtime(rank, world, device, chosen.name, name, autocast=chosen.autocast)
    rt.log(chosen.describe())
    return rt


def shutdown_runtime() -> None:
    """End the process groups while the interpreter is whole, and the process past its teardown (process/exits.py's
    `exit_past_teardown`, which says why).

    A barrier first, so no rank tears down while another still talks. DeepSpeed's destroy_process_group also drops
    its own table of the groups; torch.distributed.nn, imported before the group existed (start_runtime), holds
    none in its functions' defaults; the engine let go of the model (trainer/loop.py). With nothing else holding
    them, the groups' threads end here at ZeRO 0-2; ZeRO 3 keeps them to the end."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            import deepspeed.comm

            deepspeed.comm.destroy_process_group()
            gc.collect()


def mean_losses(losses: list[dict[str, torch.Tensor]], grad_accum: int) -> dict[str, float]:
    """A step's losses averaged over its micro batches, read from the device in one transfer; the same sums in
    the same order as a loop that read each micro batch's losses as it went (each dict's keys in the same order)."""
    keys = list(losses[0])
    values = torch.stack([m[key].float() for m in losses for key in keys]).tolist()  # (micro x keys,)
    stats: dict[str, float] = {}
    for i, value in enumerate(values):
        key = keys[i % len(keys)]
        stats[key] = stats.get(key, 0.0) + value / grad_accum
    return stats
