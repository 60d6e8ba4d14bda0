"""The demo's built-in corpus (demo/corpus.py): this machine's documentation, one file set per source, and prep's inputs.

Read from the real text on the machine (the standard library's docstrings, /usr/share/man, /usr/share/info); a
source the machine lacks leaves no file behind.
"""

from __future__ import annotations

import json
import os

import pytest

from demo import corpus


def _documents(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.skipif(not (os.path.isdir("/usr/share/man/man1") and os.path.isdir("/usr/share/info")),
                    reason="needs the machine's man pages and GNU manuals")
def test_documentation_writes_each_source_its_share_one_document_per_module_page_or_node(tmp_path):
    written = corpus.write(str(tmp_path), 600_000, "documentation")
    assert set(written) == {"docstrings", "man", "info"}
    for source in corpus.CORPORA["documentation"].sources:
        share = 600_000 * source.share
        assert share <= written[source.name] < share + 200_000, (source.name, written[source.name])
    pages, nodes = _documents(tmp_path / "man-00.jsonl"), _documents(tmp_path / "info-00.jsonl")
    assert all(p["id"].startswith("man") and p["id"].endswith(".gz") for p in pages)  # a page is one document
    assert len({n["id"] for n in nodes}) == len(nodes) and all("/" in n["id"] for n in nodes)  # a node is one document
    assert all(d["text"].strip() for d in pages + nodes)
    flags = corpus.inputs(str(tmp_path), "documentation")
    assert flags[::2] == ["--input"] * 3
    assert [f.split("=")[0] for f in flags[1::2]] == ["docstrings", "man", "info"]


def test_a_source_that_writes_nothing_leaves_no_file_and_no_input(tmp_path, monkeypatch):
    def nothing(directory, max_bytes):
        open(os.path.join(directory, "man-00.jsonl"), "w").close()
        return 0

    kind = corpus.Corpus((corpus.CORPORA["docstrings"].sources[0], corpus.Source("man", 0.5, nothing)), 1.0, "test")
    monkeypatch.setitem(corpus.CORPORA, "test", kind)
    assert corpus.write(str(tmp_path), 100_000, "test")["man"] == 0
    assert not (tmp_path / "man-00.jsonl").exists()
    assert [f.split("=")[0] for f in corpus.inputs(str(tmp_path), "test")[1::2]] == ["docstrings"]
