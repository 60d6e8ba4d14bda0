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
