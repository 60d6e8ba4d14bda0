"""Corpus → prep → 2-rank DeepSpeed (ZeRO-0, 2 and 3, over gloo) → export → transformers, all real, on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import HANG_S, ROOT, free_port, run_cli

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)


def test_prep_accounts_for_every_record(prepped):
    with open(os.path.join(prepped, "report.json")) as f:
        report = json.load(f)
    total = report["total"]
    assert report["unbalanced"] == []
    assert total["read"] == total["kept"] + sum(total["dropped"].values())
    broken = next(v for k, v in report["files"].items() if k.endswith("broken.jsonl"))
    assert broken == {"read": 4, "kept": 0, "dropped": {"bad_json": 1, "not_an_object": 1, "null_text": 1, "empty_text": 1}, "events": {}}
    assert set(report["pairs"]) == {"train", "validation"}
    inspect = run_cli("inspect", os.path.join(prepped, "pairs"))
    assert inspect.returncode == 0, inspect.stdout + inspect.stderr
    assert "all shards verified" in inspect.stdout


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_deepspeed_two_ranks_then_transformers_loads_the_export(prepped, tmp_path, stage):
    run = str(tmp_path / "run")
    command = [
        sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", str(free_port()),
        "--module", "trainer.pretrain", "--data", os.path.join(prepped, "pairs"), "--output", run,
        "--zero-stage", str(stage), "--max-steps", "6", "--batch-size", "8", "--log-every", "2",
        "--eval-every", "6", "--eval-batches", "2", "--save-every", "3", "--num-workers", "0",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with open(os.path.join(run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    assert [r["step"] for r in records if "split" not in r] == [2, 4, 6]
    assert any(r.get("split") == "validation" for r in records)
    assert os.path.exists(os.path.join(run, "curves.png"))

    hf = str(tmp_path / "hf")
    exported = run_cli("export", run, "--output", hf, "--verify")
    assert exported.returncode == 0, exported.stdout + exported.stderr

    import transformers

    from downstream.export import load_run_model, validation_batch

    ours, client, _, _ = load_run_model(run)
    assert client["step"] == 6
    theirs = transformers.BertForPreTraining.from_pretrained(hf).eval()
    batch = validation_batch(client["train_config"])
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        sequence, pooled, _ = ours.encode(**inputs)
        mlm, nsp = ours.dense_mlm_logits(sequence), ours.cls.seq_relationship(pooled)
        reference = theirs(**inputs)
    real = inputs["attention_mask"].bool()
    assert (mlm - reference.prediction_logits)[real].abs().max().item() <= 1e-4
    assert (nsp - reference.seq_relationship_logits).abs().max().item() <= 1e-4
