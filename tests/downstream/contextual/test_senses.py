"""clozeforge senses: sense embeddings and 1-NN on a case worked by hand, then fit / predict / evaluate on real WordNet
lemmas (Debian's wordnet-base) with a tiny export, a RUN's checkpoints and a scratch model; every row accounted for,
a bad row one line naming file and line."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

pytest.importorskip("transformers")

from downstream import stats
from downstream.contextual import senses
from downstream.contextual import wordnet as wordnet_db
from downstream.contextual.senses_command import senses_main
from tests.downstream.contextual.contextual_assets import (
    docstring_lines,
    fake_run,
    tiny_export,
    wordnet_rows,
    write_jsonl,
)

# lemma x: sense A twice, B three times, C once; lemma y: one sense
TRAIN = np.array([[1, 0], [3, 0], [0, 1], [0, 3], [1, 2], [5, 5], [1, 1]], np.float32)
LEMMAS = ["x", "x", "x", "x", "x", "x", "y"]
SENSES = ["A", "A", "B", "B", "B", "C", "D"]


def test_sense_embeddings_and_the_nearest_sense_by_hand():
    inventory = senses.Inventory.fit(TRAIN, LEMMAS, SENSES)
    assert inventory.keys == [("x", "A"), ("x", "B"), ("x", "C"), ("y", "D")]
    np.testing.assert_allclose(inventory.vectors, [[2, 0], [1 / 3, 2], [5, 5], [1, 1]], rtol=1e-6)
    assert inventory.counts.tolist() == [2, 3, 1, 1]
    [p] = senses.predict(inventory, np.array([[3, 1]], np.float32), ["x"])
    cos_a, cos_b, cos_c = 3 / math.sqrt(10), 3 / (math.sqrt(10) * math.sqrt(1 / 9 + 4)), 20 / math.sqrt(500)
    assert cos_a > cos_c > cos_b
    assert (p.sense, p.runner_up) == ("A", "C")
    assert p.cosine == pytest.approx(cos_a) and p.margin == pytest.approx(cos_a - cos_c)
    [q] = senses.predict(inventory, np.array([[3, 1]], np.float32), ["y"])
    assert (q.sense, q.runner_up, q.margin) == ("D", None, None)


def test_held_out_accuracy_mfs_and_random_by_hand():
    inventory = senses.Inventory.fit(TRAIN, LEMMAS, SENSES)
    test = np.array([[3, 1], [0.2, 1], [1, 0.9], [4, 4.5], [2, 2]], np.float32)
    score, predictions = senses.held_out(inventory, test, ["x", "x", "x", "x", "y"], ["A", "B", "A", "C", "D"])
    # (1, 0.9) is nearer C (cos 0.998) than A (0.743): wrong; y has one sense: not scored
    assert [p.sense for p in predictions] == ["A", "B", "C", "C", "D"]
    assert score.instances == 4 and score.not_scored == {"one_sense": 1}
    assert score.scored == [0, 1, 2, 3] and score.hits == [1, 1, 0, 1]  # what a paired comparison of two models reads
    assert stats.paired_difference([1, 1, 0, 1], [0, 1, 1, 1]) == pytest.approx((0.0, np.std([1, 0, -1, 0], ddof=1) / 2))
    nn, mfs = np.array([1, 1, 0, 1]), np.array([0, 1, 0, 0])  # MFS is B (3 instances)
    assert score.accuracy == pytest.approx(0.75) and score.accuracy_se == pytest.approx(nn.std(ddof=1) / 2)
    assert score.mfs == pytest.approx(0.25) and score.mfs_se == pytest.approx(mfs.std(ddof=1) / 2)
    assert score.random == pytest.approx(1 / 3) and score.random_se == pytest.approx(math.sqrt(4 * (1 / 3) * (2 / 3)) / 4)
    assert score.gain_over_mfs == pytest.approx(0.5) and score.gain_over_mfs_se == pytest.approx((nn - mfs).std(ddof=1) / 2)


def test_leave_one_out_by_hand():
    score = senses.leave_one_out(TRAIN, LEMMAS, SENSES)
    # C's and D's only instances cannot be predicted without themselves; of the 5 others, (1, 2) without itself
    # leaves B at (0, 2) (cos 0.894) and C (5, 5) is nearer (0.949): wrong. MFS without the instance: an A
    # instance sees A 1, B 3 (credit 0); a B instance sees A 2, B 2 (a tie: credit 1/2)
    assert score.not_scored == {"only_instance": 2} and score.instances == 5
    assert score.accuracy == pytest.approx(4 / 5)
    assert score.mfs == pytest.approx(1.5 / 5)
    assert score.random == pytest.approx(1 / 3)


@pytest.fixture(scope="module")
def wordnet(tmp_path_factory):
    root = tmp_path_factory.mktemp("senses")
    split = wordnet_rows(str(root / "wordnet"))
    texts = [r["text"] for name in ("train", "test") for r in _rows(root / "wordnet" / f"{name}.jsonl")]
    export = tiny_export(str(root / "model"), texts + docstring_lines(100))
    return {"root": root, "split": split, "train": str(root / "wordnet" / "train.jsonl"),
            "test": str(root / "wordnet" / "test.jsonl"), "export": export}


def _rows(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_wordnet_split_is_by_example_and_every_test_sense_has_training_instances(wordnet):
    train, test, split = _rows(wordnet["train"]), _rows(wordnet["test"]), wordnet["split"]
    assert {r["lemma"] for r in train} <= {"bank.n", "plant.n", "state.n", "line.n", "run.v", "light.a"}
    assert len(train) == split["train_instances"] and len(test) == split["test_instances"] and len(test) >= 10
    assert not {r["text"] for r in train} & {r["text"] for r in test}
    assert {r["sense"] for r in test} <= {r["sense"] for r in train}
    exceptions = {pos: wordnet_db.read_exceptions(pos) for pos in wordnet_db.POS}
    for r in train + test:  # the span holds the lemma, or a form WordNet's morphology reduces to it ("ran": run)
        word, pos = r["lemma"].split(".")
        assert word in wordnet_db.base_forms(r["text"][r["start"]:r["end"]], pos, exceptions[pos]), r
    assert any(r["text"][r["start"]:r["end"]] == "ran" for r in train + test)
    cashed = [r for r in test + train if r["text"] == "he cashed a check at the bank"]
    assert [(r["sense"], r["start"], r["end"]) for r in cashed] == [("bank.n.02", 25, 29)]  # bank 2: the institution


def test_fit_predict_evaluate_agree_on_real_wordnet_lemmas(wordnet, tmp_path, capsys):
    fitted, predicted = tmp_path / "senses", tmp_path / "predictions.jsonl"
    assert senses_main(["fit", wordnet["export"], "--train", wordnet["train"], "--output", str(fitted)]) == 0
    record = json.loads((fitted / "senses.json").read_text())
    train = _rows(wordnet["train"])
    assert record["data"]["read"] == len(train) == record["data"]["kept"] and record["data"]["dropped"] == {}
    assert sum(s["instances"] for s in record["senses"]) == len(train)
    assert senses_main(["predict", str(fitted), "--input", wordnet["test"], "--output", str(predicted)]) == 0
    rows, test = _rows(predicted), _rows(wordnet["test"])
    assert [r["line"] for r in rows] == list(range(1, len(test) + 1))
    for r in rows:
        if r["runner_up"] is not None:
            assert r["margin"] == pytest.approx(r["cosine"] - r["runner_up_cosine"]) and r["margin"] >= 0
    out = tmp_path / "evaluation"
    assert senses_main(["evaluate", wordnet["export"], "--train", wordnet["train"], "--test", wordnet["test"],
                        "--output", str(out), "--baseline", "scratch"]) == 0
    results = json.loads((out / "results.json").read_text())
    pretrained, scratch = results["arms"]
    assert (pretrained["name"], scratch["name"]) == ("pretrained", "scratch")
    per_lemma = {}
    for s in record["senses"]:
        per_lemma.setdefault(s["lemma"], []).append(s["sense"])
    scored = [r for r in rows if len(per_lemma[r["lemma"]]) > 1]
    assert pretrained["score"]["instances"] == len(scored)
    assert pretrained["score"]["accuracy"] == pytest.approx(np.mean([r["sense"] == r["gold"] for r in scored]), abs=1e-6)
    assert scratch["score"]["mfs"] == pretrained["score"]["mfs"] and scratch["score"]["accuracy"] != pretrained["score"]["accuracy"]
    assert pretrained["score"]["paired_instances"] == len(scored) and "gain_over_scratch" not in scratch["score"]
    assert pretrained["score"]["gain_over_scratch"] == pytest.approx(
        pretrained["score"]["accuracy"] - scratch["score"]["accuracy"], abs=1e-5)
    assert "| pretrained |" in (out / "senses.md").read_text()
    again = tmp_path / "again"  # the same inputs and seed: the same bytes
    assert senses_main(["evaluate", wordnet["export"], "--train", wordnet["train"], "--test", wordnet["test"],
                        "--output", str(again), "--baseline", "scratch"]) == 0
    assert (again / "results.json").read_bytes() == (out / "results.json").read_bytes()
    loo = tmp_path / "loo"
    assert senses_main(["evaluate", wordnet["export"], "--train", wordnet["train"], "--output", str(loo)]) == 0
    loo_results = json.loads((loo / "results.json").read_text())
    assert loo_results["protocol"] == "leave-one-out over --train"
    only = sum(1 for s in record["senses"] if s["instances"] == 1)
    assert loo_results["arms"][0]["score"]["not_scored"].get("only_instance", 0) == only


def test_a_run_sweep_draws_accuracy_over_steps_beside_the_finetuning_gain(wordnet, tmp_path):
    run = fake_run(str(tmp_path), wordnet["export"], [10, 20])
    gains = tmp_path / "finetune" / "results.json"
    os.makedirs(gains.parent)
    gains.write_text(json.dumps({"written_by": "clozeforge finetune", "task": "classify",
                                 "checkpoints": [{"step": 10, "gain": {"mean": -1.0, "se": 0.5}},
                                                 {"step": 20, "gain": {"mean": 2.0, "se": 0.7}}]}))
    out = tmp_path / "sweep"
    assert senses_main(["evaluate", run, "--checkpoints", "all", "--train", wordnet["train"], "--test", wordnet["test"],
                        "--output", str(out), "--baseline", "scratch", "--finetune-results", str(gains)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert [(a["name"], a["step"]) for a in results["arms"]] == [("step 10", 10), ("step 20", 20), ("scratch", None)]
    assert (out / "senses.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / "senses.png").stat().st_size > 10_000


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if "error:" in line]
    assert len(errors) == 1 and not any("Traceback" in line for line in err), err
    return errors[0]


def test_bad_rows_are_one_line_or_counted_drops(wordnet, tmp_path, capsys):
    good = {"text": "the bank of the river", "start": 4, "end": 8, "lemma": "bank.n", "sense": "bank.n.01"}
    rows = [good, {**good, "end": 80}, {**good, "text": "\u2603 \u2603", "start": 0, "end": 1}, {**good, "sense": ""},
            {**good, "text": "a bank with money", "start": 2, "end": 6, "sense": "bank.n.02"}]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    out = tmp_path / "fitted"
    assert senses_main(["fit", wordnet["export"], "--train", train, "--output", str(out)]) == 2
    assert f"{train}:2: span [4, 80) is not within the text's 21 characters" in _one_error(capsys)
    write_jsonl(train, rows[:1] + rows[2:])
    assert senses_main(["fit", wordnet["export"], "--train", train, "--output", str(out)]) == 2
    assert f"{train}:2: '\u2603' is only [UNK] to the tokenizer" in _one_error(capsys)
    write_jsonl(train, rows + [{"text": "a bank", "sense": "bank.n.01"}])
    assert senses_main(["fit", wordnet["export"], "--train", train, "--output", str(out), "--skip-bad-rows"]) == 2
    assert f"{train}:6: no target" in _one_error(capsys)
    write_jsonl(train, rows)
    with open(train, "a") as f:
        f.write("\n")  # a blank line: always a counted drop
    assert senses_main(["fit", wordnet["export"], "--train", train, "--output", str(out), "--skip-bad-rows"]) == 0
    data = json.loads((out / "senses.json").read_text())["data"]
    assert (data["read"], data["kept"]) == (6, 2)
    assert data["dropped"] == {"bad_span": 1, "blank_line": 1, "no_sense": 1, "unknown_word": 1}
    assert data["dropped_at"] == {"bad_span": [2], "blank_line": [6], "no_sense": [4], "unknown_word": [3]}
    test = write_jsonl(tmp_path / "test.jsonl", [good, {**good, "sense": "bank.n.07"}, {**good, "lemma": "plant.n"}])
    assert senses_main(["evaluate", wordnet["export"], "--train", train, "--test", test, "--output", str(tmp_path / "e"),
                        "--skip-bad-rows"]) == 0
    test_data = json.loads((tmp_path / "e" / "results.json").read_text())["arms"][0]["data"]["test"]
    assert test_data["dropped"] == {"unknown_lemma": 1, "unseen_sense": 1} and test_data["kept"] == 1
    capsys.readouterr()
    assert senses_main(["evaluate", wordnet["export"], "--train", wordnet["train"], "--test", test,
                        "--output", str(tmp_path / "e3")]) == 2
    assert f"{test}:2: sense 'bank.n.07' of 'bank.n' has no instance in the training file" in _one_error(capsys)
    assert senses_main(["predict", str(out), "--input", test, "--output", str(tmp_path / "p.jsonl")]) == 2
    assert f"{test}:3: lemma 'plant.n': no sense of it was fitted" in _one_error(capsys)
    assert not (tmp_path / "p.jsonl").exists() and not (tmp_path / "e3").exists()
    assert senses_main(["evaluate", str(tmp_path), "--train", train, "--output", str(tmp_path / "e4")]) == 2
    assert "neither an export" in _one_error(capsys)
