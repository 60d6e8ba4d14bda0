"""man-sections in other languages and the zero-shot transfer (builtin/transfer.py, builtin/run.py): the translated
roff of real German and Japanese pages, headings learned against the English originals, a synthetic tree whose
every count is known (one label set across languages, a page and its translation never in two splits, every page
read counted), the real German transfer, and `clozeforge finetune --task man-sections --test-language` end to end
with its one-line refusals."""

from __future__ import annotations

import collections
import dataclasses
import gzip
import json
import os

import pytest

from downstream.finetune.builtin import TASKS
from downstream.finetune.builtin.common import SPLITS, Sizes
from downstream.finetune.builtin.man_sections import (
    paragraphs,
    read_roff,
    translated_headings,
    words,
)
from downstream.finetune.builtin.transfer import write_transfer

MAN = "/usr/share/man"
needs = pytest.mark.skipif(not all(os.path.exists(f"{MAN}/{lang}/man1/passwd.1.gz") for lang in ("de", "ja")),
                           reason="this machine lacks the German and Japanese man pages of passwd(1)")


def _rows(directory) -> dict[str, list[dict]]:
    out = {}
    for split in SPLITS:
        with open(os.path.join(directory, f"{split}.jsonl"), encoding="utf-8") as f:
            out[split] = [json.loads(line) for line in f]
    return out


def test_groff_accented_letter_names_become_letters_and_cjk_counts_as_bert_words():
    roff = (".SH BESCHREIBUNG\nGr\\(:o\\(ssere Dateien werden \\(:ublicherweise zuerst gepr\\[u00FC]ft, "
            "dann \\('ecrit\\[u0065_0301] \\(aqund\\(aq in Stra\\(sse \\(,ca und \\(oq so weiter \\(lq mit\\(rq\n")
    assert paragraphs(roff, 1) == ["Größere Dateien werden üblicherweise zuerst geprüft, dann écrité und in Straße ça "
                                   "und so weiter mit"]  # quotes (aq, oq, lq, rq) go as before
    assert words("passwd はユーザ") == 5 and words("日本語 text") == 4 and words("two words") == 2


@needs
def test_a_real_german_page_loses_its_translated_synopsis_and_keeps_umlauts():
    german = TASKS["man-sections"].in_language("de")
    skip = translated_headings(german)
    assert {"BEZEICHNUNG", "ÜBERSICHT"} <= skip and "BESCHREIBUNG" not in skip  # \(:UBERSICHT read as ÜBERSICHT
    roff = read_roff(f"{MAN}/de/man1/passwd.1.gz")[0]
    every = paragraphs(roff, 1)
    assert [p for p in every if p not in paragraphs(roff, 1, skip)] == ["passwd [Optionen] [ANMELDENAME]"]
    kept = paragraphs(roff, 12, skip)
    original = set(paragraphs(read_roff(f"{MAN}/man1/passwd.1.gz", follow=True)[0], 12))
    assert len(kept) == 25 and sum(p in original for p in kept) == 14  # 14 left in English: `untranslated` drops
    assert sum(any(c in p for c in "äöüß") for p in kept) == 11 and not any("\\" in p for p in kept)


@needs
def test_a_real_japanese_page_loses_its_name_and_synopsis_and_counts_its_words():
    japanese = TASKS["man-sections"].in_language("ja")
    skip = translated_headings(japanese)
    assert {"名前", "書式"} <= skip and "説明" not in skip
    roff = read_roff(f"{MAN}/ja/man1/passwd.1.gz")[0]
    every = paragraphs(roff, 1)
    assert [p for p in every if p not in paragraphs(roff, 1, skip)][:2] == ["passwd - ユーザパスワードを変更する",
                                                                           "passwd [-f|-s] [name]"]
    kept = paragraphs(roff, 12, skip)
    assert len(kept) == 22 and kept[0].startswith("passwd はユーザアカウント")
    assert sum(len(p.split()) >= 12 for p in kept) == 6  # counted at spaces only, 16 of them would be lost


# -- a synthetic tree: English pages in man1, man5, man8, their "xx" translations, every count known ----------------

def _page(path, headings: list[tuple[str, list[str]]], encoding="utf-8") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    roff = ".TH X 1\n" + "".join(f".SH {h}\n" + "".join(f"{p}\n.PP\n" for p in ps) for h, ps in headings)
    with gzip.open(path, "wb") as f:
        f.write(roff.encode(encoding))


def _words(*head: str) -> str:
    return " ".join(head) + " with enough further words to pass the twelve word threshold of this task"


