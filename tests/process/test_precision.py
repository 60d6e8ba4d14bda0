"""--precision: what `auto` picks on each device, the DeepSpeed JSON it turns into, and (integration) that bf16
autocast on CPU trains to the same losses as fp32 within a stated tolerance."""

from __future__ import annotations

import json
import os

import pytest

from process.precision import cpu_bf16_instructions, resolve_precision
from tests.helpers import run_cli
from trainer.builders import deepspeed_config
from trainer.config import TrainConfig


@pytest.mark.parametrize("flag, on_gpu, gpu_bf16, cpu_bf16, expected", [
    ("auto", False, False, ["avx512_bf16"], ("bf16", True)),
    ("auto", False, False, ["amx_bf16"], ("bf16", True)),
    ("auto", False, False, [], ("fp32", False)),
    ("auto", True, True, [], ("bf16", False)),
    ("auto", True, False, ["avx512_bf16"], ("fp32", False)),
    ("bf16", False, False, [], ("bf16", True)),  # asked for: emulated, but the user's choice
    ("fp32", False, False, ["avx512_bf16"], ("fp32", False)),
    ("bf16", True, True, [], ("bf16", False)),
    ("fp16", True, True, [], ("fp16", False)),
])
def test_auto_picks_bf16_where_the_hardware_has_it(flag, on_gpu, gpu_bf16, cpu_bf16, expected):
    chosen = resolve_precision(flag, on_gpu=on_gpu, gpu_bf16=gpu_bf16, cpu_bf16=cpu_bf16)
    assert (chosen.name, chosen.autocast) == expected
    assert chosen.describe().startswith(f"precision: {expected[0]}")


def test_the_reason_names_what_auto_found():
    assert "avx512_bf16" in resolve_precision("auto", on_gpu=False, cpu_bf16=["avx512_bf16"]).describe()
    assert "no native bf16" in resolve_precision("auto", on_gpu=False, cpu_bf16=[]).describe()


def test_fp16_on_cpu_is_refused_in_one_line():
    with pytest.raises(ValueError, match="--precision fp16 needs a GPU"):
        resolve_precision("fp16", on_gpu=False, cpu_bf16=["avx512_bf16"])


def test_cpu_probe_agrees_with_the_kernel_flags():
    """torch's probes and /proc/cpuinfo tell the same story on this machine (Linux only)."""
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo")
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    found = cpu_bf16_instructions()
    assert ("avx512_bf16" in found) == ("avx512_bf16" in flags)
    if "amx_bf16" in found:
        assert "amx_bf16" in flags or "amx_tile" in flags


def test_deepspeed_json_for_each_precision():
    config = TrainConfig(data="pairs", output="run")
    cpu_bf16 = deepspeed_config(config, resolve_precision("bf16", on_gpu=False))
    assert cpu_bf16["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert not cpu_bf16["bf16"]["enabled"] and not cpu_bf16["fp16"]["enabled"]
    gpu = resolve_precision("bf16", on_gpu=True, gpu_bf16=True)
    gpu_bf16 = deepspeed_config(TrainConfig(data="pairs", output="run", zero_stage=2), gpu)
    assert gpu_bf16["bf16"]["enabled"] and not gpu_bf16["torch_autocast"]["enabled"]
    # ZeRO 0 (one rank's default): autocast over fp32 weights, not DeepSpeed's bf16 wrapper and its host reads
    gpu_stage0 = deepspeed_config(config, gpu)
    assert gpu_stage0["zero_optimization"]["stage"] == 0
    assert gpu_stage0["torch_autocast"]["enabled"] and not gpu_stage0["bf16"]["enabled"]
    fp32 = deepspeed_config(config, "fp32")
    assert not any(fp32[k]["enabled"] for k in ("bf16", "fp16", "torch_autocast"))


def _losses(run: str) -> tuple[list[dict], dict]:
    with open(os.path.join(run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if "split" not in r], [r for r in records if r.get("split") == "validation"][-1]


@pytest.mark.integration
def test_bf16_autocast_trains_like_fp32(prepped, tmp_path):
    """The same 30 steps (same data, masks, dropout and initial weights) in fp32 and in bf16 autocast: every
    logged training loss and the validation MLM loss within 1% of fp32's, validation MLM accuracy within 0.02.

    The tolerance is what bf16's 8-bit mantissa allows over a short run; the losses must also fall (the run
    learned something, so the comparison means something) and differ somewhere (bf16 was really in use)."""
    runs = {}
    for precision in ("fp32", "bf16"):
        run = str(tmp_path / precision)
        result = run_cli("train", "--data", f"{prepped}/pairs", "--output", run, "--precision", precision, "--max-steps", "30",
                         "--batch-size", "16", "--lr", "2e-3", "--warmup-steps", "3", "--log-every", "3", "--eval-every", "0",
                         "--eval-batches", "4", "--num-workers", "0", "--save-every", "100")
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"precision: {precision}" in result.stdout
        runs[precision] = _losses(run)
    (fp32_train, fp32_valid), (bf16_train, bf16_valid) = runs["fp32"], runs["bf16"]
    assert [r["step"] for r in fp32_train] == [r["step"] for r in bf16_train]
    assert fp32_train[-1]["loss"] < fp32_train[0]["loss"] - 0.5
    for a, b in zip(fp32_train, bf16_train):
        assert abs(b["loss"] - a["loss"]) <= 0.01 * a["loss"], (a["step"], a["loss"], b["loss"])
    assert abs(bf16_valid["mlm_loss"] - fp32_valid["mlm_loss"]) <= 0.01 * fp32_valid["mlm_loss"]
    assert abs(bf16_valid["mlm_acc"] - fp32_valid["mlm_acc"]) <= 0.02
    assert any(a["loss"] != b["loss"] for a, b in zip(fp32_train, bf16_train))


@pytest.mark.integration
def test_fp16_on_cpu_is_one_line(prepped, tmp_path):
    result = run_cli("train", "--data", f"{prepped}/pairs", "--output", str(tmp_path / "run"), "--precision", "fp16", "--max-steps", "1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == "clozeforge train: error: --precision fp16 needs a GPU (use fp32 or bf16 on CPU)"
