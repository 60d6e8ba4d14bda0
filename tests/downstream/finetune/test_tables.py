"""`clozeforge finetune` on users' delimited files: GLUE's unquoted TSV, a stray tab, an RFC 4180 CSV. Each row
is kept or dropped with a count, results.json reports every file's lines, records, examples and drops by reason
(read == kept + Σ dropped), and no example's text holds another row."""

from __future__ import annotations

import json
import os

import pytest

from downstream.finetune import tasks
from downstream.finetune.data import DataError, read_split
from tests.helpers import glue_tsv

SENTENCE = tasks.of("classify", tasks.Columns(text_column="sentence"))
CLASSIFY = tasks.of("classify")


def test_glue_tsv_rows_that_open_with_a_quote_are_examples_each(tmp_path):
    path, sentences = glue_tsv(tmp_path / "train.tsv")
    split = read_split(path, SENTENCE)
    assert [e["text"] for e in split.examples] == sentences
    assert not any("\t" in e["text"] or "\n" in e["text"] for e in split.examples)
    assert [e["label"] for e in split.examples] == [str(i % 2) for i in range(40)]
    report = split.report()
    assert {k: report[k] for k in ("format", "quoting", "lines", "read", "kept", "dropped", "examples")} == \
        {"format": "tsv", "quoting": "none", "lines": 41, "read": 40, "kept": 40, "dropped": {}, "examples": 40}


def test_a_stray_tab_is_a_counted_drop_with_its_line_or_one_line_naming_it(tmp_path):
    path, sentences = glue_tsv(tmp_path / "train.tsv", stray_tab_at=12)
    with pytest.raises(DataError, match=r"train.tsv:12: 3 fields, the header has 2 \(--skip-bad-rows"):
        read_split(path, SENTENCE)
    split = read_split(path, SENTENCE, skip_bad_rows=True)
    assert [e["text"] for e in split.examples] == sentences
    report = split.report()
    assert (report["read"], report["kept"], report["dropped"], report["dropped_at"]) == (41, 40, {"field_count": 1}, {"field_count": [12]})


def test_a_csv_quoted_field_with_a_comma_and_a_newline_is_one_example(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text('text,label\n"good, really, truly\nvery good",pos\nbad,neg\n,neg\n"fine",pos\n', encoding="utf-8")
    split = read_split(str(path), CLASSIFY)
    assert [(e["line"], e["text"], e["label"]) for e in split.examples] == \
        [(2, "good, really, truly\nvery good", "pos"), (4, "bad", "neg"), (6, "fine", "pos")]
    report = split.report()
    assert (report["lines"], report["read"], report["kept"], report["dropped"], report["multiline_records"]) == \
        (6, 4, 3, {"empty_text": 1}, 1)
    # the same file read as plain comma-separated lines: the quoted record's first line has 3 fields
    with pytest.raises(DataError, match=r"train.csv:2: 3 fields, the header has 2"):
        read_split(str(path), CLASSIFY, quoting="none")


@pytest.mark.integration  # fine-tunes a tiny model
def test_results_json_accounts_for_every_row_of_every_file(tmp_path, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("sklearn")
    from downstream.finetune.command import finetune_main

    from .finetune_assets import tiny_export

    hf = tiny_export(str(tmp_path))
    train, _ = glue_tsv(tmp_path / "train.tsv", stray_tab_at=5)
    dev = tmp_path / "dev.csv"
    dev.write_text('sentence,label\n"the film, at last\nis fine",1\n" the film number 3 is fine",0\n\n', encoding="utf-8")
    out = tmp_path / "out"
    flags = [hf, "--task", "classify", "--train", train, "--validation", str(dev), "--text-column", "sentence",
             "--output", str(out), "--seeds", "1", "--epochs", "1", "--lr", "1e-3", "--max-seq-len", "32", "--stride", "8"]
    assert finetune_main(flags) == 2  # the stray tab, without --skip-bad-rows
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{train}:5: 3 fields, the header has 2 (--skip-bad-rows" in err, err
    assert finetune_main([*flags, "--skip-bad-rows"]) == 0
    with open(os.path.join(out, "results.json")) as f:
        data = json.load(f)["data"]
    assert {k: data["train"][k] for k in ("format", "quoting", "lines", "read", "kept", "examples", "dropped", "dropped_at")} == \
        {"format": "tsv", "quoting": "none", "lines": 42, "read": 41, "kept": 40, "examples": 40,
         "dropped": {"field_count": 1}, "dropped_at": {"field_count": [5]}}
    assert {k: data["validation"][k] for k in ("format", "quoting", "lines", "read", "kept", "dropped", "multiline_records")} == \
        {"format": "csv", "quoting": "csv", "lines": 5, "read": 3, "kept": 2, "dropped": {"blank_line": 1}, "multiline_records": 1}
    for entry in data.values():
        assert entry["read"] == entry["kept"] + sum(entry["dropped"].values())
    with pytest.raises(SystemExit) as e:
        finetune_main([*flags, "--quoting", "tsv"])
    assert e.value.code == 2
