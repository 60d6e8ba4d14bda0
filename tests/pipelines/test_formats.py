"""The reader table (schemas/formats.py) and prep's readers of each format, on real files: gensim's enwiki dump,
WikiExtractor's two output forms made from it, WARC/WET files of real pages, CSV/TSV and Arrow tables of its articles;
and every bad input (a cut .bz2, a dump cut mid-page, a WARC record with a wrong length, a page in Shift_JIS, a CSV
without the column) a counted drop or one line."""

from __future__ import annotations

import bz2
import collections
import csv
import dataclasses
import gzip
import json
import lzma
import re

import pyarrow as pa
import pytest
import zstandard

from pipelines.documents.formats import READERS
from pipelines.documents.formats.warc import html_text
from pipelines.documents.readers import ReadConfig, file_format, read_file
from pipelines.documents.records import Drop, Event, RawDoc, make_doc_id
from pipelines.errors import PrepError
from schemas import formats
from schemas.tables import TABLE_FORMATS, TableReading, read_table
from tests.pipelines.corpus_files import gensim_dump, man_page_html, multistream_dump, pydoc_page, sample_warc, wikiextractor, write_warc

MARKUP = re.compile(r"\{\{|\[\[|<ref|\|-")


def tally(path, config=ReadConfig(), name="in"):  # noqa: B008 - frozen
    items = list(read_file(name, path, config))
    docs = [i for i in items if isinstance(i, RawDoc)]
    return docs, collections.Counter(i.reason for i in items if isinstance(i, Drop)), [i for i in items if isinstance(i, Event)]


def test_every_format_has_a_prep_reader_and_every_table_format_a_table_reader():
    assert set(formats.FORMATS) == set(READERS) | {"txt", "jsonl", "parquet"}
    assert {f.name for f in formats.FORMATS.values() if f.table} == set(TABLE_FORMATS)


