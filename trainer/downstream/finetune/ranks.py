"""Where fine-tuning runs: this process's device and precision, and several processes sharing one job.

In:  --device, --precision, --nproc-per-node, --data-parallel (FinetuneConfig), and the environment of a launcher
     (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT, as torchrun sets them) when one started this process.
Out: `join` → a recipe.Place (device, precision, rank, world size) after the process group is up;
     `launch` → N ranks of `python -m trainer.downstream.finetune.ranks ARGV` (`clozeforge train`'s launcher,
     trainer/run/launch.py: signals passed on, a failed rank ends the others);
     `spread` → every run of a job's plan computed once, each on one rank (or, with --data-parallel, each by all
     ranks together), and every rank handed every run's record in plan order;
     `fetch_state` → one run's weights, from the rank that trained it, on rank 0 (which writes the output).

One process per GPU (cuda:LOCAL_RANK, NCCL for DDP's gradients), or several on a CPU (gloo, the cores split
between them as `train` splits them). The records and weights travel as host tensors over gloo (the process
group is "cpu:gloo,cuda:nccl" on GPUs): no pickle, and nothing that depends on the accelerator.

A run's result does not depend on the rank it lands on: its model, head and dropout are seeded from its own
seed and its batch order from the seed alone (recipe.py), so a spread job writes the scores one process writes.
`--precision auto` is `train`'s choice on a GPU (trainer/run/precision.py: bf16 where the GPU supports it); on a
CPU it is fp32, the tested default, whatever the CPU's bf16 instructions (`--precision bf16` asks for autocast).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

from trainer.downstream.finetune.recipe import Place, Progress
from trainer.run.precision import PRECISIONS, Precision, resolve_precision

DEVICES = ("auto", "cpu", "cuda")
__all__ = ["DEVICES", "PRECISIONS", "fetch_state", "join", "launch", "leave", "owner", "progress", "spread"]


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

    return start(nproc, argv, module="trainer.downstream.finetune.ranks", prog="clozeforge finetune")


def owner(index: int, place: Place) -> int:
    """The rank that computes run `index` of a plan: round robin (a job's runs cost about the same), or rank 0's
    copy when every rank computes every run."""
    return 0 if place.data_parallel or place.world_size == 1 else index % place.world_size


def progress(plan: list, epochs: list[int], place: Place) -> Progress:
    """The epoch lines of this rank's share of `plan` ((arm, lr, seed) runs; `epochs` per arm): prefixed with the
    rank when the runs are spread, rank 0's only when every rank computes every run."""
    share = [spec for i, spec in enumerate(plan) if place.data_parallel or owner(i, place) == place.rank]
    if place.data_parallel and place.rank != 0:
        return Progress(1, print_fn=lambda *a, **k: None)
    prefix = f"rank {place.rank}: " if place.world_size > 1 and not place.data_parallel else ""
    return Progress(sum(epochs[spec[0]] for spec in share), print_fn=lambda line, **k: print(prefix + line, **k))


def spread(plan: list, run_one, place: Place) -> list[dict]:
    """[run_one(spec) for spec in plan], each computed on its `owner` rank (every rank with --data-parallel); every
    rank gets the whole list. A record is a JSON object (what results.json holds of a run)."""
    mine = {i: run_one(spec) for i, spec in enumerate(plan) if place.data_parallel or owner(i, place) == place.rank}
    if place.world_size == 1 or place.data_parallel:
        return [mine[i] for i in range(len(plan))]
    gathered: dict[int, dict] = {}
    for part in _all_gather_json({str(i): record for i, record in mine.items()}):
        gathered.update({int(i): record for i, record in part.items()})
    return [gathered[i] for i in range(len(plan))]


def _all_gather_json(value) -> list:
    """Every rank's JSON value, in rank order, on every rank (bytes in host tensors over gloo)."""
    data = torch.from_numpy(np.frombuffer(json.dumps(value).encode(), dtype=np.uint8).copy())
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64))
    width = int(max(s.item() for s in sizes))
    parts = [torch.zeros(width, dtype=torch.uint8) for _ in sizes]
    dist.all_gather(parts, torch.nn.functional.pad(data, (0, width - data.numel())))
    return [json.loads(bytes(p[:int(n.item())].numpy()).decode()) for p, n in zip(parts, sizes)]


def fetch_state(state: dict[str, torch.Tensor] | None, source: int, place: Place) -> dict[str, torch.Tensor] | None:
    """On rank 0: the weights `state` held by rank `source` (host tensors); on the other ranks None. Every rank
    calls it; `source` passes its state, the others None."""
    if place.world_size == 1 or source == 0:
        return state if place.rank == 0 else None
    if place.rank == source:
        meta = [[k, list(v.shape), str(v.dtype).removeprefix("torch.")] for k, v in state.items()]
        blob = torch.from_numpy(np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8).copy())
        dist.send(torch.tensor([blob.numel()], dtype=torch.int64), 0)
        dist.send(blob, 0)
        for v in state.values():
            dist.send(v.contiguous(), 0)
        return None
    if place.rank != 0:
        return None
    size = torch.zeros(1, dtype=torch.int64)
    dist.recv(size, source)
    blob = torch.zeros(int(size.item()), dtype=torch.uint8)
    dist.recv(blob, source)
    received = {}
    for key, shape, dtype in json.loads(bytes(blob.numpy()).decode()):
        received[key] = torch.empty(shape, dtype=getattr(torch, dtype))
        dist.recv(received[key], source)
    return received


if __name__ == "__main__":  # a rank started by `launch` (or by torchrun -m trainer.downstream.finetune.ranks)
    from schemas.exits import exit_with
    from trainer.downstream.finetune.command import finetune_main

    exit_with(finetune_main(sys.argv[1:]))
