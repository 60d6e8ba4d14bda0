"""Which arithmetic a run trains in: `--precision auto|fp32|bf16|fp16` resolved for the device in front of it.

In:  the --precision flag and the device: a GPU (and whether it supports bf16), or this CPU's instruction set.
Out: a Precision (the resolved name, whether it is autocast, and the reason, printed once at start) and the
     DeepSpeed JSON section that turns it on.

On a GPU, bf16 and fp16 are DeepSpeed's own modes (bf16 or fp16 weights and activations with fp32 master weights
in the optimizer; fp16 with dynamic loss scaling), except bf16 at ZeRO stage 0, which builders.deepspeed_config
makes autocast as on a CPU (DeepSpeed's stage-0 bf16 wrapper reads every gradient's overflow test on the host).
On a CPU, bf16 is torch autocast through DeepSpeed's
`torch_autocast` section: weights, gradients and optimizer state stay fp32, the Linear layers' matrix products
and attention run in bf16, LayerNorm, softmax and the losses in fp32 (autocast's own op lists). Checkpoints are
therefore the same as fp32 ones, and a run can switch between fp32 and bf16 on resume.

`auto` takes bf16 where the hardware computes it natively: a GPU that reports bf16 support, or an x86 CPU with
AVX512_BF16 or AMX_BF16 instructions (`python bench/run.py train` measures the gain, its `bf16_*` figures).
Elsewhere it takes fp32: without those instructions bf16 is emulated and slower than fp32.
"""

from __future__ import annotations

import dataclasses
from typing import Any

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclasses.dataclass(frozen=True)
class Precision:
    name: str
    """fp32, bf16 or fp16."""
    autocast: bool
    """bf16 as torch autocast over fp32 weights (CPU) rather than DeepSpeed's bf16 weights (GPU)."""
    reason: str
    """Why this precision: the flag, or what `auto` found."""

    def describe(self) -> str:
        how = " autocast (fp32 weights)" if self.autocast else ""
        return f"precision: {self.name}{how} ({self.reason})"

    def deepspeed_sections(self) -> dict[str, Any]:
        """The precision keys of the DeepSpeed JSON."""
        return {
            "bf16": {"enabled": self.name == "bf16" and not self.autocast},
            "fp16": {"enabled": self.name == "fp16", "loss_scale": 0, "initial_scale_power": 16},
            "torch_autocast": {"enabled": self.autocast, "dtype": "bfloat16"},
        }


def cpu_bf16_instructions() -> list[str]:
    """The native bf16 instruction sets of this CPU that torch's kernels use (empty when there are none)."""
    import torch

    checks = {"avx512_bf16": "_is_avx512_bf16_supported", "amx_bf16": "_is_amx_tile_supported"}
    found = [name for name, probe in checks.items() if getattr(torch.cpu, probe, lambda: False)()]
    if found or all(hasattr(torch.cpu, probe) for probe in checks.values()):
        return found
    return _cpuinfo_flags(checks)  # an older torch without the probes: ask the kernel (Linux)


def _cpuinfo_flags(wanted) -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []
    return [name for name in wanted if name in flags]


def resolve_precision(flag: str, *, on_gpu: bool, gpu_bf16: bool = False, cpu_bf16: list[str] | None = None) -> Precision:
    """The precision a run with `--precision flag` trains in on this device (`cpu_bf16`: its bf16 instruction
    sets, probed when None). A ValueError when the device cannot run it (fp16 on a CPU)."""
    if flag not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, got {flag!r}")
    if on_gpu:
        if flag == "auto":
            return Precision("bf16", False, "auto: the GPU supports bf16") if gpu_bf16 else Precision("fp32", False, "auto: the GPU has no bf16")
        return Precision(flag, False, "--precision")
    if flag == "fp16":
        raise ValueError("--precision fp16 needs a GPU (use fp32 or bf16 on CPU)")
    if flag != "auto":
        return Precision(flag, flag == "bf16", "--precision")
    found = cpu_bf16_instructions() if cpu_bf16 is None else cpu_bf16
    if found:
        return Precision("bf16", True, f"auto: this CPU has {' and '.join(found)}")
    return Precision("fp32", False, "auto: this CPU has no native bf16 instructions (avx512_bf16, amx_bf16)")


def resolve_on(flag: str, device) -> Precision:
    """`--precision flag` for a downstream run (fine-tuning) on a torch `device`: `auto` is fp32 on a CPU, whatever
    its bf16 instructions (--precision bf16 asks for autocast), and train's choice on a GPU; a ValueError for fp16
    on a CPU."""
    import torch

    if flag == "auto" and device.type != "cuda":
        return Precision("fp32", False, "auto: fp32 on a CPU; --precision bf16 for autocast")
    on_gpu = device.type == "cuda"
    return resolve_precision(flag, on_gpu=on_gpu, gpu_bf16=on_gpu and torch.cuda.is_bf16_supported())
