"""DeviceBatches (trainer/data/device.py): the loader's batches handed out in order, one sent ahead, with their
position and real-token count read from the host copy; the loader pins only for a GPU."""

from __future__ import annotations

import pytest
import torch

from trainer.data import DeviceBatches, default_workers
from trainer.data.device import pin_memory_for


def _batch(k: int, real: int) -> dict[str, torch.Tensor]:
    mask = torch.zeros(2, 5, dtype=torch.long)
    mask.view(-1)[:real] = 1
    return {"input_ids": torch.full((2, 5), k), "attention_mask": mask, "position": torch.tensor([0, k])}


def test_batches_come_in_order_with_host_position_and_tokens():
    source = [_batch(k, real=k + 3) for k in range(3)]
    pulled = []

    def loader():
        for b in source:
            pulled.append(int(b["position"][1]))
            yield b

    sent = DeviceBatches(loader(), torch.device("cpu"))
    first = next(sent)
    assert first.position == (0, 0) and first.tokens == 3 and "position" not in first.device
    assert pulled == [0, 1]  # the next batch is already on its way
    assert torch.equal(first.device["input_ids"], source[0]["input_ids"])
    assert [(s.position, s.tokens) for s in sent] == [((0, 1), 4), ((0, 2), 5)]
    with pytest.raises(StopIteration):
        next(sent)


def test_pinning_and_workers_by_device():
    assert not pin_memory_for(torch.device("cpu")) and pin_memory_for(torch.device("cuda", 0))
    assert default_workers(None, on_gpu=False) == 0 and default_workers(2, on_gpu=False) == 2
    assert default_workers(3, on_gpu=True) == 3 and 1 <= default_workers(None, on_gpu=True) <= 4
