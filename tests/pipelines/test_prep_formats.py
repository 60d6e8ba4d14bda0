"""prep end to end on the formats users have, each a real file: gensim's enwiki dump, WikiExtractor's output of it (its
`<doc>` files and its --json files, extensionless), the dump as a multistream dump with its index, a CSV of its articles, a WARC/WET of real pages (split at its gzip members) and a `datasets`
directory: the same documents, ids and report on one worker and on two with every splittable file cut in ranges; every
reader's drops counted per input file. And the README's section "The corpora BERT and RoBERTa used", run as written."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil

import pyarrow as pa
import pytest

from pipelines import prep
from pipelines.documents import splits
from pipelines.outputs.shards import read_clean_shard
from tests.helpers import ROOT
from tests.pipelines.corpus_files import gensim_dump, multistream_dump, sample_warc, wikiextractor

pytestmark = pytest.mark.integration  # Beam worker processes, WikiExtractor runs

SMALL = ("--vocab-size", "400", "--max-seq-len", "64", "--validation-fraction", "0.1", "--rows-per-shard", "200",
         "--batch-rows", "32", "--progress", "never")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("formats")
    (root / "wiki").mkdir()
    shutil.copy(gensim_dump(), root / "wiki" / os.path.basename(gensim_dump()))
    multistream_dump(root / "wiki")  # split by its bz2 streams under --split-bytes; its index is no input
    wikiextractor(gensim_dump(), str(root / "we"))
    json_files = wikiextractor(gensim_dump(), str(root / "wejson"), "--json")
    articles = [json.loads(line) for f in json_files for line in open(f, encoding="utf-8")]
    (root / "tables").mkdir()
    with open(root / "tables" / "articles.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, ["id", "title", "text"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(articles[::3])
    (root / "web").mkdir()
    sample_warc(str(root / "web" / "crawl.warc.gz"))
    (root / "hf").mkdir()  # save_to_disk's layout: Arrow stream files and two JSON files, which prep leaves out
    table = pa.table({"text": [a["text"] for a in articles[1::3]], "id": [a["id"] for a in articles[1::3]]})
    with pa.ipc.new_stream(root / "hf" / "data-00000-of-00001.arrow", table.schema) as writer:
        writer.write_table(table, max_chunksize=10)
    (root / "hf" / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (root / "hf" / "dataset_info.json").write_text("{}")
    return str(root)


def _run(corpus: str, out: str, *extra: str) -> dict:
    inputs = [a for name in ("wiki", "we", "wejson", "tables", "web", "hf") for a in ("--input", f"{name}={corpus}/{name}")]
    return prep.run([*inputs, "--output", out, *SMALL, *extra])


def _ids(out: str) -> list[tuple[str, str]]:
    shards = sorted(os.path.join(out, "clean", n) for n in os.listdir(os.path.join(out, "clean")) if n.endswith(".parquet"))
    return sorted((os.path.relpath(d.path, out), d.doc_id) for s in shards for d in read_clean_shard(s))


def test_every_format_reads_alike_on_one_worker_and_on_two_with_forced_splits(corpus, tmp_path):
    one = _run(corpus, str(tmp_path / "one"))
    two = _run(corpus, str(tmp_path / "two"), "--split-bytes", "20000", "--direct_num_workers", "2",
               "--direct_running_mode", "multi_processing")
    assert one["files"] == two["files"] and one["total"] == two["total"]
    ids = [doc_id for _, doc_id in _ids(str(tmp_path / "one"))]
    assert ids and sorted(ids) == sorted(doc_id for _, doc_id in _ids(str(tmp_path / "two")))
    files = {path.split(corpus, 1)[1]: stats for path, stats in one["files"].items()}
    for name in (os.path.basename(gensim_dump()), "enwiki-20160407-pages-articles-multistream.xml.bz2"):
        dump = files[f"/wiki/{name}"]
        assert dump["read"] == 206 and {k: dump["dropped"][k] for k in ("redirect", "disambiguation", "namespace")} == \
            {"redirect": 99, "disambiguation": 8, "namespace": 1}
    assert not any(p.endswith("-index.txt.bz2") for p in files)
    assert sum(s["read"] for p, s in files.items() if p.startswith("/we/")) == 106
    assert files["/web/crawl.warc.gz"]["dropped"]["http_status"] == 1 and files["/web/crawl.warc.gz"]["kept"] >= 5
    assert len(splits.plan(f"{corpus}/web/crawl.warc.gz", "warc", 20000, "document")) >= 2  # split at gzip members
    assert not any(p.endswith(("state.json", "dataset_info.json")) for p in files) and files["/hf/data-00000-of-00001.arrow"]["kept"]
    for path, stats in files.items():  # every record kept or dropped, per file
        assert stats["read"] == stats["kept"] + sum(stats["dropped"].values()), path
    docs = [d for n in os.listdir(tmp_path / "one" / "clean") if n.endswith(".parquet")
            for d in read_clean_shard(str(tmp_path / "one" / "clean" / n))]
    meta = {d.path.split(corpus, 1)[1].split("/")[1]: dict(d.meta) for d in docs}  # one per input folder
    assert set(meta["web"]) >= {"url"} and set(meta["wiki"]) == {"title", "page_id"} and meta["tables"] == {}
    assert any(dict(d.meta).get("language") == "eng" for d in docs)  # the WET records'


def test_a_run_without_a_metadata_format_writes_the_clean_schema_of_before(corpus, tmp_path):
    import pyarrow.parquet as pq

    from schemas.clean import clean_doc_schema

    prep.run(["--input", f"tables={corpus}/tables", "--output", str(tmp_path / "out"), *SMALL])
    schemas = [pq.read_schema(tmp_path / "out" / "clean" / n) for n in os.listdir(tmp_path / "out" / "clean")]
    assert schemas and all(s.names == clean_doc_schema().names and "meta" not in s.names for s in schemas)
    assert {s.metadata[b"clozeforge.format_version"] for s in schemas} == {b"2"}


def test_the_readme_section_runs_as_written(tmp_path, monkeypatch):
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    text = readme.split("\n## The corpora BERT and RoBERTa used\n", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in re.findall(r"^clozeforge prep .*$", text, re.M)]
    assert len(commands) == 2
    shutil.copy(gensim_dump(), tmp_path / "enwiki-20160407-pages-articles1.xml-p10p30302.bz2")
    (tmp_path / "books").mkdir()
    for f in wikiextractor(gensim_dump(), str(tmp_path / "we")):  # stand-ins for books: real prose, one a file
        (tmp_path / "books" / f"{os.path.basename(f)}.txt").write_text(re.sub(r"</?doc[^>]*>", "", open(f).read()))
    sample_warc(str(tmp_path / "CC-MAIN-20160407-00000.warc.wet.gz"))
    monkeypatch.chdir(tmp_path)
    for command in commands:
        report = prep.run(shlex.split(command)[2:] + ["--progress", "never"])
        assert report["total"]["kept"] > 0
    assert set(json.load(open(tmp_path / "xlmr-data" / "report.json"))["languages"]) >= {"en", "ja"}
