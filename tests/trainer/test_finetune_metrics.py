"""trainer.downstream.finetune.metrics against values computed by hand from the metrics' definitions."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("scipy")

from trainer.downstream.finetune import metrics  # noqa: E402


def test_accuracy_macro_f1_and_mcc():
    # per class (tp, fp, fn): 0 -> (1, 1, 1) F1 1/2; 1 -> (2, 1, 0) F1 4/5; 2 -> (1, 0, 1) F1 2/3
    m = metrics.classification([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0])
    assert m["accuracy"] == pytest.approx(4 / 6) and m["score"] == m["accuracy"]
    assert m["macro_f1"] == pytest.approx((1 / 2 + 4 / 5 + 2 / 3) / 3)
    # binary: TP 1, TN 2, FP 0, FN 1 -> (1*2 - 0*1) / sqrt(1 * 2 * 2 * 3)
    assert metrics.classification([1, 1, 0, 0], [1, 0, 0, 0])["mcc"] == pytest.approx(2 / math.sqrt(12))


def test_pearson_and_spearman():
    # deviations (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5): covariance sum 4, variance sums 5 and 5
    m = metrics.regression([1, 2, 3, 4], [1, 3, 2, 4])
    assert m["pearson"] == pytest.approx(0.8) and m["spearman"] == pytest.approx(0.8)
    m = metrics.regression([1, 2, 3, 4], [1, 2, 3, 40])
    assert m["spearman"] == pytest.approx(1.0) and m["pearson"] < 0.9
    assert metrics.regression([1, 2, 3], [5, 5, 5])["pearson"] == 0.0  # a constant prediction correlates with nothing


def test_bio_entities_are_read_as_conlleval_reads_them():
    assert metrics.bio_entities(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 1), ("LOC", 3, 3)}
    assert metrics.bio_entities(["I-LOC", "I-LOC", "B-LOC"]) == {("LOC", 0, 1), ("LOC", 2, 2)}  # I- opens one
    assert metrics.bio_entities(["B-PER", "I-LOC"]) == {("PER", 0, 0), ("LOC", 1, 1)}  # type change ends it


def test_entity_f1_counts_whole_entities():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    # sentence 1: PER right, LOC typed ORG; sentence 2: ORG right, plus a spurious PER
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-PER"]]
    m = metrics.entity_f1(gold, predicted)
    assert m["precision"] == pytest.approx(2 / 4) and m["recall"] == pytest.approx(2 / 3)
    assert m["entity_f1"] == pytest.approx(2 * (1 / 2) * (2 / 3) / (1 / 2 + 2 / 3))
    # a partly found entity counts for nothing
    assert metrics.entity_f1([["B-PER", "I-PER"]], [["B-PER", "O"]])["entity_f1"] == 0.0


def test_squad_exact_match_and_f1_use_squads_normalisation():
    assert metrics.normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert metrics.normalize_answer("an apple, a pear") == "apple pear"
    # question 1: exact after normalisation; question 2: tokens paris france vs paris: P 1/2, R 1 -> F1 2/3
    m = metrics.squad([["Eiffel Tower", "tower"], ["Paris"]], ["the Eiffel tower.", "Paris France"])
    assert m["exact_match"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx((1 + 2 / 3) / 2)
    # the best of several gold answers counts
    assert metrics.squad([["blue", "dark blue sky"]], ["dark blue"])["f1"] == pytest.approx(2 * 1 * (2 / 3) / (1 + 2 / 3))


def test_mean_and_standard_error():
    mean, se = metrics.mean_and_se([1.0, 2.0, 3.0])
    assert mean == 2.0 and se == pytest.approx(1.0 / math.sqrt(3))
    assert metrics.mean_and_se([5.0]) == (5.0, 0.0)
