"""AdamW as every clozeforge training builds it: pretraining, fine-tuning and the benchmarks.

In:  a model (its parameters that require a gradient), the learning rate, the weight decay, betas and eps.
Out: a torch.optim.AdamW with BERT's two groups (weight decay on every weight, none on biases and norms),
     on torch's fused kernel where this torch has one for the parameters' device.

The fused kernel does AdamW's update in one pass over each parameter where the default (foreach) makes several:
on the tiny model at 2 CPU threads a step of the optimizer takes ~2.5 ms against ~10-15 ms (`bench/README.md`).
It is what transformers' Trainer picks by default on torch >= 2.8 (`adamw_torch_fused`). The update is the same
arithmetic; only the rounding of its last bits may differ from foreach's. A resumed run keeps the implementation it
was saved with (torch's `load_state_dict` restores each group's settings, `fused` among them), so a checkpoint
from before this module resumes on foreach and its trajectory is the one it started on.
"""

from __future__ import annotations

import torch

try:  # private, but the list torch itself consults (torch 2.13 has it); a torch without it gets foreach
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
except ImportError:  # pragma: no cover
    def _get_fused_kernels_supported_devices() -> list[str]:
        return []


def parameter_groups(model: torch.nn.Module, weight_decay: float, held=None) -> list[dict]:
    """AdamW's two groups, as in BERT: weight decay on every weight but the biases and norms (any 1-D parameter: BERT's
    LayerNorm and ModernBERT's `norm`s alike). Frozen parameters (requires_grad False) are left out. `held(name)`: the
    parameters an --init-from run's head warm-up holds (trainer/start/warmup.py) go in groups of their own, marked
    `held`, after the others (empty groups left out)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    exempt = [n.endswith(".bias") or "LayerNorm" in n or p.dim() < 2 for n, p in named]
    if held is None:
        return [{"params": [p for (_, p), e in zip(named, exempt) if not e], "weight_decay": weight_decay},
                {"params": [p for (_, p), e in zip(named, exempt) if e], "weight_decay": 0.0}]
    groups = [{"params": [p for (n, p), e in zip(named, exempt) if e == ex and bool(held(n)) == h],
               "weight_decay": 0.0 if ex else weight_decay, **({"held": True} if h else {})}
              for h in (False, True) for ex in (False, True)]
    return [g for g in groups if g["params"]]


def fused_available(params: list[torch.Tensor]) -> bool:
    """True when torch has a fused AdamW kernel for every parameter's device and dtype (floating point)."""
    devices = set(_get_fused_kernels_supported_devices())
    return bool(params) and all(p.device.type in devices and p.is_floating_point() for p in params)


def adamw(model: torch.nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.999),
          eps: float = 1e-8, held=None) -> torch.optim.AdamW:
    """AdamW over `parameter_groups(model, weight_decay, held)`, fused where `fused_available`.

    NOTE: built on the parameters' device at call time. A model moved to another device later (DeepSpeed moves
    it to the GPU in `initialize`) keeps the choice made here: a fused kernel exists for CPU and CUDA alike."""
    groups = parameter_groups(model, weight_decay, held)
    fused = fused_available([p for g in groups for p in g["params"]])
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **({"fused": True} if fused else {}))
