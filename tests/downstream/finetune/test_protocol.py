"""downstream.finetune.protocol: lr selection, the paired gain and its bootstrap interval, checked against
values computed by hand; and a job's selection of the run model/ is saved from (scripted runs, no training)."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("sklearn")

from downstream.finetune import protocol, tasks  # noqa: E402
from downstream.finetune.data import LabelMap  # noqa: E402
from downstream.finetune.tasks.sequence import Classes, Regression  # noqa: E402


def test_paired_difference_is_the_se_of_the_per_seed_differences():
    a, b = [80.0, 82.0, 84.0], [70.0, 71.0, 75.0]
    mean, se = protocol.paired_difference(a, b)
    # differences 10, 11, 9: mean 10, sample sd 1, SE 1 / sqrt(3)
    assert mean == pytest.approx(10.0) and se == pytest.approx(1 / math.sqrt(3))
    # the unpaired sqrt(SE_a^2 + SE_b^2) = sqrt(4/3 + 7/3) counts the variation the seeds share twice
    assert se < math.sqrt(4 / 3 + 7 / 3) / 3
    with pytest.raises(ValueError, match="same seeds"):
        protocol.paired_difference([1.0, 2.0], [1.0])


def test_select_takes_the_best_mean_and_the_first_on_a_tie():
    lr, table = protocol.select({1e-4: [0.9, 0.1], 3e-4: [0.6, 0.6], 1e-3: [0.2, 0.4]})
    assert lr == 3e-4  # 1e-4 has the best single run, not the best mean
    assert table[1e-4] == pytest.approx((0.5, 0.4)) and table[3e-4] == pytest.approx((0.6, 0.0))
    assert protocol.select({1e-4: [0.5], 3e-4: [0.5]})[0] == 1e-4
    assert protocol.best_seed([0.3, 0.7, 0.7]) == 1


def test_a_tie_goes_to_the_rate_furthest_inside_the_grid():
    """A tied edge was never searched past (Search grows only past a strictly best edge), so it is not chosen over
    a rate inside; equal means from different seeds' scores count as a tie however the sums round."""
    assert protocol.select({1e-4: [0.8, 0.7], 3e-4: [0.7, 0.8], 1e-3: [0.6, 0.6]})[0] == 3e-4  # was 1e-4, an edge
    assert protocol.select({1e-3: [0.5], 1e-4: [0.5], 3e-4: [0.5]})[0] == 3e-4  # flat: the middle, in any order
    assert protocol.select({3e-4: [0.5], 1e-4: [0.5]})[0] == 1e-4  # both at an edge: the lower
    five = {1e-5: [0.9], 3e-5: [0.5], 1e-4: [0.9], 3e-4: [0.9], 1e-3: [0.2]}
    assert protocol.select(five)[0] == 1e-4  # two steps from either end beats one
    assert protocol.select({1e-4: [0.1, 0.2, 0.4], 3e-4: [0.3, 0.3, 0.1]})[0] == 1e-4  # 0.7/3 both ways: the lower


def _accuracy_task():
    task = tasks.of("classify")
    task.target = Classes(LabelMap([0, 1]))
    task.metric = "accuracy"
    return task


def test_bootstrap_of_two_examples_by_hand():
    # a is right on example 0 only, b on neither: on a draw of the 2 examples the difference is the share of
    # draws of example 0: 0, 1/2 or 1 with probabilities 1/4, 1/2, 1/4, so the 95% interval is [0, 1]
    task, gold = _accuracy_task(), [1, 1]
    a = protocol.resampled_metric(task, gold, [[1, 0]])
    b = protocol.resampled_metric(task, gold, [[0, 0]])
    assert protocol.bootstrap_interval(2, a, b, resamples=1000) == (0.0, 1.0)
    # both right everywhere: no resample can move the difference
    assert protocol.bootstrap_interval(2, a, a, resamples=200) == (0.0, 0.0)


def test_bootstrap_matches_a_loop_written_out():
    rng = np.random.default_rng(5)
    gold = rng.integers(0, 2, 40).tolist()
    seeds_a = [np.where(rng.random(40) < 0.8, gold, 1 - np.asarray(gold)).tolist() for _ in range(3)]
    seeds_b = [np.where(rng.random(40) < 0.6, gold, 1 - np.asarray(gold)).tolist() for _ in range(3)]
    task = _accuracy_task()
    got = protocol.bootstrap_interval(40, protocol.resampled_metric(task, gold, seeds_a),
                                      protocol.resampled_metric(task, gold, seeds_b), resamples=100, seed=7)
    draws = np.random.default_rng(7).integers(0, 40, size=(100, 40))  # one chunk: the same draws
    g = np.asarray(gold)
    differences = [np.mean([np.mean(np.asarray(p)[d] == g[d]) for p in seeds_a]) -
                   np.mean([np.mean(np.asarray(p)[d] == g[d]) for p in seeds_b]) for d in draws]
    assert got == pytest.approx(tuple(np.percentile(differences, [2.5, 97.5])))


