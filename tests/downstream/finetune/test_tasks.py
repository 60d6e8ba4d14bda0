"""downstream.finetune.tasks: the table of kinds, and the span task's SQuAD v2 side (no-answer scoring,
the null threshold fitted on validation and reused on test) on cases worked out by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from downstream.finetune import tasks
from downstream.finetune.tasks.base import Features


def test_every_kind_is_whole_in_the_table():
    transformers = pytest.importorskip("transformers")
    columns = {f.name for f in dataclasses.fields(tasks.Columns)}
    for name, kind in tasks.TASK_KINDS.items():
        task = tasks.of(name)
        assert task.name == name and set(kind.column_fields) <= columns
        assert hasattr(transformers, kind.model_class_name) and kind.pipeline
        assert [flag for _, flag in task.required()] == ["--" + f.replace("_", "-") for f in kind.column_fields]


def _span(unanswerable: bool = True, metric: str = "f1") -> tasks.Task:
    span = tasks.of("span")
    span.unanswerable, span.metric = unanswerable, metric
    return span


def test_no_answer_questions_score_as_squad_v2():
    span = _span()
    # an answered question: token F1 of "the paris" against "Paris" is 1 after normalisation (articles dropped)
    m = span.metrics([["Paris"], []], ["the paris", ""])
    assert (m["f1"], m["exact_match"], m["HasAns_f1"], m["NoAns_f1"]) == (1.0, 1.0, 1.0, 1.0)
    # no prediction on an answered question, a prediction on an unanswerable one: both 0
    m = span.metrics([["Paris"], []], ["", "Rome"])
    assert m["f1"] == 0.0 and m["exact_match"] == 0.0
    m = span.metrics([["Paris France"], [], []], ["Paris", "", "x"])  # F1 2/3, 1, 0
    assert m["f1"] == pytest.approx((2 / 3 + 1 + 0) / 3) and m["exact_match"] == pytest.approx(1 / 3)
    assert m["NoAns_f1"] == pytest.approx(0.5)


def test_null_threshold_maximises_the_metric_on_validation():
    span = _span()
    gold = [["Paris"], [], []]
    texts, margins = ["Paris", "London", "Rome"], np.array([-2.0, 1.0, -0.5])
    # by margin: Paris (-2.0) answered gains 1; Rome (-0.5) and London (1.0) answered lose 1 each: cut after Paris
    assert span.best_threshold(gold, texts, margins) == -2.0
    # all answerable and all right: answer everything, up to the highest margin
    assert span.best_threshold([["a"], ["b"]], ["a", "b"], np.array([0.5, 3.0])) == 3.0
    # nothing worth answering: every question is predicted unanswerable
    threshold = span.best_threshold([[], []], ["a", "b"], np.array([0.5, 3.0]))
    assert span._apply(["a", "b"], np.array([0.5, 3.0]), threshold) == ["", ""]


def _one_window():
    """One question, one window: [CLS] q c1 c2 over the context "Paris is big"; c1 = "Paris", c2 = "is"."""
    examples = [{"question": "q", "context": "Paris is big", "answers": ["Paris"], "starts": [0], "line": 1}]
    features = Features({}, np.array([0]), {"offsets": [[(0, 0), (0, 0), (0, 5), (6, 8)]],
                                            "in_context": [[False, False, True, True]]})
    start = torch.tensor([[5.0, 0.0, 1.0, 0.0]])
    end = torch.tensor([[5.0, 0.0, 1.0, -1.0]])
    return [start, end], features, examples  # null score 10, best span "Paris" 2: margin 8


def test_the_threshold_from_validation_is_reused_on_test():
    outputs, features, examples = _one_window()
    span = _span()
    assert span.best_spans(outputs, features, examples)[1].tolist() == [8.0]
    assert span.evaluate(outputs, features, examples, {"null_threshold": 0.0}).predictions == [""]
    kept = span.evaluate(outputs, features, examples, {"null_threshold": 9.0})
    assert kept.predictions == ["Paris"] and kept.calibration == {"null_threshold": 9.0}
    fitted = span.evaluate(outputs, features, examples)  # validation: fitted here, so that "Paris" is kept
    assert fitted.predictions == ["Paris"] and fitted.calibration["null_threshold"] >= 8.0
    # SQuAD v1.1 data (every training question answered): never a null prediction, no calibration
    v1 = _span(unanswerable=False).evaluate(outputs, features, examples)
    assert v1.predictions == ["Paris"] and v1.calibration is None and v1.metrics["score"] == 1.0


def test_a_suite_preset_is_options_of_the_task(tmp_path):
    """What a benchmark fixes (SQuAD v1.1's answers only, CoNLL's IOB1, MRPC's positive class) is passed to the
    kind's class; nothing is read from the data then."""
    from downstream.finetune.data import read_split

    from .finetune_assets import classify_rows, span_rows, tag_rows, write_jsonl

    span = tasks.of("span", unanswerable=False)
    rows = span_rows() + [{"question": "Who?", "context": "Nobody.", "answers": {"text": [], "answer_start": []}}]
    span.prepare(read_split(write_jsonl(tmp_path / "s.jsonl", rows), span), [])
    assert span.unanswerable is False
    tag = tasks.of("tag", scheme="IOB1")
    tag.prepare(read_split(write_jsonl(tmp_path / "t.jsonl", tag_rows()), tag), [])
    assert tag.scheme == "IOB1"
    pair = tasks.of("classify", positive="food", metric="f1")
    pair.prepare(read_split(write_jsonl(tmp_path / "c.jsonl", classify_rows()), pair), [])
    assert pair.target.positive == 0 and pair.metric == "f1"  # labels sorted: food, sport, tech
    with pytest.raises(Exception, match="the positive label 'music' never appears"):
        missing = tasks.of("classify", positive="music")
        missing.prepare(read_split(write_jsonl(tmp_path / "c.jsonl", classify_rows()), missing), [])
