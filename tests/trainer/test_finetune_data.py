"""trainer.downstream.finetune.data: each kind of bad input is one line naming file, line and column, or a
counted drop; good input in every format gives the same examples."""

from __future__ import annotations

import json

import pytest

from trainer.downstream.finetune.data import Columns, DataError, check_labels, label_map, read_split, tag_map

from .finetune_assets import classify_rows, span_rows, tag_rows, write_jsonl

COLUMNS = Columns()


def _error(path, task="classify", **kwargs) -> str:
    with pytest.raises(DataError) as e:
        read_split(str(path), task, COLUMNS, **kwargs)
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
    got = [[(e["text"], e["label"]) for e in read_split(str(tmp_path / f"a.{ext}"), "classify", COLUMNS).examples]
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
    split = read_split(path, "classify", COLUMNS)
    assert len(split.examples) == 1 and split.dropped == {"empty_text": 1, "empty_label": 1} and split.read == 3


def test_invalid_utf8_names_the_line(tmp_path):
    (tmp_path / "u.jsonl").write_bytes(b'{"text": "ok", "label": 1}\n{"text": "caf\xe9", "label": 2}\n')
    assert _error(tmp_path / "u.jsonl") == f"{tmp_path / 'u.jsonl'}:2: invalid UTF-8 at byte column 14"


def test_validation_label_unseen_in_training(tmp_path):
    train = read_split(write_jsonl(tmp_path / "t.jsonl", classify_rows()), "classify", COLUMNS)
    valid_path = write_jsonl(tmp_path / "v.jsonl", [{"text": "a", "label": "food"}, {"text": "b", "label": "music"}])
    valid = read_split(valid_path, "classify", COLUMNS)
    labels = label_map(train, "label")
    with pytest.raises(DataError, match=rf"^{valid_path}:2: column 'label': label 'music' never appears in the training split"):
        check_labels(valid, labels, "label")


def test_more_labels_than_rows_can_teach(tmp_path):
    rows = [{"text": f"row {i}", "label": f"id-{i}"} for i in range(6)]
    train = read_split(write_jsonl(tmp_path / "t.jsonl", rows), "classify", COLUMNS)
    with pytest.raises(DataError, match="6 distinct labels in 6 rows"):
        label_map(train, "label")


def test_float_labels_mean_regression_and_ints_are_classes(tmp_path):
    floats = read_split(write_jsonl(tmp_path / "f.jsonl", [{"text": "a", "label": 0.5}, {"text": "b", "label": 2}]),
                        "classify", COLUMNS)
    assert label_map(floats, "label") is None
    (tmp_path / "f.csv").write_text("text,label\na,0.25\nb,1\n")
    assert label_map(read_split(str(tmp_path / "f.csv"), "classify", COLUMNS), "label") is None
    ints = read_split(write_jsonl(tmp_path / "i.jsonl", [{"text": str(i), "label": i % 2} for i in range(6)]), "classify", COLUMNS)
    assert label_map(ints, "label").labels == [0, 1]


def test_tag_count_differs_from_token_count(tmp_path):
    rows = tag_rows() + [{"tokens": ["a", "b"], "tags": ["O"]}]
    path = write_jsonl(tmp_path / "g.jsonl", rows)
    assert _error(path, "tag").startswith(f"{path}:{len(rows)}: column 'tags' has 1 tags for 2 tokens")
    assert read_split(path, "tag", COLUMNS, skip_bad_rows=True).dropped == {"tag_count_differs": 1}
    train = read_split(write_jsonl(tmp_path / "t.jsonl", tag_rows()[:1]), "tag", COLUMNS)
    other = read_split(write_jsonl(tmp_path / "o.jsonl", tag_rows()[1:2]), "tag", COLUMNS)
    with pytest.raises(DataError, match="tag 'I-PER' never appears"):
        tag_map(train, [other], "tags")


def test_answer_not_at_its_offsets(tmp_path):
    rows = span_rows()
    rows[1]["answers"]["answer_start"] = [0]
    path = write_jsonl(tmp_path / "s.jsonl", rows)
    assert _error(path, "span").startswith(f"{path}:2: column 'answers': answer 'Thames' is not at character 0 of the context (found 'The ri')")
    split = read_split(path, "span", COLUMNS, skip_bad_rows=True)
    assert split.dropped == {"answer_not_at_offset": 1} and len(split.examples) == len(rows) - 1


def test_csv_row_with_more_fields_than_the_header(tmp_path):
    (tmp_path / "x.csv").write_text("text,label\nfine,a\nnot,fine,b\n")
    assert _error(tmp_path / "x.csv") == f"{tmp_path / 'x.csv'}:3: 3 fields, the header has 2 (--skip-bad-rows counts such rows as drops instead)"


def test_csv_lists_are_json(tmp_path):
    (tmp_path / "g.csv").write_text('tokens,tags\n"[""Alice"", ""runs""]","[""B-PER"", ""O""]"\n')
    assert read_split(str(tmp_path / "g.csv"), "tag", COLUMNS).examples[0]["tags"] == ["B-PER", "O"]


def test_integer_classes_from_csv_are_numbers_in_both_splits(tmp_path):
    (tmp_path / "t.csv").write_text("text,label\n" + "".join(f"row {i},{[2, 10][i % 2]}\n" for i in range(6)))
    (tmp_path / "v.csv").write_text("text,label\nq,10\n")
    train = read_split(str(tmp_path / "t.csv"), "classify", COLUMNS)
    labels = label_map(train, "label")
    assert labels.labels == [2, 10]
    valid = read_split(str(tmp_path / "v.csv"), "classify", COLUMNS)
    check_labels(valid, labels, "label")
    assert valid.examples[0]["label"] == 10
