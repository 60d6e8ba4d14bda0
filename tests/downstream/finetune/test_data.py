"""downstream.finetune.data and the tasks' reading of rows: each kind of bad input is one line naming
file, line and column, or a counted drop; good input in every format gives the same examples; the label column's
type, not its values, decides between classes and regression."""

from __future__ import annotations

import pytest

from downstream.finetune import tasks
from downstream.finetune.data import DataError, read_split

from .finetune_assets import classify_rows, span_rows, tag_rows, write_jsonl


def _read(path, kind="classify", **kwargs):
    return read_split(str(path), tasks.of(kind), **kwargs)


def _prepared(train_path, others=(), kind="classify", **options) -> tasks.Task:
    task = tasks.of(kind, **options)
    task.prepare(read_split(str(train_path), task), [read_split(str(p), task) for p in others])
    return task


def _error(path, task="classify", **kwargs) -> str:
    with pytest.raises(DataError) as e:
        _read(path, task, **kwargs)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_jsonl_csv_and_parquet_give_the_same_examples(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = classify_rows()
    write_jsonl(tmp_path / "a.jsonl", rows)
    (tmp_path / "a.csv").write_text("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    got = [[(e["text"], e["label"]) for e in _read(tmp_path / f"a.{ext}").examples]
           for ext in ("jsonl", "csv", "parquet")]
    assert got[0] == got[1] == got[2] == [(r["text"], r["label"]) for r in rows]


def test_missing_column_names_file_line_and_flag(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"sentence": "a", "label": 1}])
    assert _error(path) == f"{path}:1: no column 'text' (columns: sentence, label; name yours with --text-column)"


def test_empty_split(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    assert "empty split" in _error(tmp_path / "e.jsonl")
    path = write_jsonl(tmp_path / "blank.jsonl", [{"text": "", "label": "a"}, {"text": "x", "label": None}])
    assert "all 2 rows dropped" in _error(path)


def test_empty_rows_are_counted_drops(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "", "label": "a"}, {"text": "x", "label": "a"}, {"text": "y", "label": ""}])
    split = _read(path)
    assert len(split.examples) == 1 and split.dropped == {"empty_text": 1, "empty_label": 1} and split.read == 3


def test_invalid_utf8_names_the_line(tmp_path):
    (tmp_path / "u.jsonl").write_bytes(b'{"text": "ok", "label": 1}\n{"text": "caf\xe9", "label": 2}\n')
    assert _error(tmp_path / "u.jsonl") == f"{tmp_path / 'u.jsonl'}:2: invalid UTF-8 at byte column 14"


def test_validation_label_unseen_in_training(tmp_path):
    train = write_jsonl(tmp_path / "t.jsonl", classify_rows())
    valid_path = write_jsonl(tmp_path / "v.jsonl", [{"text": "a", "label": "food"}, {"text": "b", "label": "music"}])
    with pytest.raises(DataError, match=rf"^{valid_path}:2: column 'label': label 'music' never appears in the training split"):
        _prepared(train, [valid_path])


def test_more_labels_than_rows_can_teach(tmp_path):
    rows = [{"text": f"row {i}", "label": f"id-{i}"} for i in range(6)]
    with pytest.raises(DataError, match="6 distinct labels in 6 rows"):
        _prepared(write_jsonl(tmp_path / "t.jsonl", rows))


def test_float_labels_mean_regression_and_ints_are_classes(tmp_path):
    floats = write_jsonl(tmp_path / "f.jsonl", [{"text": "a", "label": 0.5}, {"text": "b", "label": 2}])
    assert _prepared(floats).labels_record() == "regression"
    (tmp_path / "f.csv").write_text("text,label\na,0.25\nb,1\n")
    assert _prepared(tmp_path / "f.csv").labels_record() == "regression"
    ints = write_jsonl(tmp_path / "i.jsonl", [{"text": str(i), "label": i % 2} for i in range(6)])
    task = _prepared(ints)
    assert task.labels_record() == ["0", "1"] and task.metric == "accuracy"


