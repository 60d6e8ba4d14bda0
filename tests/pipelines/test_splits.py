"""Splittable reading: a file read in byte ranges (or Parquet row groups) gives the records, line numbers, ids
and drops of the whole file read by one reader, at any split size; prep's outputs do not depend on it."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.documents import splits
from pipelines.documents.readers import ReadConfig, file_format, read_file


def read_in_splits(path: str, config: ReadConfig) -> list:
    planned = splits.plan(path, file_format(path), config.split_bytes, config.txt_mode)
    if planned is None:
        return list(read_file("s", path, config))
    if file_format(path) != "parquet":
        planned = splits.number_ranges((s, splits.count_newlines(path, s)) for s in planned)
    return [item for split in planned for item in read_file("s", path, config, split)]


LINES = [
    json.dumps({"text": "first document, short."}),
    "",  # a blank line between records is no record
    json.dumps({"text": "x" * 300}),  # longer than the smallest split sizes below
    "{not json",
    json.dumps({"text": "a" * 5000}),  # over --max-record-bytes below
    json.dumps({"text": "ünïcödé text spans bytes"}),
    json.dumps({"text": 7}),
    json.dumps({"text": "last line, no newline after it"}),
]


@pytest.mark.parametrize("trailing_newline", [True, False])
def test_any_split_size_reads_what_the_whole_file_reads(tmp_path, trailing_newline):
    path = str(tmp_path / "big.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(LINES) + ("\n" if trailing_newline else ""))
    size = os.path.getsize(path)
    whole = list(read_file("s", path, ReadConfig(max_record_bytes=4096)))
    assert [d.line for d in whole] == [1, 3, 4, 5, 6, 7, 8] and len({d.doc_id for d in whole if hasattr(d, "doc_id")}) == 4
    for split_bytes in (1, 2, 7, 23, 24, 25, 100, 301, size - 1, size):
        config = ReadConfig(max_record_bytes=4096, split_bytes=split_bytes)
        assert read_in_splits(path, config) == whole, split_bytes


def test_txt_lines_split_and_paragraphs_stay_whole(tmp_path):
    path = str(tmp_path / "big.txt")
    with open(path, "w") as f:
        f.write("one line\n\nthree lines\nfour\n\n\nseven is the last\n")
    lines = ReadConfig(txt_mode="line", split_bytes=5)
    assert splits.plan(path, "txt", 5, "line") is not None
    assert read_in_splits(path, lines) == list(read_file("s", path, lines))
    assert splits.plan(path, "txt", 5, "paragraph") is None and splits.plan(path, "txt", 5, "document") is None
    assert splits.plan(path + ".gz", "txt", 5, "line") is None


def test_parquet_is_read_by_row_group(tmp_path):
    path = str(tmp_path / "big.parquet")
    texts = [f"document number {i}" if i % 5 else None for i in range(23)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=4)
    planned = splits.plan(path, "parquet", 1 << 20, "document")
    assert planned is not None and len(planned) == 6 and planned[-1].before == 20
    config = ReadConfig()
    whole = list(read_file("s", path, config))
    assert len(whole) == 23 and read_in_splits(path, config) == whole
    missing = ReadConfig(text_field="body")
    assert read_in_splits(path, missing) == list(read_file("s", path, missing))


@pytest.mark.integration
def test_one_large_file_on_two_workers_gives_the_outputs_of_one_reader_and_of_many_files(corpus_dir, tmp_path):
    from pipelines import prep
    from tests.helpers import digest_tree

    docs = []
    for name in ("part-0.jsonl", "part-1.jsonl"):
        with open(os.path.join(corpus_dir, name)) as f:
            docs += f.read().splitlines()
    big = tmp_path / "one" / "corpus.jsonl"
    big.parent.mkdir()
    big.write_text("\n".join(docs) + "\n")
    many = tmp_path / "many"
    many.mkdir()
    for i in range(0, len(docs), 5):
        (many / f"part-{i:04d}.jsonl").write_text("\n".join(docs[i:i + 5]) + "\n")

    common = ["--vocab-size", "800", "--validation-fraction", "0.1", "--rows-per-shard", "300", "--bucket-docs", "20"]
    two = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]
    split_bytes = str(os.path.getsize(big) // 9)
    split = prep.run(["--input", f"docs={big}", "--output", str(tmp_path / "split"), "--split-bytes", split_bytes, *common, *two])
    whole = prep.run(["--input", f"docs={big}", "--output", str(tmp_path / "whole"), *common])
    spread = prep.run(["--input", f"docs={many}/*.jsonl", "--output", str(tmp_path / "spread"), *common])

    # ranges of one file: the same bytes, report included, as one reader of the whole file (the config that
    # they record says where they went and how they were split)
    without_config = lambda body: {k: v for k, v in body.items() if k != "config"}
    assert without_config(split) == without_config(whole) and split["unbalanced"] == []
    digests = [digest_tree(str(tmp_path / out)) for out in ("split", "whole")]
    assert digests[0].pop("pairs/manifest.json") != digests[1].pop("pairs/manifest.json")
    assert digests[0] == digests[1]
    manifests = [json.loads((tmp_path / out / "pairs" / "manifest.json").read_text()) for out in ("split", "whole")]
    assert without_config(manifests[0]) == without_config(manifests[1])
    # the same text in many files: the same records and vocabulary (doc ids, and so pairs, name their file)
    assert spread["total"] == whole["total"] and spread["vocab"] == whole["vocab"]
    for name in ("vocab.txt", "tokenizer.json"):
        assert (tmp_path / "spread" / "vocab" / name).read_bytes() == (tmp_path / "whole" / "vocab" / name).read_bytes()
    texts = {}
    for out in ("whole", "spread"):
        table = pa.concat_tables(pq.read_table(str(p)) for p in sorted((tmp_path / out / "clean").glob("*.parquet")))
        texts[out] = sorted(map(str, table.column("sentences").to_pylist()))
    assert texts["whole"] == texts["spread"] and texts["whole"]


def test_a_bad_split_size_names_its_flag(tmp_path):
    from pipelines import config as prep_config
    from pipelines import prep
    from pipelines.errors import PrepError

    args = prep.parser().parse_known_args(["--input", "x", "--output", str(tmp_path), "--split-bytes", "0"])[0]
    with pytest.raises(PrepError, match=r"^--split-bytes must be a positive number of bytes, got 0$"):
        prep_config.from_args(args)
