"""The asynchronous step: losses read once per logged step and equal to reading each micro batch's as it went,
no host synchronisation inside a step (counted on fake device tensors), one compiled graph for every batch
shape, and --zero-stage/--compile auto resolved per world size and device (a resume keeps its stage)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import HANG_S, ROOT
from trainer.config import TrainConfig, TrainError
from trainer.heads import loss_keys
from trainer.loop import mark_dynamic
from trainer.run.runtime import mean_losses


def test_mean_losses_are_the_sums_of_reading_each_micro_batch():
    """The old loop added `loss.item() / grad_accum` per micro batch and key; one read of them all must give
    the same floats, bit for bit, in fp32 and bf16."""
    gen, LOSSES = torch.Generator().manual_seed(0), loss_keys()
    for dtype in (torch.float32, torch.bfloat16):
        micro = [{key: (torch.rand((), generator=gen) * 10).to(dtype) for key in LOSSES[:3]} for _ in range(3)]
        old: dict[str, float] = {}
        for m in micro:
            for key in LOSSES:
                if key in m:
                    old[key] = old.get(key, 0.0) + m[key].detach().item() / 3
        assert mean_losses(micro, 3) == old


def test_zero_stage_and_compile_auto_resolve_per_world_size_and_device():
    config = TrainConfig(data="d", output="o")
    assert (config.zero_stage, config.compile, config.num_workers) == ("auto", "auto", None)
    assert (config.zero_stage_for(1), config.zero_stage_for(2)) == (0, 2)
    assert TrainConfig(data="d", output="o", zero_stage=3).zero_stage_for(1) == 3
    assert TrainConfig(data="d", output="o", optimizer="lamb").zero_stage_for(8) == 0
    assert (config.compile_backend(on_gpu=True), config.compile_backend(on_gpu=False)) == ("inductor", None)
    for off in ("off", "none", None):
        assert TrainConfig(data="d", output="o", compile=off).compile_backend(on_gpu=True) is None
    assert TrainConfig(data="d", output="o", compile="eager").compile_backend(on_gpu=False) == "eager"
    with pytest.raises(TrainError, match="--zero-stage must be auto or 0-3"):
        TrainConfig(data="d", output="o", zero_stage=4)


def test_zero_stage_auto_resumes_the_recorded_stage(monkeypatch, tmp_path):
    """A run recorded at stage 2 (every run before auto existed) resumes at 2 on one rank; a new run takes 0."""
    from trainer.checkpoint import resume
    from trainer.run.runtime import Runtime

    rt = Runtime(rank=0, world_size=1, device=torch.device("cpu"), precision="fp32", device_name="cpu")
    config = TrainConfig(data="d", output=str(tmp_path), batch_size=4)
    monkeypatch.setattr(resume, "recorded", lambda _run: None)
    assert resume.resolve(config, rt).zero_stage == 0
    monkeypatch.setattr(resume, "recorded", lambda _run: {"batch_size": 4, "world_size": 1, "zero_stage": 2})
    assert resume.resolve(config, rt).zero_stage == 2
    assert resume.resolve(TrainConfig(data="d", output=str(tmp_path), batch_size=4, zero_stage=0), rt).zero_stage == 0  # refused later, by name


def _shapes(batch: int, seq: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seq)
    return {"input_ids": torch.randint(5, 100, (batch, seq), generator=gen), "token_type_ids": torch.zeros(batch, seq, dtype=torch.long),
            "attention_mask": torch.ones(batch, seq, dtype=torch.long)}


@pytest.mark.parametrize("marked", [True, False])
def test_a_compiled_model_traces_one_graph_for_every_batch_shape(marked):
    """Dynamic padding gives every batch its own length, and a resume may shrink the micro batch: marked dynamic,
    the compiled encoder is traced once for all of them (unmarked, dynamo traces again at the first new length
    and at the first new batch size: the check that this test can fail)."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    from trainer.model import BertForPretraining, ModelConfig

    torch._dynamo.reset()
    model = BertForPretraining(ModelConfig.preset("tiny", vocab_size=100), seed=0).eval()
    counter = CompileCounter()
    encode = torch.compile(model.encode, backend=counter)
    with torch.no_grad():
        for batch, seq in ((4, 37), (4, 64), (4, 90), (3, 51), (4, 128)):
            inputs = _shapes(batch, seq)
            if marked:
                mark_dynamic(inputs)
            encode(**inputs)
    assert counter.frame_count == 1 if marked else counter.frame_count == 3  # unmarked: a new length, then a new batch size