@pytest.fixture
def tree(tmp_path):
    """man1 and man5: 12 English pages each, the first 6 translated into xx (xx's p1 keeps one paragraph in
    English, its p2 has no synopsis); man8: 12 English pages, one translated. xx also holds a link and a Latin-1 page."""
    root = tmp_path / "man"
    for section in ("1", "5", "8"):
        for i in range(12):
            name = f"p{i}.{section}.gz"
            _page(root / f"man{section}" / name, [("NAME", [f"p{i} - a page"]), ("SYNOPSIS", [_words("usage", name)]),
                                                  ("DESCRIPTION", [_words("english", name, f"paragraph {k}") for k in range(3)])])
            if i < (6 if section != "8" else 1):
                body = [_words("xx", name, f"kappale {k}") for k in range(3)]
                if i == 1:
                    body[2] = _words("english", name, "paragraph 2")  # left untranslated
                heads = [("NIMI", [f"p{i} - sivu"]), ("KUVAUS", body)]
                if i != 2:
                    heads.insert(1, ("KOOSTE", [_words("xx usage", name)]))
                _page(root / "xx" / f"man{section}" / name, heads)
    os.symlink("p0.1.gz", root / "xx" / "man1" / "alias.1.gz")
    _page(root / "xx" / "man1" / "old.1.gz", [("NIMI", ["vanha"]), ("KUVAUS", [_words("Käyttö", "vanha")])], "latin-1")
    sizes = Sizes(train=4, validation=2, test=4, per_group=2)
    return dataclasses.replace(TASKS["man-sections"], root=str(root), sizes=sizes)


def test_the_transfer_keeps_one_label_set_and_a_page_and_its_translation_apart(tree, tmp_path):
    record = write_transfer(tree, str(tmp_path / "out"), "xx")
    rows = _rows(tmp_path / "out")
    assert record["classes"] == ["1 commands", "5 file formats"]  # man8 has one translated page: too few for 4 rows
    assert {s: collections.Counter(r["label"] for r in rows[s]) for s in SPLITS} == {
        "train": {"1 commands": 4, "5 file formats": 4}, "validation": {"1 commands": 2, "5 file formats": 2},
        "test": {"1 commands": 4, "5 file formats": 4}}
    assert record["rows"] == {"train": 8, "validation": 4, "test": 8}
    page = lambda r: r["text"].split()[1]  # noqa: E731  ("english p7.1.gz paragraph 0 ...", "xx p3.1.gz kappale 1 ...")
    assert all(r["text"].startswith("xx ") and "kappale" in r["text"] for r in rows["test"])
    assert all(r["text"].startswith("english ") for s in ("train", "validation") for r in rows[s])
    english_pages = {page(r) for s in ("train", "validation") for r in rows[s]}
    assert not english_pages & {f"p{i}.{s}.gz" for i in range(6) for s in "15"}  # no original of any xx page
    assert not english_pages & {page(r) for r in rows["test"]}
    xx = record["read"]["xx"]
    # read: 6 + 6 + 1 pages, a link, a Latin-1 page; each p1 keeps 2 of its 3 paragraphs, p2's KUVAUS is kept
    assert xx == {"read": 15, "kept": 13, "dropped": {"link": 1, "not_utf8": 1}, "left_out": 0,
                  "rows_dropped": {"untranslated": 2}, "headings_left_out": ["KOOSTE", "NAME", "NIMI", "SYNOPSIS"]}
    assert record["read"]["en"]["left_out"] == 13 and record["pages"] == {"train": 4, "validation": 2, "test": 4}
    assert write_transfer(tree, str(tmp_path / "again"), "xx") == record and _rows(tmp_path / "again") == rows


def test_unknown_languages_and_too_few_pages_are_one_line(tree, tmp_path):
    with pytest.raises(LookupError, match=r"^--test-language yy: no .*/man/yy on this machine \(languages there: xx\)$"):
        write_transfer(tree, str(tmp_path / "o"), "yy")
    with pytest.raises(LookupError, match="not a language code"):
        write_transfer(tree, str(tmp_path / "o"), "../man1")
    big = dataclasses.replace(tree, sizes=Sizes(train=4, validation=2, test=14, per_group=2))
    with pytest.raises(LookupError) as e:
        write_transfer(big, str(tmp_path / "o"), "xx")
    assert str(e.value).count("\n") == 0 and "has too few pages for man-sections in two classes" in str(e.value)
    assert "1 commands: 12 from 6 pages; 5 file formats: 12 from 6 pages; 8 administration: 2 from 1 pages" in str(e.value)
    with pytest.raises(LookupError, match="licences has no translations"):
        TASKS["licences"].in_language("de")


