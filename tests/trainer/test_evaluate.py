"""Validation figures carry their count and standard error (trainer/evaluate.py), so a small split reads as one."""

from __future__ import annotations

import math

import pytest

from trainer.evaluate import describe, from_totals


def test_an_accuracy_comes_with_its_count_and_standard_error():
    totals = {"nsp_loss_sum": 44 * 0.69, "nsp_correct": 33.0, "nsp_count": 44.0,
              "mlm_loss_sum": 900 * 5.0, "mlm_correct": 90.0, "mlm_count": 900.0}
    result = from_totals(totals)
    assert result["nsp_acc"] == 0.75 and result["nsp_n"] == 44
    assert result["nsp_acc_se"] == pytest.approx(math.sqrt(0.75 * 0.25 / 44))
    assert result["mlm_acc_se"] == pytest.approx(math.sqrt(0.1 * 0.9 / 900)) and "sbo_acc" not in result
    line = describe(result)
    assert f"nsp_acc 0.7500 ± {math.sqrt(0.75 * 0.25 / 44):.4f} (n 44)" in line
    assert line.startswith("mlm_loss 5.0000 mlm_acc 0.1000 ± 0.0100 (n 900) nsp_loss 0.6900")


def test_a_split_with_no_pair_of_a_head_reports_nothing_for_it():
    assert from_totals({"nsp_count": 0.0}) == {}


def test_validation_masks_at_the_eval_rate_whatever_the_training_rate(prepped, tmp_path):
    """--mask-prob 0.4 trains at 40%; the validation split is still masked at --eval-mask-prob (15%)."""
    import os

    import torch

    from schemas import Manifest
    from trainer.builders import build_model, open_phase
    from trainer.config import TrainConfig
    from trainer.masking import MaskingConfig
    from trainer.run.runtime import Runtime

    def selected_share(batch) -> float:
        real = batch["attention_mask"].sum() - 3 * batch["input_ids"].shape[0]  # [CLS] and two [SEP] per pair
        return float((batch["mlm_labels"] != -100).sum() / real)

    url = os.path.join(prepped, "pairs")
    manifest = Manifest.read(url)
    rt = Runtime(rank=0, world_size=1, device=torch.device("cpu"), precision="fp32", device_name="cpu")
    for eval_rate in (0.15, 0.3):
        config = TrainConfig(data=url, output=str(tmp_path / "run"), masking=MaskingConfig(mask_prob=0.4), eval_mask_prob=eval_rate,
                             batch_form="padded")  # rows with their attention mask, which selected_share counts
        phase = open_phase(1, config, rt, build_model(config, manifest), manifest.vocab["sha256"])
        train, valid = next(iter(phase.train)), next(iter(phase.valid))
        assert selected_share(train) == pytest.approx(0.4, abs=0.03)
        assert selected_share(valid) == pytest.approx(eval_rate, abs=0.03)
