"""Loading checkpoint files without running code from them.

In:  a .pt file (ours, or one DeepSpeed reads while resuming or consolidating ZeRO partitions).
Out: its tensors and plain data, through `torch.load(weights_only=True)` with an allow-list of the few
     classes DeepSpeed stores; anything else (a crafted `__reduce__`, an unknown class) is refused with a
     one-line UntrustedCheckpoint naming the file and what it asked for, before any of it is built.

A run directory is shared and downloaded, so a checkpoint is data from outside. `only_weights()` routes
every `torch.load` inside it, DeepSpeed's included (DeepSpeed 0.19 passes weights_only=False in
TorchCheckpointEngine.load, ZeRO's optimizer loaders and utils/zero_to_fp32.py), through `load`.
"""

from __future__ import annotations

import contextlib
import importlib
import pickle
import re
from collections.abc import Iterator
from typing import Any

import torch

from schemas import ContractError

ALLOWED = (
    "deepspeed.runtime.zero.config.ZeroStageEnum",  # ZeRO optimizer states: which stage wrote them
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",  # fp32/bf16: a static scale of 1
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",  # fp16 on GPU
    "deepspeed.utils.tensor_fragment.fragment_address",  # ZeRO 1/2: where a parameter sits in the flat partition
)
"""The classes, beyond tensors and plain containers, that DeepSpeed's checkpoints hold (found with
torch.serialization.get_unsafe_globals_in_checkpoint on checkpoints of ZeRO stages 0-3)."""


class UntrustedCheckpoint(ContractError):
    """A checkpoint file holds something other than tensors, plain data and the allowed classes."""


def _allowed() -> list[type]:
    classes = []
    for name in ALLOWED:
        module, _, attr = name.rpartition(".")
        with contextlib.suppress(ImportError, AttributeError):
            classes.append(getattr(importlib.import_module(module), attr))
    return classes


_torch_load = torch.load


def load(f: Any, map_location: Any = "cpu", **kwargs: Any) -> Any:
    """torch.load with weights_only=True and the allow-list; `weights_only` passed by a caller is ignored."""
    kwargs.pop("weights_only", None)
    try:
        with torch.serialization.safe_globals(_allowed()):
            return _torch_load(f, map_location=map_location, weights_only=True, **kwargs)
    except pickle.UnpicklingError as e:
        # torch's message is a paragraph; what the file asked for is the part to keep
        named = re.search(r"GLOBAL (\S+)", str(e))
        lines = [line.strip().rstrip(".") for line in str(e).splitlines() if "nsupported" in line]
        reason = f"unsupported GLOBAL {named.group(1)}" if named else (lines[0] if lines else type(e).__name__)
        name = getattr(f, "name", f)
        raise UntrustedCheckpoint(f"{name}: refused to load: it holds more than tensors and plain data ({reason}); "
                                  "nothing in it was run") from None


def refusal(path: str) -> str | None:
    """Why `load` would refuse the file at `path`, found without running anything (None: it would load). Reads
    the pickle's opcodes only (torch.serialization.get_unsafe_globals_in_checkpoint), or for a file in
    torch's legacy format, loads it with `load`."""
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - not a zip checkpoint: the safe load itself tells
        try:
            load(path)
        except UntrustedCheckpoint as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - unreadable for another reason: DeepSpeed's load will say which
            return f"{path}: unreadable ({type(e).__name__})"
        return None
    bad = sorted(set(unsafe) - set(ALLOWED))
    if bad:
        return f"{path}: refused to load: it holds more than tensors and plain data (unsupported GLOBAL {', '.join(bad)}); nothing in it was run"
    return None


@contextlib.contextmanager
def only_weights() -> Iterator[None]:
    """Every torch.load in this block (DeepSpeed's too) is `load`."""
    torch.load = load
    try:
        yield
    finally:
        torch.load = _torch_load
