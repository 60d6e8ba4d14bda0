"""--init-from through real DeepSpeed runs (CPU, fp32, gloo): the weights that reach the engine are the source's
under ZeRO 0, 2 and 3 on one and two ranks; a run started from a source resumes like any run; a bad source or a
vocabulary mismatch is one line before any rank starts; --init-from on a run with checkpoints is refused.

How "the source's weights reached the engine" is measured: one optimizer step at a learning rate of 1e-12 moves no
weight by more than ~1e-12, so the run's export must give the source's MLM and NSP logits within 1e-5 (a random
start misses by ~1).

An --init-from run says its learning rate and why in one line, is evaluated at step 0 (the source's score) and not a
fresh run, and is warned about when its accuracy did not move from the source's by its first evaluation."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from downstream.export import validation_batch  # noqa: E402
from tests.helpers import run_cli  # noqa: E402

pytestmark = pytest.mark.integration  # starts processes (CLI, DeepSpeed ranks)
TOLERANCE = 1e-5
QUICK = ("--batch-size", "4", "--log-every", "1", "--eval-every", "0", "--num-workers", "0", "--precision", "fp32")


@pytest.fixture(scope="module")
def source(prepped, tmp_path_factory) -> str:
    """A small random transformers BertForPreTraining over the prepped data's vocabulary, saved by save_pretrained."""
    path = str(tmp_path_factory.mktemp("source"))
    with open(os.path.join(prepped, "vocab", "vocab.txt")) as f:
        size = len(f.read().splitlines())
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128)
    transformers.BertForPreTraining(config).save_pretrained(path)
    shutil.copy(os.path.join(prepped, "vocab", "vocab.txt"), path)
    return path


def train(prepped: str, run: str, *extra: str, nproc: int = 1):
    return run_cli("train", "--data", os.path.join(prepped, "pairs"), "--output", run, *QUICK, "--nproc-per-node", str(nproc), *extra)


