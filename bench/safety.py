"""What the fault handling costs: the per-step stop agreement and the checkpoint integrity record.

In:  nothing (no corpus: `--corpus` is ignored).
Out: stop_allreduce_us (one int32 all-reduce MAX over gloo, 2 ranks on this host, what every step adds),
     grad_allreduce_ms (an all-reduce of the tiny model's 625k fp32 gradients, which every step already
     does) and their ratio; record_s (trainer/checkpoint/integrity.py: write_record + problem on a saved checkpoint of
     that size, 3 files) against save_s (torch.save of the same tensors) and their ratio.
"""

from __future__ import annotations

import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PARAMS = 625_130  # the `tiny` model's parameter count (checkpoint log of a 1000-token vocabulary)


def _ranks(rank: int, world: int, init: str, calls: int, out) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    flag, grads = torch.zeros(1, dtype=torch.int32), torch.randn(PARAMS)
    for _ in range(10):
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        dist.all_reduce(grads)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    flag_s = (time.perf_counter() - started) / calls
    dist.barrier()
    started = time.perf_counter()
    for _ in range(calls // 10):
        dist.all_reduce(grads)
    grad_s = (time.perf_counter() - started) / (calls // 10)
    if rank == 0:
        out.put((flag_s, grad_s))
    dist.destroy_process_group()


def main(corpus: str | None, quick: bool) -> dict:
    from trainer.checkpoint import integrity

    calls = 200 if quick else 2000
    with tempfile.TemporaryDirectory() as tmp:
        queue = mp.get_context("spawn").SimpleQueue()
        mp.spawn(_ranks, args=(2, f"file://{os.path.join(tmp, 'store')}", calls, queue), nprocs=2, join=True)
        flag_s, grad_s = queue.get()
        folder = os.path.join(tmp, "step_00000001")
        os.makedirs(folder)
        state = {"w": torch.randn(PARAMS)}
        started = time.perf_counter()
        torch.save(state, os.path.join(folder, "mp_rank_00_model_states.pt"))
        for rank in range(2):  # ZeRO-2 on 2 ranks: fp32 master + 2 Adam moments, half each
            torch.save({"m": torch.randn(3 * PARAMS // 2)}, os.path.join(folder, f"zero_pp_rank_{rank}_optim_states.pt"))
        save_s = time.perf_counter() - started
        started = time.perf_counter()
        integrity.write_record(folder)
        assert integrity.problem(folder) is None
        record_s = time.perf_counter() - started
    return {"stop_allreduce_us": round(flag_s * 1e6, 1), "grad_allreduce_ms": round(grad_s * 1e3, 2),
            "stop_over_grad_ratio": round(flag_s / grad_s, 4), "save_s": round(save_s, 3), "record_s": round(record_s, 3),
            "ratio": round(record_s / save_s, 3)}
