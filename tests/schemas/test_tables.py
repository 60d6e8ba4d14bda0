"""schemas/tables.py: every physical record of a user's table is kept or dropped with a counted reason, in every
format; a .tsv is read without quoting (GLUE's layout), a .csv with RFC 4180's; no record ever holds another."""

from __future__ import annotations

import json

import pytest

from schemas.tables import (
    Account,
    AccountingError,
    TableError,
    TableReading,
    read_table,
)
from tests.helpers import glue_tsv

SKIP = TableReading(skip_bad_rows=True)


def texts(table) -> list[str]:
    return [row["sentence"] if "sentence" in row else row["text"] for _, row in table.rows]


def test_a_glue_tsv_keeps_every_row_whole_whatever_its_quotes(tmp_path):
    path, sentences = glue_tsv(tmp_path / "train.tsv")
    table = read_table(path)
    assert texts(table) == sentences  # 40 rows, none merged: no text holds a tab, a newline or another row
    assert [line for line, _ in table.rows] == list(range(2, 42))
    a = table.account
    assert (a.format, a.quoting, a.lines, a.read, dict(a.dropped), a.multiline_records) == ("tsv", "none", 41, 40, {}, 0)


def test_a_stray_tab_is_one_line_or_a_counted_drop_at_its_line(tmp_path):
    path, sentences = glue_tsv(tmp_path / "train.tsv", stray_tab_at=7)
    with pytest.raises(TableError) as e:
        read_table(path)
    assert str(e.value) == f"{path}:7: 3 fields, the header has 2 (--skip-bad-rows counts such rows as drops instead)"
    table = read_table(path, SKIP)
    assert texts(table) == sentences
    a = table.account
    assert (a.lines, a.read, dict(a.dropped), a.dropped_at) == (42, 41, {"field_count": 1}, {"field_count": [7]})
    assert a.report(len(table.rows))["kept"] == 40


def test_csv_quoting_of_a_tsv_shows_the_runaway_quote(tmp_path):
    """--quoting csv on GLUE's file is the old reading: its merged records are drops or counted as multi-line,
    and the records it does keep are whole lines of the file."""
    path, sentences = glue_tsv(tmp_path / "train.tsv")
    table = read_table(path, TableReading(quoting="csv", skip_bad_rows=True))
    a = table.account
    assert a.quoting == "csv" and a.multiline_records > 0 and a.read < 40 and a.dropped["bad_quoting"] > 0
    assert a.read == len(table.rows) + sum(a.dropped.values())
    assert not any("\t" in text or "\n" in text for text in texts(table))