def export_diffs(prepped: str, run: str, source: str, tmp_path) -> dict[str, float]:
    """Max |run's export - the source| of transformers' MLM (real tokens) and NSP logits on the run's pairs."""
    out = str(tmp_path / f"export-{os.path.basename(run)}")
    result = run_cli("export", run, "--output", out)
    assert result.returncode == 0, result.stderr[-2000:]
    with open(os.path.join(run, "train_config.json")) as f:
        inputs = validation_batch(json.load(f))
    inputs = {k: inputs[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        a = transformers.BertForPreTraining.from_pretrained(out).eval()(**inputs)
        b = transformers.BertForPreTraining.from_pretrained(source).eval()(**inputs)
    real = inputs["attention_mask"].bool()
    return {"mlm": (a.prediction_logits - b.prediction_logits)[real].abs().max().item(),
            "nsp": (a.seq_relationship_logits - b.seq_relationship_logits).abs().max().item()}


@pytest.mark.parametrize("zero, nproc", [(0, 1), (2, 2), (3, 2)], ids=["zero0-1rank", "zero2-2ranks", "zero3-2ranks"])
def test_the_engine_starts_from_the_source_weights(prepped, source, tmp_path, zero, nproc):
    run = str(tmp_path / "run")
    result = train(prepped, run, "--init-from", source, "--zero-stage", str(zero), "--max-steps", "1", "--lr", "1e-12", nproc=nproc)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "fresh from --seed: none" in result.stdout + result.stderr
    diffs = export_diffs(prepped, run, source, tmp_path)
    print(f"ZeRO {zero}, {nproc} rank(s): |export - source| after one step at lr 1e-12:", diffs)
    assert diffs["mlm"] <= TOLERANCE and diffs["nsp"] <= TOLERANCE, diffs
    with open(os.path.join(run, "train_config.json")) as f:
        record = json.load(f)
    assert record["init_from"] == source and record["init_architecture"]["hidden_size"] == 32
    with open(str(tmp_path / "export-run" / "README.md")) as f:
        assert f"continued from {source}" in f.read()


def test_a_run_started_from_a_source_resumes_as_if_uninterrupted(prepped, source, tmp_path):
    straight, interrupted = str(tmp_path / "straight"), str(tmp_path / "interrupted")
    flags = ("--init-from", source, "--max-steps", "4", "--zero-stage", "2", "--save-every", "100")
    for run, extra in ((straight, ()), (interrupted, ("--stop-after", "2"))):
        result = train(prepped, run, *flags, *extra)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"init-from {source}: lr 0.0024: the source records no training rate" in result.stdout  # 32 wide
    again = train(prepped, interrupted, *flags)  # --init-from on a run with checkpoints: that is a resume
    assert again.returncode == 2 and "already has checkpoints" in again.stderr and "rerun without --init-from" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1, again.stderr
    resumed = train(prepped, interrupted, "--max-steps", "4", "--zero-stage", "2", "--save-every", "100")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step_00000002" in resumed.stdout + resumed.stderr
    assert f"init-from {source}: lr 0.0024: the rate this run started with ({interrupted}/train_config.json)" in resumed.stdout

    def losses(run):
        with open(os.path.join(run, "metrics.jsonl")) as f:
            return {r["step"]: (r["loss"], r["lr"]) for r in map(json.loads, f) if "split" not in r}

    a, b = losses(straight), losses(interrupted)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in a:
        assert abs(a[step][0] - b[step][0]) <= 1e-5 and a[step][1] == b[step][1], (step, a[step], b[step])
    assert max(lr for _, lr in a.values()) <= 2.4e-3  # the width rule's rate, kept by the resume without the flag


def test_a_run_is_a_source_too(prepped, source, tmp_path):
    first = str(tmp_path / "first")
    assert train(prepped, first, "--init-from", source, "--max-steps", "2", "--save-every", "1", "--keep-last", "3").returncode == 0
    second = str(tmp_path / "second")
    result = train(prepped, second, "--init-from", f"{first}@1", "--max-steps", "1", "--lr", "1e-12")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "clozeforge run, step 1" in result.stdout + result.stderr


def test_bad_sources_are_one_line_before_any_rank_starts(prepped, source, tmp_path):
    other = str(tmp_path / "other-vocab")
    shutil.copytree(source, other)
    with open(os.path.join(other, "vocab.txt"), "a") as f:
        f.write("[extra]\n")
    roberta = str(tmp_path / "roberta")
    shutil.copytree(source, roberta)
    with open(os.path.join(roberta, "config.json")) as f:
        body = json.load(f)
    with open(os.path.join(roberta, "config.json"), "w") as f:
        json.dump({**body, "model_type": "roberta"}, f)
    for bad, expected in ((other, "prepped with another vocabulary"), (roberta, "model_type 'roberta' is not a BERT")):
        run = str(tmp_path / f"run-{os.path.basename(bad)}")
        result = train(prepped, run, "--init-from", bad, "--max-steps", "1", nproc=2)
        assert result.returncode == 2, result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], result.stderr
        assert not os.path.exists(os.path.join(run, "train_config.json"))  # no rank started
    conflicting = train(prepped, str(tmp_path / "conflict"), "--init-from", source, "--model", "mini")
    assert conflicting.returncode == 2 and "--model mini disagrees with --init-from" in conflicting.stderr


def validation_steps(run: str) -> list[int]:
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [r["step"] for r in map(json.loads, f) if r.get("split") == "validation"]


def test_an_init_from_run_is_read_at_step_0_and_takes_the_rate_its_source_trained_at(prepped, tmp_path):
    fresh = str(tmp_path / "fresh")
    result = train(prepped, fresh, "--max-steps", "2", "--eval-every", "2", "--eval-batches", "2", "--lr", "2e-3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert validation_steps(fresh) == [2] and "init-from" not in result.stdout  # a fresh run: no step 0, no rate line
    continued = str(tmp_path / "continued")
    result = train(prepped, continued, "--init-from", fresh, "--max-steps", "2", "--eval-every", "2", "--eval-batches", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"init-from {fresh}: lr 0.002: the rate the source's own training used ({fresh}/checkpoints/step_00000002, "
            "its train config)\n") in result.stdout
    assert validation_steps(continued) == [0, 2] and "(step 0: the source)" in result.stdout
    with open(os.path.join(continued, "train_config.json")) as f:
        assert json.load(f)["lr"] == 2e-3


@pytest.mark.parametrize("lr, warned", [("1e-9", True), ("1e-2", False)])
def test_a_run_whose_accuracy_did_not_move_from_its_source_is_warned_about(prepped, source, tmp_path, lr, warned):
    run = str(tmp_path / "run")
    result = train(prepped, run, "--init-from", source, "--max-steps", "6", "--eval-every", "6", "--eval-batches", "4", "--lr", lr)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"init-from {source}: lr {float(lr):g}: given (--lr)\n" in result.stdout
    with open(os.path.join(run, "metrics.jsonl")) as f:
        first, last = (r for r in map(json.loads, f) if r.get("split") == "validation")
    moved = abs(last["mlm_acc"] - first["mlm_acc"])
    print(f"lr {lr}: validation MLM accuracy {first['mlm_acc']:.4f} -> {last['mlm_acc']:.4f} (SE {last['mlm_acc_se']:.4f})")
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning: validation MLM accuracy moved")]
    assert len(warnings) == int(warned), result.stdout[-2000:]
    if warned:
        assert moved <= max(first["mlm_acc_se"], last["mlm_acc_se"]) and "--lr" in warnings[0] and "at lr 1e-09" in warnings[0]
    else:
        assert moved > max(first["mlm_acc_se"], last["mlm_acc_se"])
