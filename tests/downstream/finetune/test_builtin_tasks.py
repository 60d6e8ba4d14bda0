"""Built-in downstream tasks: the same rows for the same seed, balanced classes, disjoint splits, and text that the
demo's pretraining corpus does not hold."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import random

import pytest

from downstream.finetune.builtin import DEMO, HELD_OUT, TASKS
from downstream.finetune.builtin.common import SPLITS, Sizes, split_by_group
from downstream.finetune.builtin.man_sections import paragraphs


def _rows(directory: str) -> dict[str, list[dict]]:
    out = {}
    for split in SPLITS:
        with open(os.path.join(directory, f"{split}.jsonl"), encoding="utf-8") as f:
            out[split] = [json.loads(line) for line in f]
    return out


def test_groups_never_straddle_splits_and_every_split_fills():
    grouped = {"a": [(f"doc{i // 3}", {"text": f"a{i}", "label": "a"}) for i in range(60)],
               "b": [(f"doc{i}", {"text": f"b{i}", "label": "b"}) for i in range(30)]}
    sizes = Sizes(train=4, validation=3, test=5, per_group=2)
    out = split_by_group(grouped, sizes, random.Random(0))
    for label in "ab":
        assert [len(out[label][s]) for s in SPLITS] == [4, 3, 5]
    doc_of = {row["text"]: doc for label in grouped for doc, row in grouped[label]}
    splits_of = collections.defaultdict(set)
    for label in out:
        for split, rows in out[label].items():
            for row in rows:
                splits_of[doc_of[row["text"]]].add(split)
    assert all(len(s) == 1 for s in splits_of.values())


def test_roff_paragraphs_lose_requests_escapes_and_the_name_section():
    roff = ('.TH X 1\n.SH NAME\nx \\- does a thing to many files at once and then some\n.SH DESCRIPTION\n'
            '\\fBx\\fR reads every file named on its command line\\(emor standard input\\(emand writes what it\n'
            'found to standard output, one line a file.\n.PP\nshort one\n')
    assert paragraphs(roff, 8) == ["x reads every file named on its command line - or standard input - and writes what it "
                                   "found to standard output, one line a file."]


def test_a_machine_without_the_text_is_one_lookup_error(tmp_path):
    task = dataclasses.replace(TASKS["man-sections"], root=str(tmp_path))  # no man pages
    with pytest.raises(LookupError, match="man-sections: this machine lacks the text"):
        task.write(str(tmp_path / "out"))


def test_the_demo_and_held_out_tasks_are_registered_apart():
    assert len(DEMO) >= 3 and len(HELD_OUT) >= 2 and not set(DEMO) & set(HELD_OUT)
    assert {TASKS[n].kind for n in DEMO} != {"classify"}  # not only topic classification
    assert len({TASKS[n].source for n in DEMO}) == len(DEMO)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    out = {}
    for name in (*DEMO, *HELD_OUT):
        try:
            classes = TASKS[name].write(str(root / name))
        except LookupError as e:
            pytest.skip(str(e))
        out[name] = (classes, _rows(str(root / name)))
    return out


@pytest.mark.integration  # reads thousands of man pages and parses the standard library (tens of seconds)
@pytest.mark.parametrize("name", [*DEMO, *HELD_OUT])
def test_a_task_is_deterministic_balanced_and_disjoint(written, name, tmp_path):
    classes, rows = written[name]
    again = TASKS[name].write(str(tmp_path / "again"))
    assert again == classes and _rows(str(tmp_path / "again")) == rows
    for split in SPLITS:
        counts = collections.Counter(r["label"] for r in rows[split])
        assert set(counts) == set(classes) and len(set(counts.values())) == 1, (split, counts)
    def key(r):
        return (r["text"], r.get("text_pair"))
    train, test = {key(r) for r in rows["train"]}, {key(r) for r in rows["test"]}
    assert not train & test
    if TASKS[name].kind == "pair":
        assert set(TASKS[name].write(str(tmp_path / "seed1"), seed=1)) == set(classes)
        assert _rows(str(tmp_path / "seed1")) != rows  # the seed chooses the rows


@pytest.mark.integration
def test_no_task_text_is_in_the_demo_pretraining_corpus(written):
    """A spot check: 20 texts of each task against the demo's built-in corpus (6 MB of docstrings)."""
    from pipelines.documents.builtin_corpus import iter_documents

    corpus = "\n".join(" ".join(d["text"].split()) for d in iter_documents(max_bytes=6_000_000))
    for name, (_, rows) in written.items():
        texts = [r["text"] for r in rows["test"]]
        for text in random.Random(0).sample(texts, 20):
            assert text not in corpus, (name, text)