@pytest.mark.parametrize(("name", "head", "expected"), [
    ("corpus.csv.bz2", None, "csv"), ("a.tsv.xz", None, "tsv"), ("c.warc.wet.gz", None, "warc"), ("x.warc", None, "warc"),
    ("data-00000-of-00001.arrow", None, "arrow"), ("pages-articles.xml.bz2", None, "mediawiki"),
    ("enwiki-pages-articles1.xml-p10p30302.bz2", b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">', "mediawiki"),
    ("AA/wiki_00", b'<doc id="12" url="https://en.wikipedia.org/wiki?curid=12" title="Anarchism">\n', "wikiextractor"),
    ("AA/wiki_00", b'{"id": "12", "title": "Anarchism", "text": "Anarchism is"}\n', "jsonl"),
    ("crawl-00001", b"WARC/1.0\r\nWARC-Type: warcinfo\r\n", "warc"), ("README", b"plain words\n", "txt"),
    ("photo.png", b"\x89PNG\r\n", None),
])
def test_a_file_is_recognised_by_suffix_then_by_its_first_bytes(name, head, expected):
    found = formats.format_of(name, head)
    assert (found.name if found else None) == expected


@pytest.fixture(scope="module")
def articles() -> list[dict]:
    """The dump's articles as prep reads them (real text; `id` its record's line, the page id)."""
    return [{"id": str(d.line), "title": d.text.split("\n", 1)[0], "text": d.text.split("\n\n", 1)[1]}
            for d in tally(gensim_dump())[0]]


@pytest.mark.parametrize("suffix", [".gz", ".zst", ".bz2", ".xz"])
def test_every_compression_reads_alike_and_a_cut_stream_is_counted(tmp_path, articles, suffix):
    compress = {".gz": gzip.compress, ".zst": zstandard.ZstdCompressor().compress, ".bz2": bz2.compress, ".xz": lzma.compress}[suffix]
    data = "".join(json.dumps({"text": a["text"]}) + "\n" for a in articles[:40]).encode()
    whole, cut = tmp_path / f"a.jsonl{suffix}", tmp_path / f"cut.jsonl{suffix}"
    whole.write_bytes(compress(data))
    cut.write_bytes(compress(data)[: len(compress(data)) * 2 // 3])
    docs, drops, events = tally(str(whole))
    assert [d.text for d in docs] == [a["text"] for a in articles[:40] if a["text"].strip()] and not events
    kept, drops, events = tally(str(cut))  # bz2 and xz hand out whole blocks only: fewer records survive a cut
    assert [d.text for d in kept] == [d.text for d in docs[: len(kept)]] and len(kept) < len(docs)
    assert [e.kind for e in events] == ["truncated_stream"]


def test_the_dump_keeps_articles_and_counts_each_page_it_drops():
    docs, drops, events = tally(gensim_dump(), name="wiki")
    assert drops == {"redirect": 99, "disambiguation": 8, "namespace": 1, "empty_text": 1} and len(docs) == 97 and not events
    assert docs[0].text.startswith("Anarchism\n\nAnarchism is a political philosophy")
    assert docs[0].doc_id == make_doc_id(f"wiki/{gensim_dump()}", "page:12")  # the page id, not its place
    assert dict(docs[0].meta) == {"title": "Anarchism", "page_id": "12"}  # what the page says of itself, kept
    assert all(d.text.startswith(dict(d.meta)["title"] + "\n\n") for d in docs)
    words = sum(len(d.text.split()) for d in docs)
    left = sum(len(MARKUP.findall(d.text)) for d in docs)
    assert words > 400_000 and left <= words / 1000, (left, words)
    assert not any("Category:" in d.text or "thumb|" in d.text for d in docs)
    assert "\n\nEtymology and terminology\n\n" in docs[0].text  # a section title is a paragraph of its own


def test_wiki_namespaces_keeps_more_and_an_old_export_schema_reads_alike(tmp_path):
    fast = ReadConfig(max_record_bytes=60_000)  # the long articles dropped unread: these tests read the rest fast
    assert tally(gensim_dump(), dataclasses.replace(fast, wiki_namespaces="0,4"))[1]["namespace"] == 0
    xml = bz2.decompress(open(gensim_dump(), "rb").read())
    old = re.sub(rb"\s*<ns>\d+</ns>", b"", xml.replace(b"export-0.10", b"export-0.3"))  # 0.3 had no <ns>
    (tmp_path / "new.xml").write_bytes(xml)
    (tmp_path / "old.xml").write_bytes(old)
    assert tally(str(tmp_path / "old.xml"), fast)[1] == tally(str(tmp_path / "new.xml"), fast)[1]


def test_a_cut_dump_keeps_the_pages_before_the_cut_and_counts_it(tmp_path):
    data = open(gensim_dump(), "rb").read()
    (tmp_path / "cut.xml.bz2").write_bytes(data[: len(data) // 2])
    fast = ReadConfig(max_record_bytes=60_000)  # the long articles dropped unread
    docs, drops, events = tally(str(tmp_path / "cut.xml.bz2"), fast)
    assert 0 < len(docs) < 97 and drops["truncated_stream"] == 1 and [e.kind for e in events] == ["truncated_stream"]
    xml = bz2.decompress(data)
    (tmp_path / "mid-page.xml").write_bytes(xml[: xml.index(b"<page>", len(xml) // 2) + 200])
    docs, drops, events = tally(str(tmp_path / "mid-page.xml"), fast)
    assert 0 < len(docs) < 97 and drops["bad_xml"] == 1
    with pytest.raises(PrepError, match=r"mid-page.xml:\d+: bad xml"):
        tally(str(tmp_path / "mid-page.xml"), ReadConfig(strict=True))


@pytest.mark.integration  # runs WikiExtractor
def test_both_wikiextractor_forms_read_as_its_articles(tmp_path):
    dump = gensim_dump()
    docs_files = wikiextractor(dump, str(tmp_path / "docs"))
    json_files = wikiextractor(dump, str(tmp_path / "json"), "--json")
    assert all(file_format(p) == "wikiextractor" for p in docs_files) and all(file_format(p) == "jsonl" for p in json_files)
    blocks = [d for p in docs_files for d in tally(p)[0]]
    records = [d for p in json_files for d in tally(p, ReadConfig(id_field="id"))[0]]
    assert len(blocks) == 106  # WikiExtractor keeps the 8 disambiguation pages
    bodies = [b.text.split("\n", 1)[1].split() for b in blocks if "\n" in b.text]  # its title line first
    assert bodies == [r.text.split() for r in records] and len(records) == 105  # one page is its title alone
    (tmp_path / "wiki_00.bz2").write_bytes(bz2.compress(open(docs_files[0], "rb").read()))
    assert [d.text for d in tally(str(tmp_path / "wiki_00.bz2"))[0]] == [d.text for d in tally(docs_files[0])[0]]


def test_csv_and_tsv_read_each_record_and_a_missing_column_is_one_line(tmp_path, articles):
    rows = [{"title": a["title"], "text": a["text"]} for a in articles[:30]]
    with open(tmp_path / "a.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, ["title", "text"])
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / "a.tsv").write_text("title\ttext\n" + "".join(f"{r['title']}\t{r['text'].replace(chr(10), ' ')}\n" for r in rows)
                                    + "only one field\n")
    with open(tmp_path / "a.csv", "a", encoding="utf-8") as f:
        f.write('x,"a "bad" quote"\n')  # a quote inside a quoted field that is not doubled
    docs, drops, _ = tally(str(tmp_path / "a.csv"))
    assert [d.text for d in docs] == [r["text"] for r in rows if r["text"].strip()] and drops == {"bad_quoting": 1}
    table = read_table(str(tmp_path / "a.csv"), TableReading(skip_bad_rows=True))  # finetune's reader agrees
    assert [row["text"] for _, row in table.rows if row["text"].strip()] == [d.text for d in docs]
    assert table.account.dropped == {"bad_quoting": 1}
    docs, drops, _ = tally(str(tmp_path / "a.tsv"))
    assert len(docs) == sum(bool(r["text"].strip()) for r in rows) and drops == {"field_count": 1}
    with pytest.raises(PrepError, match=r"a.csv:1: no column 'body' \(columns: title, text; name yours with --text-field\)"):
        tally(str(tmp_path / "a.csv"), ReadConfig(text_field="body"))


def test_a_bad_wiki_namespaces_is_one_line():
    with pytest.raises(PrepError, match=r"^--wiki-namespaces 0,talk: not a comma-separated list of numbers$"):
        ReadConfig(wiki_namespaces="0,talk")


def test_a_datasets_arrow_file_reads_row_by_row(tmp_path, articles):
    table = pa.table({"text": [a["text"] for a in articles[:20]] + [None], "id": [a["id"] for a in articles[:20]] + ["x"]})
    with pa.ipc.new_stream(tmp_path / "data-00000-of-00001.arrow", table.schema) as writer:  # what save_to_disk writes
        for batch in table.to_batches(max_chunksize=7):
            writer.write_batch(batch)
    docs, drops, _ = tally(str(tmp_path / "data-00000-of-00001.arrow"))
    assert [d.text for d in docs] == [a["text"] for a in articles[:20] if a["text"].strip()] and drops["null_text"] == 1
    assert docs[0].doc_id == make_doc_id(f"in/{tmp_path}/data-00000-of-00001.arrow", f"1:{articles[0]['id']}")


def test_warc_pages_are_extracted_as_the_extractor_does_and_the_rest_counted(tmp_path):
    expected = sample_warc(str(tmp_path / "crawl.warc.gz"))
    docs, drops, events = tally(str(tmp_path / "crawl.warc.gz"))
    assert drops == expected and not events
    pages = [d.text for d in docs]
    assert pages[0] == html_text(pydoc_page("json"), "utf-8").strip() and "JavaScript" in pages[0]
    ja = html_text(man_page_html("ja", "shift_jis"), "shift_jis")
    assert ja.strip() in pages and re.search(r"[\u3040-\u30ff]", ja)  # kana: Shift_JIS decoded, not mojibake
    assert "JSON (JavaScript Object Notation) is a subset of JavaScript syntax." in pages  # a WET record
    plain = str(tmp_path / "crawl.warc")
    sample_warc(plain, gzip=False)
    assert [d.doc_id for d in tally(plain, name="in")[0]] != [] and len(tally(plain)[0]) == len(docs)


def _resiliparse_own(path: str) -> dict[str, str]:
    """{WARC-Record-ID: text} for each 200 HTML response of a WARC, as resiliparse's own documented route gives it,
    the records parsed by another parser (warcio): the HTTP header's charset, else resiliparse's detect_encoding;
    bytes_to_str; extract_plain_text with the one option prep sets (main_content=True: its default, False, keeps
    navigation and the page's boilerplate), the ends stripped as prep strips every document."""
    pytest.importorskip("resiliparse")
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    from warcio.archiveiterator import ArchiveIterator

    texts = {}
    with open(path, "rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type != "response" or record.http_headers.get_statuscode() != "200":
                continue
            content_type = record.http_headers.get_header("Content-Type")
            if content_type.startswith("text/html"):
                body = record.content_stream().read()
                charset = content_type.split("charset=")[1] if "charset=" in content_type else detect_encoding(body)
                text = extract_plain_text(bytes_to_str(body, charset), main_content=True).strip()
                texts[record.rec_headers.get_header("WARC-Record-ID")] = text
    return texts


def test_warc_pages_are_the_text_resiliparse_itself_extracts_record_by_record(tmp_path):
    path = str(tmp_path / "crawl.warc.gz")
    sample_warc(path)
    undeclared = str(tmp_path / "undeclared.warc")  # no charset in the header: both detect the page's encoding
    write_warc(undeclared, [("https://ja.example/a.html", 200, "text/html", man_page_html("ja", "shift_jis")),
                            ("https://fr.example/a.html", 200, "text/html", man_page_html("fr", "cp1252"))], gzip=False)
    for warc in (path, undeclared):
        own = _resiliparse_own(warc)
        prep_text = {d.doc_id: d.text for d in tally(warc)[0]}
        assert len(own) >= 2 and all(prep_text[make_doc_id(f"in/{warc}", f"warc:{key}")] == text for key, text in own.items())
    own = _resiliparse_own(path)
    assert sum(re.search(r"[\u3040-\u30ff]", t) is not None for t in own.values()) == 1  # the Shift_JIS page, decoded
    assert any("é" in t for t in own.values())  # the windows-1252 page, decoded


def test_warc_and_wet_records_keep_their_url_and_language(tmp_path):
    docs, _, _ = tally(sample_warc(str(tmp_path / "crawl.warc.gz")) and str(tmp_path / "crawl.warc.gz"))
    meta = {d.text: dict(d.meta) for d in docs}
    assert meta["CSV parsing and writing."] == {"url": "https://docs.example/csv.html", "language": "eng"}  # WET
    assert {m["url"] for m in meta.values() if "language" not in m} >= {"https://docs.example/json.html",
                                                                        "https://ja.example/man.html"}
    assert all(set(m) <= set(formats.FORMATS["warc"].meta) for m in meta.values())


def test_a_warc_record_with_a_wrong_length_and_a_cut_warc_are_counted(tmp_path):
    sample_warc(str(tmp_path / "a.warc"), gzip=False)
    data = open(tmp_path / "a.warc", "rb").read()
    at = data.index(b"Content-Length: ", data.index(b"WARC-Type: response"))
    end = data.index(b"\r\n", at)
    (tmp_path / "wrong.warc").write_bytes(data[:at] + b"Content-Length: " + str(int(data[at + 16:end]) - 7).encode() + data[end:])
    docs, drops, _ = tally(str(tmp_path / "wrong.warc"))
    assert drops["bad_warc"] == 1 and len(docs) < len(tally(str(tmp_path / "a.warc"))[0])
    (tmp_path / "cut.warc.gz").write_bytes(gzip.compress(data)[: len(gzip.compress(data)) // 2])
    assert [e.kind for e in tally(str(tmp_path / "cut.warc.gz"))[2]] == ["truncated_stream"]


def test_decontamination_and_finetune_tables_read_the_new_compressions(tmp_path):
    from pipelines.documents.decontaminate import evaluation_texts

    text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    data = ("sentence\tlabel\n" + text + "\t1\n").encode()
    assert text in list(evaluation_texts("dev.tsv.bz2", bz2.compress(data)))
    (tmp_path / "dev.tsv.xz").write_bytes(lzma.compress(data))
    assert read_table(str(tmp_path / "dev.tsv.xz")).rows == [(2, {"sentence": text, "label": "1"})]


def test_a_multistream_dump_split_by_its_streams_reads_as_whole(tmp_path):
    from pipelines.documents import splits

    path = multistream_dump(tmp_path, pages=80)
    whole = list(read_file("wiki", path, ReadConfig()))
    parts = splits.plan(path, "mediawiki", 2_000, "document")
    assert parts is not None and len(parts) >= 3
    split = [item for part in parts for item in read_file("wiki", path, ReadConfig(), part)]
    assert split == whole and sum(isinstance(i, RawDoc) for i in whole) == 16
    assert splits.plan(gensim_dump(), "mediawiki", 200_000, "document") is None  # no index beside it: read whole


def test_an_hf_url_without_huggingface_hub_names_the_extra(monkeypatch):
    import importlib
    import sys

    from pipelines.stages.read_corpus import matched_files

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # the package as missing: importing it fails
    monkeypatch.delitem(importlib.import_module("fsspec.registry")._registry, "hf", raising=False)
    with pytest.raises(PrepError) as err:
        matched_files([("input0", "hf://datasets/owner/name/*.parquet")])
    assert str(err.value) == "--input hf://datasets/owner/name/*.parquet: pip install 'clozeforge[hub]' to read it"


def test_a_warc_gz_split_at_its_gzip_members_reads_as_whole(tmp_path):
    from warcio.archiveiterator import ArchiveIterator

    from pipelines.documents import splits

    path = str(tmp_path / "crawl.warc.gz")
    sample_warc(path)  # warcio writes a gzip member a record
    size = len(open(path, "rb").read())
    with open(path, "rb") as f:  # another parser's record offsets: where each gzip member starts
        records = ArchiveIterator(f)
        members = [records.get_record_offset() for _ in records]
    whole = list(read_file("web", path, ReadConfig()))
    for split_bytes in (1, 5_000, 20_000):
        parts = splits.plan(path, "warc", split_bytes, "document")
        assert parts is not None and len(parts) >= 2
        assert parts[0].start == 0 and parts[-1].end == size and all(a.end == b.start for a, b in zip(parts, parts[1:]))
        assert all(p.start in members and p.before == members.index(p.start) for p in parts)
        assert all(p.end - p.start >= split_bytes for p in parts[:-1])
        assert [item for part in parts for item in read_file("web", path, ReadConfig(), part)] == whole
    assert [p.start for p in splits.plan(path, "warc", 1, "document")] == members
    one_member = str(tmp_path / "one.warc.gz")  # the whole file one gzip member: not split on
    open(one_member, "wb").write(gzip.compress(gzip.decompress(open(path, "rb").read())))
    assert splits.plan(one_member, "warc", 1, "document") is None and splits.plan(path, "warc", size, "document") is None
    cut = str(tmp_path / "cut.warc.gz")  # a member cut short: read whole, where the reader counts the cut
    open(cut, "wb").write(open(path, "rb").read()[: size - 100])
    assert splits.plan(cut, "warc", 1, "document") is None
