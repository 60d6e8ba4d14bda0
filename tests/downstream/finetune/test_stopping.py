"""downstream.finetune's early stopping on a real tiny model whose validation score cannot move (a learning rate of
1e-9 leaves its predictions as they were): --patience ends a run only once it has trained --min-epochs, by default
half of its arm's epochs; --min-epochs 0 is patience alone; --patience 0 trains every epoch and keeps the last."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """run(name, *flags) -> results.json of one seed at a rate too small to change a prediction, 8 epochs."""
    from downstream.finetune.command import finetune_main

    from .finetune_assets import classify_rows, tiny_export, write_jsonl

    root = tmp_path_factory.mktemp("stopping")
    hf, data = tiny_export(str(root)), write_jsonl(root / "topics.jsonl", classify_rows())

    def run(name, *flags) -> dict:
        out = root / name
        assert finetune_main([hf, "--task", "classify", "--train", data, "--validation", data, "--output", str(out),
                              "--seeds", "1", "--lr", "1e-9", "--epochs", "8", "--batch-size", "8", *flags]) == 0
        with open(out / "results.json") as f:
            return json.load(f)

    return run


def _trained(results: dict, arm: str = "pretrained") -> list[tuple[int, int]]:
    """(epochs trained, epoch kept) of each run of the arm."""
    return [(len(r["history"]), r["epoch"]) for r in results[arm]["runs"]]


def test_patience_waits_for_half_the_epochs_by_default(flat):
    results = flat("default", "--patience", "2")
    history = results["pretrained"]["runs"][0]["history"]
    assert len({h["score"] for h in history}) == 1  # the plateau: no epoch better than the first
    assert _trained(results) == [(4, 1)]  # stale from epoch 2, but not ended before epoch 8 // 2; the best kept
    assert results["recipe"]["min_epochs"] is None and results["pretrained"]["grid"]["min_epochs"] == 4


def test_min_epochs_sets_the_floor_and_zero_is_patience_alone(flat):
    assert _trained(flat("alone", "--patience", "2", "--min-epochs", "0")) == [(3, 1)]
    assert _trained(flat("six", "--patience", "2", "--min-epochs", "6")) == [(6, 1)]
    assert _trained(flat("past", "--patience", "2", "--min-epochs", "20")) == [(8, 1)]  # never more than --epochs


def test_each_arm_floors_at_half_its_own_epochs_and_patience_0_keeps_the_last(flat):
    both = flat("arms", "--patience", "1", "--baseline", "scratch", "--baseline-lr", "1e-9", "--baseline-epochs", "4")
    assert _trained(both) == [(4, 1)] and _trained(both, "baseline") == [(2, 1)]
    assert both["pretrained"]["grid"]["min_epochs"] == 4 and both["baseline"]["grid"]["min_epochs"] == 2
    every = flat("all", "--patience", "0")
    assert _trained(every) == [(8, 8)] and every["pretrained"]["grid"]["min_epochs"] is None