def test_the_gpu_path_trains_one_graph_for_every_batch_shape(monkeypatch):
    """The training model on its GPU code (trainer/model/bert.py's `cpu_kernels` off: F.dropout, SDPA,
    F.cross_entropy), forward and backward, marked as the loop marks its batches: one frame for every batch size,
    sequence length and number of masked positions, the losses inside it."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    import trainer.model.bert as bert
    from trainer.model import BertForPretraining, ModelConfig

    monkeypatch.setattr(bert, "cpu_kernels", lambda x: False)
    torch._dynamo.reset()
    model = BertForPretraining(ModelConfig.preset("tiny", vocab_size=100), seed=0).train()
    counter = CompileCounter()
    step = torch.compile(model, backend=counter)
    for batch, seq, masked in ((4, 37, 5), (4, 64, 9), (3, 51, 7), (4, 128, 20), (2, 128, 19)):
        inputs = _shapes(batch, seq)
        gen = torch.Generator().manual_seed(masked)
        inputs.update(mlm_positions=torch.randint(1, seq, (batch, masked), generator=gen),
                      mlm_labels=torch.randint(5, 100, (batch, masked), generator=gen),
                      next_sentence_label=torch.randint(0, 2, (batch,), generator=gen))
        mark_dynamic(inputs)
        step(**inputs)["loss"].backward()
    assert counter.frame_count == 1


COUNT_SYNCS = r"""
import json, sys
import torch
from process import cpu_sharing
cpu_sharing.apply()
import trainer.data.device as device

READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__float__, torch.Tensor.__int__,
         torch.Tensor.__index__, torch.Tensor.numpy, torch.Tensor.cpu}
reads = []

class OnDevice(torch.Tensor):
    # A tensor that counts every read of its value into the host: on a GPU each one waits for the device.
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in READS or (func is torch.Tensor.to and any(str(a) == "cpu" for a in (*args[1:], *(kwargs or {}).values()))):
            reads.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})

sent = device.to_device
device.to_device = lambda batch, dev: {k: v.as_subclass(OnDevice) for k, v in sent(batch, dev).items()}
from trainer.config import TrainConfig
from trainer.loop import train
from trainer.run.runtime import start_runtime, shutdown_runtime
rt = start_runtime("fp32")
config = TrainConfig(data=sys.argv[1], output=sys.argv[2], max_steps=int(sys.argv[3]), log_every=int(sys.argv[4]),
                     batch_size=4, grad_accum=2, eval_every=0, save_every=1000, num_workers=0, precision="fp32",
                     batch_form="padded")  # a GPU's form: unpadded attention reads its rows' lengths (host values on a CPU)