def test_whole_float_ratings_are_a_regression_by_type_not_by_value(tmp_path):
    # a 1.0-5.0 rating: every value is whole, but the column holds floats (JSON 1.0, CSV "1.0", Parquet double)
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"text": f"review {i}", "label": float(1 + i % 5)} for i in range(20)]
    (tmp_path / "r.csv").write_text("text,label\n" + "".join(f"{r['text']},{r['label']:.1f}\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "r.parquet")
    for path in (write_jsonl(tmp_path / "r.jsonl", rows), tmp_path / "r.csv", tmp_path / "r.parquet"):
        task = _prepared(path)
        assert task.labels_record() == "regression" and task.metric == "pearson", path
        assert task.head_config() == {"num_labels": 1, "problem_type": "regression"}
    ints = write_jsonl(tmp_path / "i.jsonl", [{**r, "label": int(r["label"])} for r in rows])
    assert _prepared(ints).labels_record() == ["1", "2", "3", "4", "5"]  # integers are classes ...
    assert _prepared(ints, regression=True).labels_record() == "regression"  # ... unless --regression


def test_regression_flag_needs_numbers_and_a_sequence_task(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", classify_rows())
    with pytest.raises(DataError, match=rf"^{path}:1: column 'label': 'sport' is not a number"):
        _prepared(path, regression=True)
    with pytest.raises(DataError, match="--regression applies to classify and pair, not to --task tag"):
        tasks.of("tag", regression=True)


def test_metric_is_the_tasks_default_or_one_it_has(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", classify_rows())
    assert _prepared(path, metric="mcc").metric == "mcc"
    with pytest.raises(DataError, match=r"^--metric pearson: not a metric of --task classify \(one of: accuracy, macro_f1, mcc"):
        _prepared(path, metric="pearson")
    floats = write_jsonl(tmp_path / "f.jsonl", [{"text": "a", "label": 0.5}, {"text": "b", "label": 2.0}])
    with pytest.raises(DataError, match=r"--metric mse: not a metric of --task classify \(regression\)"):
        _prepared(floats, metric="mse")  # lower is better: not something to select the highest of
    tag = write_jsonl(tmp_path / "g.jsonl", tag_rows())
    assert _prepared(tag, kind="tag").metric == "entity_f1"


def test_tag_count_differs_from_token_count(tmp_path):
    rows = tag_rows() + [{"tokens": ["a", "b"], "tags": ["O"]}]
    path = write_jsonl(tmp_path / "g.jsonl", rows)
    assert _error(path, "tag").startswith(f"{path}:{len(rows)}: column 'tags' has 1 tags for 2 tokens")
    assert _read(path, "tag", skip_bad_rows=True).dropped == {"tag_count_differs": 1}
    train, other = write_jsonl(tmp_path / "t.jsonl", tag_rows()[:1]), write_jsonl(tmp_path / "o.jsonl", tag_rows()[1:2])
    with pytest.raises(DataError, match="tag 'I-PER' never appears"):
        _prepared(train, [other], kind="tag")


def test_answer_not_at_its_offsets(tmp_path):
    rows = span_rows()
    rows[1]["answers"]["answer_start"] = [0]
    path = write_jsonl(tmp_path / "s.jsonl", rows)
    assert _error(path, "span").startswith(f"{path}:2: column 'answers': answer 'Thames' is not at character 0 of the context (found 'The ri')")
    split = _read(path, "span", skip_bad_rows=True)
    assert split.dropped == {"answer_not_at_offset": 1} and len(split.examples) == len(rows) - 1


def test_csv_row_with_more_fields_than_the_header(tmp_path):
    (tmp_path / "x.csv").write_text("text,label\nfine,a\nnot,fine,b\n")
    assert _error(tmp_path / "x.csv") == f"{tmp_path / 'x.csv'}:3: 3 fields, the header has 2 (--skip-bad-rows counts such rows as drops instead)"


def test_csv_lists_are_json(tmp_path):
    (tmp_path / "g.csv").write_text('tokens,tags\n"[""Alice"", ""runs""]","[""B-PER"", ""O""]"\n')
    assert _read(tmp_path / "g.csv", "tag").examples[0]["tags"] == ["B-PER", "O"]


def test_integer_classes_from_csv_are_numbers_in_both_splits(tmp_path):
    (tmp_path / "t.csv").write_text("text,label\n" + "".join(f"row {i},{[2, 10][i % 2]}\n" for i in range(6)))
    (tmp_path / "v.csv").write_text("text,label\nq,10\n")
    task = tasks.of("classify")
    train, valid = _read(tmp_path / "t.csv"), _read(tmp_path / "v.csv")
    task.prepare(train, [valid])
    assert task.labels_record() == ["2", "10"]
    assert valid.examples[0]["label"] == 10


def test_span_keeps_questions_without_an_answer(tmp_path):
    rows = span_rows() + [{"question": "Who won?", "context": "Nobody said.", "answers": {"text": [], "answer_start": []}}]
    split = _read(write_jsonl(tmp_path / "s.jsonl", rows), "span")
    assert len(split.examples) == len(rows) and not split.dropped and split.examples[-1]["answers"] == []


def test_tags_in_no_scheme_are_one_line(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"tokens": ["Alice", "runs"], "tags": ["PER", "O"]}])
    with pytest.raises(DataError, match=rf"^{path}: column 'tags': tags are not IOB1, BIO or BIOES"):
        _prepared(path, kind="tag")
    iob1 = write_jsonl(tmp_path / "i.jsonl", [{"tokens": ["Alice", "Bob"], "tags": ["I-PER", "B-PER"]}])
    assert _prepared(iob1, kind="tag").scheme == "IOB1"


@pytest.mark.parametrize("kind,row,message", [
    ("classify", {"text": "a", "label": ["x"]}, "column 'label': ['x'] is not a label"),
    ("span", {"question": "q", "context": "c", "answers": {"text": "c", "answer_start": 0}}, "of two lists"),
    ("span", {"question": "q", "context": "c", "answers": ["c"]}, "is not an object"),
    ("tag", {"tokens": "Alice", "tags": "B-PER"}, "is not a JSON list/object"),
])
def test_a_value_of_the_wrong_shape_is_one_line(tmp_path, kind, row, message):
    path = write_jsonl(tmp_path / "x.jsonl", [row])
    assert message in _error(path, kind) and _error(path, kind).startswith(f"{path}:1: ")