def test_a_csv_field_may_hold_a_comma_a_quote_and_a_newline(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text('text,label\n"hello, world\nsecond ""line""",1\nplain,0\n\nlast one,1\n', encoding="utf-8")
    table = read_table(str(path))
    assert [(line, row["text"]) for line, row in table.rows] == [(2, 'hello, world\nsecond "line"'), (4, "plain"), (6, "last one")]
    a = table.account
    assert (a.quoting, a.lines, a.read, dict(a.dropped), a.dropped_at, a.multiline_records) == \
        ("csv", 6, 4, {"blank_line": 1}, {"blank_line": [5]}, 1)
    # read without quoting, the same file is one record a line, split at every comma: what the user asked
    plain = read_table(str(path), TableReading(quoting="none"))
    assert [row["text"] for _, row in plain.rows] == ['"hello', 'second ""line"""', "plain", "last one"]
    assert (plain.account.read, dict(plain.account.dropped)) == (5, {"blank_line": 1})


def test_a_bad_quote_in_a_csv_is_one_line_or_a_drop_and_the_next_rows_are_read(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('text,label\n"a"b,1\nok,0\n"never closed,1\nlost,0\n', encoding="utf-8")
    with pytest.raises(TableError) as e:
        read_table(str(path))
    assert str(e.value).startswith(f"{path}:2: ") and "--quoting none" in str(e.value)
    table = read_table(str(path), SKIP)
    assert [row["text"] for _, row in table.rows] == ["ok"]
    assert table.account.dropped_at == {"bad_quoting": [2, 4]}  # the unclosed quote runs to the end: one record


def test_a_long_csv_field_is_data_and_a_bad_header_is_one_line(tmp_path):
    long = "word " * 40_000  # 200,000 characters: over the csv module's default field limit
    (tmp_path / "long.csv").write_text(f'text,label\n"{long}",1\n', encoding="utf-8")
    assert read_table(str(tmp_path / "long.csv")).rows == [(2, {"text": long, "label": "1"})]
    (tmp_path / "head.csv").write_text('"text"x,label\nok,1\n', encoding="utf-8")
    with pytest.raises(TableError, match=r"head.csv:1: .*; this is the header"):
        read_table(str(tmp_path / "head.csv"), SKIP)


def test_jsonl_and_parquet_count_every_record(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "a"}\n\n[1, 2]\n{"text": "b"\n{"text": "c"}\n', encoding="utf-8")
    with pytest.raises(TableError, match=r"t.jsonl:3: expected a JSON object, got list \(--skip-bad-rows"):
        read_table(str(path))
    table = read_table(str(path), SKIP)
    assert [row["text"] for _, row in table.rows] == ["a", "c"]
    assert (table.account.read, table.account.dropped_at) == (5, {"blank_line": [2], "bad_json": [4], "not_an_object": [3]})
    pq.write_table(pa.Table.from_pylist([{"text": "x"}, {"text": "y"}]), tmp_path / "t.parquet")
    table = read_table(str(tmp_path / "t.parquet"))
    assert [(line, row["text"]) for line, row in table.rows] == [(1, "x"), (2, "y")]
    assert (table.account.format, table.account.read, table.account.lines) == ("parquet", 2, 2)
    assert "quoting" not in table.account.report(2)


def test_whole_file_problems_are_one_line(tmp_path):
    (tmp_path / "latin.tsv").write_bytes(b"text\tlabel\ncaf\xe9\t1\n")
    assert str(pytest.raises(TableError, read_table, str(tmp_path / "latin.tsv")).value) == \
        f"{tmp_path / 'latin.tsv'}:2: invalid UTF-8 at byte column 4"
    assert read_table(str(tmp_path / "latin.tsv"), encoding="latin-1").rows[0][1]["text"] == "café"
    (tmp_path / "bin.csv").write_bytes(b"text,label\n\x00\x01")
    assert "a binary file" in str(pytest.raises(TableError, read_table, str(tmp_path / "bin.csv")).value)
    (tmp_path / "twice.tsv").write_text("text\ttext\nx\ty\n")
    assert str(pytest.raises(TableError, read_table, str(tmp_path / "twice.tsv")).value) == \
        f"{tmp_path / 'twice.tsv'}:1: the header names column 'text' twice"
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    assert "not a Parquet file" in str(pytest.raises(TableError, read_table, str(tmp_path / "bad.parquet")).value)
    assert "no such file" in str(pytest.raises(TableError, read_table, str(tmp_path / "none.tsv")).value)


def test_txt_is_one_text_a_line_and_the_default_format_is_the_callers(tmp_path):
    (tmp_path / "texts").write_text("one\n\n two \r\n")
    table = read_table(str(tmp_path / "texts"), default_format="txt")
    assert [(line, row["text"]) for line, row in table.rows] == [(1, "one"), (3, " two ")]
    assert dict(table.account.dropped) == {"blank_line": 1}
    (tmp_path / "rows").write_text(json.dumps({"text": "j"}) + "\n")
    assert read_table(str(tmp_path / "rows")).account.format == "jsonl"


def test_the_check_fails_on_a_lost_or_doubled_record():
    account = Account(format="tsv", read=3)
    account.drop("field_count", 2)
    account.check(2, "f.tsv")
    with pytest.raises(AccountingError, match="f.tsv: accounting mismatch: read 3 records, kept 1, dropped 1"):
        account.check(1, "f.tsv")


def test_quoting_is_checked():
    with pytest.raises(ValueError, match="--quoting must be one of auto, none, csv, got 'tsv'"):
        TableReading(quoting="tsv")