train(config, rt)
shutdown_runtime()
print("READS " + json.dumps(reads))
"""


@pytest.mark.integration  # trains in a child process
def test_a_step_reads_nothing_back_from_the_device(prepped, tmp_path):
    """Every tensor the model sees counts the reads of its value into the host (.item(), .tolist(), bool(), a
    copy to the CPU, ...), and so does everything computed from it (the losses): 8 steps of 2 micro batches,
    logged every 4, read the device twice, once per logged step. The synchronous loop read 2 x 3 losses in
    every step (48)."""
    result = subprocess.run([sys.executable, "-c", COUNT_SYNCS, os.path.join(prepped, "pairs"), str(tmp_path / "run"), "8", "4"],
                            cwd=ROOT, capture_output=True, text=True, timeout=HANG_S, check=False,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stderr[-3000:]
    reads = json.loads(result.stdout.rsplit("READS ", 1)[1])
    assert reads == ["tolist", "tolist"], reads
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        logged = [r["step"] for r in map(json.loads, f) if "split" not in r]
    assert logged == [4, 8]


SYNCHRONOUS_LOOP = {  # step: (loss, mlm_loss, nsp_loss) logged by the loop that read every micro batch's losses with
    # .item() (commit d52b256), on the `prepped` fixture's data with the flags of the test below
    1: (7.6309216022491455, 6.938029527664185, 0.6928919851779938),
    2: (7.520997524261475, 6.9070494174957275, 0.6139481663703918),
    3: (7.757081031799316, 6.809701204299927, 0.947379857301712),
    4: (7.493191480636597, 6.737753868103027, 0.7554375231266022),
    5: (7.607764005661011, 6.778194189071655, 0.829569935798645),
    6: (7.496798992156982, 6.76350998878479, 0.7332891523838043),
}


@pytest.mark.integration  # two CLI trainings
def test_logged_losses_are_the_synchronous_loops(prepped, tmp_path):
    """Reading the losses once per logged step changes none of them: logged every step or every 4th, each logged
    step carries the losses the synchronous loop logged (recorded above; a change to the model, the masking or
    the data order must record them again). The tolerance covers a machine whose thread count sums the same
    losses in another order; on this one they are equal to the last bit."""
    from tests.helpers import run_cli

    flags = ["--data", os.path.join(prepped, "pairs"), "--max-steps", "6", "--batch-size", "4", "--grad-accum", "2",
             "--eval-every", "0", "--num-workers", "0", "--save-every", "100", "--precision", "fp32", "--zero-stage", "2",
             "--batch-form", "padded"]  # the form the losses above were recorded in (unpadded: equal within 1e-5, not 1e-6)
    logged = {}
    for every in (1, 4):
        run = str(tmp_path / f"every{every}")
        result = run_cli("train", *flags, "--log-every", str(every), "--output", run)
        assert result.returncode == 0, result.stderr[-2000:]
        with open(os.path.join(run, "metrics.jsonl")) as f:
            logged[every] = {r["step"]: (r["loss"], r["mlm_loss"], r["nsp_loss"]) for r in map(json.loads, f) if "split" not in r}
    assert sorted(logged[1]) == [1, 2, 3, 4, 5, 6] and sorted(logged[4]) == [4, 6]
    assert all(logged[4][step] == logged[1][step] for step in logged[4])
    for step, losses in logged[1].items():
        assert losses == pytest.approx(SYNCHRONOUS_LOOP[step], rel=1e-6, abs=0), step


COUNT_OPS = r"""
import json
from process import cpu_sharing
cpu_sharing.apply()
from tests.helpers import dispatched_ops
from trainer.run.runtime import start_runtime, shutdown_runtime
found = dispatched_ops(start_runtime("fp32"))
shutdown_runtime()
print("OPS " + json.dumps(found))
"""


@pytest.mark.integration  # DeepSpeed in a child process
def test_a_zero0_step_dispatches_what_a_bare_step_does(tmp_path):
    """Six clipped steps (grad_clip 0.05 binds) through three copies of one model (tests/helpers.py's
    `dispatched_ops`, also on `bench/run.py train --loop`'s line): the trainer's engine, the same engine with
    DeepSpeed's own stage-0 clipping and one-rank all-reduce, and a bare loop (forward, backward, torch's
    clip_grad_norm_, AdamW). All three end at the same weights (the same arithmetic, up to float
    rounding); the trainer's step dispatches a handful of ops more than the bare one, where DeepSpeed's own
    dispatched about ten per parameter tensor more (a norm, a multiply, a flatten-and-copy: each a kernel launch
    on a GPU, host work on any device)."""
    result = subprocess.run([sys.executable, "-c", COUNT_OPS], cwd=ROOT, capture_output=True, text=True, timeout=HANG_S,
                            check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.rsplit("OPS ", 1)[1])
    ops, tensors = found["ops_per_step"], found["parameter_tensors"]
    assert found["moved"] > 1e-3  # the steps did train
    assert found["apart"]["trainer"] < 1e-6 and found["apart"]["bare"] < 1e-6, found
    assert ops["trainer"] - ops["bare"] <= 16, ops
    assert ops["deepspeed"] - ops["trainer"] >= 5 * tensors, ops  # what the test would see without the change
