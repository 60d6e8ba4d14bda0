"""The README's checkable claims, checked: its length, the vocabulary's id layout, the resume lists (against
trainer/config.py's RESUME_RULES), a validation split that does not move with the corpus, every flag it names
being a real flag, and its links pointing at files that exist."""

from __future__ import annotations

import os
import re

import pytest

from tests.helpers import ROOT

with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    README = f.read()


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_stays_short():
    assert len(README.splitlines()) <= 260


def test_the_id_layout_it_states_is_the_vocabulary_s():
    from pipelines.config import PrepConfig
    from pipelines.wordpiece import special_token_layout

    default_unk, default_unused = map(int, re.search(r"`\[UNK\]`=(\d+) with the default (\d+)", README).groups())
    assert PrepConfig(inputs=(("a", "x.txt"),), output="/o").wordpiece.num_unused == default_unused
    assert special_token_layout(default_unused).index("[UNK]") == default_unk
    bert_unk, unused = map(int, re.search(r"`\[UNK\]`=(\d+) with `--num-unused (\d+)`", README).groups())
    assert special_token_layout(unused).index("[UNK]") == bert_unk == 100  # bert-base-uncased's


def _resume_token(flag: str) -> str:
    found = re.search(r"--[a-z0-9-]+", flag)
    return f"`{found.group()}`" if found else flag


def test_the_resume_lists_are_the_resume_rules():
    from trainer.config import RESUME_RULES

    text = section("Resuming")
    may = text.split("- **May change**", 1)[1].split("- **May not**", 1)[0]
    may_not = text.split("- **May not**", 1)[1].split("\n- ", 1)[0]
    for rule in RESUME_RULES:
        assert _resume_token(rule.flag) in (may if rule.may_change else may_not), rule
    fixed = {_resume_token(r.flag) for r in RESUME_RULES if not r.may_change}
    listed = set(re.findall(r"`--[a-z0-9-]+`", may_not))
    assert listed == fixed, "the README's 'May not' list and RESUME_RULES differ"


def test_the_split_does_not_depend_on_where_the_corpus_lies(tmp_path):
    """Determinism: the same files in another folder give the same document ids, so the same validation split;
    renaming a file changes them."""
    pytest.importorskip("apache_beam")
    from pipelines.documents.readers import ReadConfig
    from pipelines.documents.records import RawDoc
    from pipelines.stages.make_nsp_pairs import split_of
    from pipelines.stages.read_corpus import ReadFileFn, matched_files

    lines = "".join(f'{{"text": "document number {i} of the corpus"}}\n' for i in range(40))

    def splits(folder, name: str = "part-0.jsonl") -> list[tuple[str, str]]:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w") as f:
            f.write(lines)
        files, roots, _ = matched_files([("docs", f"{folder}/*.jsonl")])
        reader = ReadFileFn(ReadConfig(), roots)
        docs = [d for source, path in files for d in reader.process((source, path, None)) if isinstance(d, RawDoc)]
        return [(d.doc_id, split_of(d.doc_id, seed=12345, validation_fraction=0.25)) for d in docs]

    here = splits(tmp_path / "here")
    assert {split for _, split in here} == {"train", "validation"}
    assert splits(tmp_path / "somewhere" / "else") == here
    assert [i for i, _ in splits(tmp_path / "renamed", "part-9.jsonl")] != [i for i, _ in here]


def test_every_flag_it_names_is_a_flag():
    from tests.test_cli import PARSERS

    known = {option for make in PARSERS.values() for action in make()._actions for option in action.option_strings}
    others = {"--module", "--logdir", "--runner",  # deepspeed's, tensorboard's and Beam's
              "--extra-index-url", "--torch"}  # pip's, and .ci/deps' (not a clozeforge command)
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w])", README))
    assert named - known - others == set()


def test_its_links_point_at_files_that_exist():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert os.path.exists(os.path.join(ROOT, target)), target