def test_bootstrap_fast_path_equals_recomputing_the_metric():
    tag = tasks.of("tag", scheme="BIO")
    tag.metric = "entity_f1"
    gold = [["B-PER", "O", "B-LOC"], ["O", "B-LOC", "I-LOC"], ["B-PER", "I-PER"], ["O"]]
    predicted = [["B-PER", "O", "O"], ["O", "B-LOC", "I-LOC"], ["B-PER", "O"], ["B-LOC"]]
    fast = protocol.resampled_metric(tag, gold, [predicted])
    assert tag.stats(gold, predicted) is not None
    tag.stats = lambda g, p: None  # the generic path: the metric recomputed on each draw
    slow = protocol.resampled_metric(tag, gold, [predicted])
    draws = np.random.default_rng(0).integers(0, 4, size=(50, 4))
    assert fast(draws) == pytest.approx(slow(draws))


def test_gain_record_in_points():
    task, gold = _accuracy_task(), [1, 0, 1, 1]
    g = protocol.gain(task, gold, [75.0, 100.0], [[1, 0, 1, 0], [1, 0, 1, 1]], [50.0, 50.0],
                      [[1, 1, 0, 1], [0, 0, 1, 0]], resamples=200, split="test")
    assert g["mean"] == pytest.approx(37.5) and g["se"] == pytest.approx(12.5) and g["per_seed"] == [25.0, 50.0]
    assert not g["within_se"] and g["bootstrap_split"] == "test" and g["bootstrap_examples"] == 4
    lo, hi = g["bootstrap"]
    assert -100 <= lo <= 37.5 <= hi <= 100
    assert protocol.gain(task, gold, [60.0, 62.0], [], [61.0, 61.0], [], resamples=0, split="test")["within_se"]


def test_model_comes_from_the_chosen_lrs_best_seed(monkeypatch):
    """lr 1e-4 has the best single run (0.9) but lr 3e-4 the best mean: model/ is 3e-4's best seed (1)."""
    from downstream.finetune import job as job_mod

    from .finetune_assets import scripted_job, scripted_runs

    validation = {(1e-4, 0): 0.9, (1e-4, 1): 0.1, (3e-4, 0): 0.55, (3e-4, 1): 0.65, (1e-3, 0): 0.95, (1e-3, 1): 0.95}
    job = scripted_job(monkeypatch, *scripted_runs(monkeypatch, validation, seeds=2))
    arms = [job_mod.Arm("pretrained", "dir", True, (1e-4, 3e-4), "--lr", 1),
            job_mod.Arm("scratch", "dir", False, (1e-3,), "--baseline-lr", 2, saved=False)]
    result, baseline = job.run_arms(arms, job_mod.Progress(1))
    assert result.record["lr"] == 3e-4 and result.record["best_seed"] == 1 and result.best["seed"] == 1
    assert result.best["state"]["w"].tolist() == pytest.approx([3e-4, 1])
    assert result.scores == pytest.approx([27.5, 32.5]) and result.predictions == [["0.0003/0"], ["0.0003/1"]]
    assert result.record["per_lr"]["0.0001"]["validation_mean"] == pytest.approx(50.0)  # points
    assert list(job.kept) == [(0, 3e-4)]  # the other lr's weights and the baseline's are not kept
    assert baseline.best["state"] is None and baseline.record["grid"]["epochs"] == 2


@pytest.mark.parametrize("metric", ["accuracy", "macro_f1", "mcc", "pearson"])
def test_sequence_fast_paths_equal_the_metric_on_every_draw(metric):
    rng = np.random.default_rng(1)
    task = tasks.of("classify", metric=metric)
    if metric == "pearson":
        task.target = Regression()
        gold, predicted = rng.normal(3, 1, 30).tolist(), rng.normal(3, 1, 30).tolist()
    else:
        task.target = Classes(LabelMap([0, 1, 2]))
        gold, predicted = rng.integers(0, 3, 30).tolist(), rng.integers(0, 3, 30).tolist()
    task.metric = metric
    assert task.stats(gold, predicted) is not None
    fast = protocol.resampled_metric(task, gold, [predicted])
    draws = np.random.default_rng(2).integers(0, 30, size=(40, 30))
    draws[0] = 0  # one example drawn 30 times: a constant, whose correlation is 0 and whose absent classes are skipped
    task.stats = lambda g, p: None
    assert fast(draws) == pytest.approx(protocol.resampled_metric(task, gold, [predicted])(draws), abs=1e-9)
