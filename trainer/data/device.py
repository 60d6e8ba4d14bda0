"""Batches on their way to the device: sent one ahead of use, without the host ever waiting on the device.

In:  an iterator of host batches (the DataLoader's, pinned when the device is a GPU) and the device.
Out: `Sent` batches: the host copy's position and real-token count (read on the host, before the batch is
     sent, so the loop needs nothing back from the device), and the batch on the device.

On a GPU, batch k+1 is copied on a side stream while batch k computes on the current one; the current stream
waits for that copy (an event, not the host) before it uses the batch, and the tensors are marked as used by
the current stream so the caching allocator does not hand their memory out again too early. From pinned
memory `non_blocking` copies return at once. On a CPU the batch is the device batch: nothing to overlap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch

from trainer.data.batch_forms import real_tokens
from trainer.data.stream import loader, shutdown

__all__ = ["DeviceBatches", "Sent", "pin_memory_for", "to_device"]


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The model's inputs of a host batch on `device` (its data position stays on the host)."""
    return {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "position"}


def pin_memory_for(device: torch.device) -> bool:
    """Whether the loader should pin its batches: only a GPU's copies overlap with compute from pinned memory."""
    return device.type == "cuda"


@dataclasses.dataclass(frozen=True)
class Sent:
    host: dict[str, torch.Tensor]
    """The batch as the loader gave it (the audit digests its rows)."""
    position: tuple[int, int]
    """(epoch, micro batch) of the stream position it came from."""
    tokens: int
    """Real (non-[PAD]) tokens in it."""
    device: dict[str, torch.Tensor]
    """Its model inputs on the device, safe to use on the current stream."""


class DeviceBatches:
    """`next()` gives batch k on the device and starts sending batch k+1 (so one batch more is read from the
    loader than used: the data position the loop saves is the used batch's own, so a resume is unaffected)."""

    def __init__(self, batches: Iterator[dict[str, torch.Tensor]], device: torch.device):
        self.batches, self.device = batches, device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.ahead: tuple[dict, dict, object] | None = None

    def __iter__(self) -> DeviceBatches:
        return self

    def _send(self) -> tuple[dict, dict, object]:
        host = next(self.batches)
        if self.stream is None:
            return host, to_device(host, self.device), None
        with torch.cuda.stream(self.stream):
            moved = to_device(host, self.device)
            arrived = torch.cuda.Event()
            arrived.record(self.stream)
        return host, moved, arrived

    def __next__(self) -> Sent:
        host, moved, arrived = self.ahead if self.ahead is not None else self._send()
        self.ahead = None
        if arrived is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(arrived)
            for tensor in moved.values():
                tensor.record_stream(current)
        epoch, k = host["position"].tolist()  # a host tensor: no device synchronisation
        sent = Sent(host=host, position=(epoch, k), tokens=real_tokens(host), device=moved)
        try:
            self.ahead = self._send()
        except StopIteration:  # a finite stream's last batch: the next call raises it again
            self.ahead = None
        return sent

    @property
    def loader_iterator(self) -> Iterator[dict[str, torch.Tensor]]:
        """The DataLoader iterator underneath (to shut its workers down)."""
        return self.batches


class LoaderBatches:
    """A training stream's batches through a DataLoader, each sent to the device one step ahead (DeviceBatches), as a
    context: its workers are shut down when the block ends, however it ends (they ignore SIGTERM; left to interpreter
    exit they would hang it). `switch` moves it to another stream (phase 2), shutting the first loader down."""

    def __init__(self, stream, workers: int, device: torch.device):
        self.workers, self.device = workers, device
        self.batches = self._open(stream)

    def _open(self, stream) -> DeviceBatches:
        return DeviceBatches(iter(loader(stream, self.workers, pin_memory=pin_memory_for(self.device))), self.device)

    def switch(self, stream) -> None:
        shutdown(self.batches.loader_iterator)
        self.batches = self._open(stream)

    def __iter__(self) -> LoaderBatches:
        return self

    def __next__(self) -> Sent:
        return next(self.batches)

    def __enter__(self) -> LoaderBatches:
        return self

    def __exit__(self, *exc) -> None:
        shutdown(self.batches.loader_iterator)


def device_batches(stream, workers: int, device: torch.device) -> LoaderBatches:
    """A stream's batches through a DataLoader of `workers` processes (0: in this process), each sent to `device`
    one step ahead; use it in a `with` block."""
    return LoaderBatches(stream, workers, device)