@pytest.mark.skipif(not os.path.isdir(f"{MAN}/de/man5"), reason="no German man pages here")
def test_the_real_german_transfer(tmp_path):
    record = write_transfer(TASKS["man-sections"], str(tmp_path / "de"), "de")
    rows = _rows(tmp_path / "de")
    labels = {s: {r["label"] for r in rows[s]} for s in SPLITS}
    assert labels["train"] == labels["validation"] == labels["test"] == set(record["classes"])
    assert record["rows"] == {"train": 32 * len(record["classes"]), "validation": 24 * len(record["classes"]),
                              "test": 64 * len(record["classes"])}
    assert not {r["text"] for r in rows["test"]} & {r["text"] for s in ("train", "validation") for r in rows[s]}
    read = record["read"]["de"]
    assert read["read"] == read["kept"] + sum(read["dropped"].values()) and read["rows_dropped"]["untranslated"] > 0
    assert record["read"]["en"]["left_out"] > 0 and {"BEZEICHNUNG", "ÜBERSICHT"} <= set(read["headings_left_out"])


# -- `clozeforge finetune --task man-sections --test-language` on a tiny export -------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("sklearn")
    from .finetune_assets import tiny_export

    return tiny_export(str(tmp_path_factory.mktemp("tiny")))


def _finetune(*argv: str) -> int:
    from downstream.finetune.command import finetune_main

    return finetune_main(list(argv))


@pytest.mark.skipif(not os.path.isdir(f"{MAN}/de/man5"), reason="no German man pages here")
def test_finetune_trains_on_english_and_scores_german(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert _finetune(tiny, "--task", "man-sections", "--test-language", "de", "--output", str(out), "--seeds", "2",
                     "--epochs", "1", "--lr", "1e-3", "--baseline", "scratch", "--baseline-lr", "1e-3") == 0
    printed = capsys.readouterr().out
    with open(out / "results.json", encoding="utf-8") as f:
        results = json.load(f)
    written = results["builtin"]
    assert (written["task"], written["train_language"], written["test_language"]) == ("man-sections", "en", "de")
    n = len(written["classes"])
    assert results["task"] == "classify" and results["scored_on"] == "test" and sorted(results["labels"]) == written["classes"]
    assert [results["data"][s]["examples"] for s in SPLITS] == [32 * n, 24 * n, 64 * n]
    assert len(results["gain"]["per_seed"]) == 2 and "test_language" not in results["recipe"]
    with open(out / "predictions.jsonl", encoding="utf-8") as f:
        assert len(f.readlines()) == 64 * n
    assert "== man-sections, zero-shot en -> de:" in printed
    assert [line.split()[1:5] for line in printed.splitlines() if line.startswith(("pretrained ", "scratch "))] == [
        ["test", "[en", "->", "de]"]] * 2


@pytest.mark.parametrize("args,message", [
    (("--test-language", "xx"), "--test-language xx: no /usr/share/man/xx on this machine (languages there: "),
    (("--test-language", "fi"), "--test-language fi: /usr/share/man/fi has too few pages for man-sections in two classes"),
    (("--test-language", "de", "--train", "t.jsonl"), "--task man-sections writes its own splits from this machine's text"),
    (("--task", "licences", "--test-language", "de"), "--test-language goes with a built-in --task that has translations: man-sections"),
    (("--task", "classify", "--test-language", "de", "--train", "a", "--validation", "b"),
     "--test-language goes with a built-in --task that has translations"),
])
def test_finetune_refuses_in_one_line_before_touching_output(tiny, tmp_path, capsys, args, message):
    if "fi" in args and not os.path.isdir(f"{MAN}/fi"):
        pytest.skip("no Finnish man pages here")
    task = () if "--task" in args else ("--task", "man-sections")
    code = _finetune(tiny, *task, *args, "--output", str(tmp_path / "o"), "--seeds", "1", "--epochs", "1")
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and message in err, err
    assert not (tmp_path / "o").exists()


def test_builtin_task_is_its_own_flag_and_task_name_is_its_old_spelling():
    """--task takes a kind and --builtin-task a built-in task's name; `--task NAME`, the spelling from before
    --builtin-task, is the same config, and a message names the flag as the user typed it."""
    from downstream.finetune.command import finetune_parser
    from downstream.finetune.config import FinetuneConfig
    from downstream.finetune.tasks import TASK_KINDS

    new, old = FinetuneConfig(builtin_task="licences", output="o"), FinetuneConfig(task="licences", output="o")
    assert new == old and (new.builtin_task, new.task) == ("licences", None)
    flags = {a.dest: a for a in finetune_parser()._actions}
    assert flags["task"].metavar == "{" + ",".join(TASK_KINDS) + "}" and "built-in" not in flags["task"].help
    assert tuple(flags["builtin_task"].choices) == tuple(TASKS)
    for spelled in ("--task", "--builtin-task"):
        with pytest.raises(ValueError, match=f"^{spelled} man-sections writes its own splits"):
            FinetuneConfig(**{spelled[2:].replace("-", "_"): "man-sections"}, train="t.jsonl", output="o")
    with pytest.raises(ValueError, match="^--builtin-task licences has its own kind: drop --task classify"):
        FinetuneConfig(builtin_task="licences", task="classify", output="o")
