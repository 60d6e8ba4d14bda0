"""downstream.finetune.suites on tiny files written in each benchmark's official format (nothing downloaded):
the readers' rows and settings, their one-line errors, the suite table, and `clozeforge finetune --suite` end to end."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from downstream.finetune import suites
from downstream.finetune.suites import SuiteError
from downstream.finetune.suites import run as suite_run
from downstream.finetune.suites.table import TaskScores, task_scores, write_table

# ---- GLUE ------------------------------------------------------------------------------------------------------

_MNLI_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
                "sentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")
_MNLI_DEV_HEADER = _MNLI_HEADER.replace("label1\tgold_label", "label1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label")


def _mnli_line(i, s1, s2, label, dev=False):
    labels = [label] * (5 if dev else 1)
    return "\t".join([str(i), "31193", f"{i}n", "government", "( x )", "( y )", "(ROOT x)", "(ROOT y)", s1, s2, *labels, label])


GLUE_FILES = {
    # CoLA: no header, source / label / original judgement / sentence; a sentence may open with a double quote
    "CoLA/train.tsv": 'gj04\t1\t\tOur friends won\'t buy this analysis.\nclc95\t0\t*\t"They drank the pub.\n',
    "CoLA/dev.tsv": 'gj04\t1\t\tThe sailors rode the breeze clear of the rocks.\nbc01\t0\t*\tThe more we study verbs.\n',
    "SST-2/train.tsv": 'sentence\tlabel\nhide new secretions \t0\n" a gorgeous film\t1\n',
    "SST-2/dev.tsv": "sentence\tlabel\nit 's a charming journey . \t1\nunflinchingly bleak\t0\n",
    "MRPC/train.tsv": ('\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
                       '1\t702876\t702977\tAmrozi accused his brother .\t"Referring to him as only " the witness " .\n'
                       '0\t2108705\t2108831\tYucaipa owned Dominick \'s .\tYucaipa bought Dominick \'s in 1995 .\n'),
    "MRPC/dev.tsv": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                     "1\t1355540\t1355592\tHe said the foodservice pie .\tThe foodservice pie business .\n"),
    # QQP: a line with missing columns (the real train file has a few) is a counted drop
    "QQP/train.tsv": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                      "133273\t213221\t213222\tHow is the life of a math student?\tWhich level of prepration?\t0\n"
                      "402555\t536040\t536041\tHow do I control my horny emotions?\n"
                      "360472\t364011\t490273\tWhat causes stool color?\tWhat can cause stool?\t1\n"),
    "QQP/dev.tsv": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                    "201359\t303345\t303346\tWhy are African-Americans so beautiful?\tWhy are hispanics so beautiful?\t0\n"),
    "STS-B/train.tsv": ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                        "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000\n"
                        "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man plays a flute.\tA man plays a big flute.\t3.800\n"),
    "STS-B/dev.tsv": ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                      "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man with a hard hat.\tA man wearing a hard hat.\t5.000\n"),
    "MNLI/train.tsv": "\n".join([_MNLI_HEADER, _mnli_line(0, "Conceptually cream skimming.", "Product and geography.", "neutral"),
                                 _mnli_line(1, "you know during the season", "You lose the things.", "entailment")]) + "\n",
    "MNLI/dev_matched.tsv": "\n".join([_MNLI_DEV_HEADER, _mnli_line(0, "The new rights are nice.", "Everyone loves them.", "neutral", True)]) + "\n",
    "MNLI/dev_mismatched.tsv": "\n".join([_MNLI_DEV_HEADER, _mnli_line(0, "Your contribution helped.", "It did not help.", "contradiction", True)]) + "\n",
    "QNLI/train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhat came into force?\tThe law came into force.\tentailment\n",
    "QNLI/dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhat is it?\tNothing here.\tnot_entailment\n",
    "RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo weapons were found.\tWeapons were found.\tnot_entailment\n",
    "RTE/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDana Reeve died.\tChristopher Reeve died.\tnot_entailment\n",
    "WNLI/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\tThe pin stuck.\t1\n",
}


def _write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    return str(root)


def test_glue_reads_each_task_in_its_official_layout(tmp_path):
    tasks = {t.name: t for t in suites.load("glue", _write(tmp_path, GLUE_FILES))}
    assert list(tasks) == ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte"]  # WNLI left out
    cola = tasks["cola"]
    assert cola.kind == "classify" and cola.metrics == ("mcc",) and cola.selection == "mcc"
    # no CSV quoting: a sentence that opens with a double quote stays one field on its own line
    assert [r["text"] for r in cola.splits["train"]] == ["Our friends won't buy this analysis.", '"They drank the pub.']
    assert [r["label"] for r in cola.splits["train"]] == [1, 0] and "test" not in cola.splits
    assert tasks["sst2"].splits["train"][1] == {"text": '" a gorgeous film', "label": 1, "line": 3}
    mrpc = tasks["mrpc"]
    assert mrpc.kind == "pair" and mrpc.positive == 1 and mrpc.metrics == ("f1", "accuracy")
    assert mrpc.splits["train"][0]["text_pair"] == '"Referring to him as only " the witness " .'  # BOM dropped from the header
    qqp = tasks["qqp"]
    assert len(qqp.splits["train"]) == 2 and qqp.dropped["train"] == {"missing_columns": 1}
    stsb = tasks["stsb"]
    assert stsb.regression and [r["label"] for r in stsb.splits["train"]] == [5.0, 3.8]
    assert stsb.splits["train"][1]["text"] == "A man plays a flute." and stsb.metrics == ("pearson", "spearman")
    mnli = tasks["mnli"]
    assert set(mnli.splits) == {"train", "validation", "validation_mismatched"}
    assert mnli.splits["validation"][0]["label"] == "neutral"  # gold_label, the last column of the dev files
    assert mnli.splits["validation_mismatched"][0]["text_pair"] == "It did not help."
    assert mnli.scored_splits == ("validation", "validation_mismatched")
    # MosaicBERT's seeds, and its second round from the MNLI model
    assert {n: t.seeds for n, t in tasks.items()} == {"cola": 4, "sst2": 3, "mrpc": 5, "qqp": 1, "stsb": 5, "mnli": 1,
                                                      "qnli": 1, "rte": 5}
    assert {n for n, t in tasks.items() if t.start_from == "mnli"} == {"rte", "mrpc", "stsb"}
    first, second = suite_run.rounds(list(tasks.values()))  # MNLI's model exists before the tasks that start from it
    assert "mnli" in [t.name for t in first] and [t.name for t in second] == ["mrpc", "stsb", "rte"]
    with pytest.raises(SuiteError, match=r"not loaded: rte \(from mnli\)"):
        suite_run.rounds([tasks["rte"]])
    assert all(t.start_from is None for t in suites.load("glue", str(tmp_path), suites.SuiteOptions(from_mnli=False)))
    assert len(mnli.files["validation"]["sha256"]) == 64


def test_holdout_takes_validation_from_train_and_scores_the_dev_files_as_test(tmp_path):
    files = {k: v for k, v in GLUE_FILES.items() if k.startswith(("SST-2/", "MNLI/"))}
    files["SST-2/train.tsv"] = "sentence\tlabel\n" + "".join(f"sentence number {i}\t{i % 2}\n" for i in range(200))
    files["MNLI/train.tsv"] = "\n".join([_MNLI_HEADER, *(_mnli_line(i, f"premise {i}", "hypothesis", "neutral")
                                                        for i in range(50))]) + "\n"
    options = suites.SuiteOptions(suite_holdout=0.25)
    tasks = {t.name: t for t in suites.load("glue", _write(tmp_path, files), options)}
    sst2 = tasks["sst2"]
    assert set(sst2.splits) == {"train", "validation", "test"} and sst2.scored_splits == ("test",)
    held = len(sst2.splits["validation"])
    assert 30 <= held <= 70 and held + len(sst2.splits["train"]) == 200  # ~25%, and nothing lost
    assert sst2.splits["test"][0]["text"] == "it 's a charming journey . "
    assert sst2.files["validation"] == {**sst2.files["train"], "holdout": 0.25}
    again = {t.name: t for t in suites.load("glue", str(tmp_path), options)}["sst2"]
    assert again.splits["validation"] == sst2.splits["validation"]  # the same rows on every run
    assert tasks["mnli"].scored_splits == ("test", "test_mismatched")
    with pytest.raises(SuiteError, match=r"CoLA/train.tsv: --suite-holdout 0.25 leaves no"):
        suites.load("glue", _write(tmp_path / "small", {k: v for k, v in GLUE_FILES.items() if k.startswith("CoLA/")}),
                    options)
    with pytest.raises(ValueError, match=r"--suite-holdout must be in \[0, 1\)"):
        suites.SuiteOptions(suite_holdout=1.0)


def test_options_are_flags():
    import argparse

    from schemas.config import add_flags, from_flags

    parser = argparse.ArgumentParser()
    add_flags(parser, suites.SuiteOptions)
    options = from_flags(suites.SuiteOptions, parser.parse_args(["--no-from-mnli", "--suite-holdout", "0.1"]))
    assert options == suites.SuiteOptions(from_mnli=False, suite_holdout=0.1)


def test_glue_without_mnli_starts_every_task_from_the_pretrained_model(tmp_path):
    files = {k: v for k, v in GLUE_FILES.items() if k.startswith(("RTE/", "MRPC/"))}
    tasks = suites.load("glue", _write(tmp_path, files))
    assert [t.name for t in tasks] == ["mrpc", "rte"] and all(t.start_from is None for t in tasks)


@pytest.mark.parametrize("files, message", [
    ({"RTE/train.tsv": b"index\tsentence\tlabel\n0\ta\tb\n", "RTE/dev.tsv": b"x"},
     r"RTE/train.tsv:1: no column 'sentence1', 'sentence2'"),
    ({"CoLA/train.tsv": b"gj04\tmaybe\t\tA sentence.\n", "CoLA/dev.tsv": b"x"},
     r"CoLA/train.tsv:1: label 'maybe' is not a cola label"),
    ({"SST-2/train.tsv": b"sentence\tlabel\nfine\t1\n"}, r"SST-2/dev.tsv: no such file"),
    ({"SST-2/train.tsv": b"sentence\tlabel\nfine\t1\n\xff\t0\n", "SST-2/dev.tsv": b"x"}, r"SST-2/train.tsv:3: not UTF-8"),
])
def test_glue_errors_name_file_and_line(tmp_path, files, message):
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    with pytest.raises(SuiteError, match=message) as e:
        suites.load("glue", str(tmp_path))
    assert "\n" not in str(e.value)


def test_unknown_suite_and_empty_directory_are_one_line(tmp_path):
    with pytest.raises(SuiteError, match="--suite must be one of glue, squad, squad_v2, conll2003"):
        suites.load("superglue", str(tmp_path))
    with pytest.raises(SuiteError, match="no GLUE task folder"):
        suites.load("glue", str(tmp_path))
    with pytest.raises(SuiteError, match="train-v1.1.json: no such file"):
        suites.load("squad", str(tmp_path))


# ---- SQuAD ------------------------------------------------------------------------------------------------------

def _squad(version, questions):
    return json.dumps({"version": version, "data": [{"title": "Normans", "paragraphs": [
        {"context": "The Normans gave their name to Normandy, a region in France.", "qas": questions}]}]})


def test_squad_v1_reads_answers_and_drops_a_question_without_one(tmp_path):
    train = _squad("1.1", [{"id": "a1", "question": "What region?", "answers": [{"text": "Normandy", "answer_start": 31}]},
                           {"id": "a2", "question": "Empty?", "answers": []}])
    dev = _squad("1.1", [{"id": "d1", "question": "In what country?", "answers": [
        {"text": "France", "answer_start": 53}, {"text": "France", "answer_start": 53}, {"text": "in France", "answer_start": 50}]}])
    (task,) = suites.load("squad", _write(tmp_path, {"train-v1.1.json": train, "dev-v1.1.json": dev}))
    assert task.kind == "span" and not task.no_answer and task.metrics == ("f1", "exact_match")
    row = task.splits["train"][0]
    assert row["answers"] == {"text": ["Normandy"], "answer_start": [31]}
    assert row["context"][31:39] == "Normandy" and row["id"] == "a1" and row["title"] == "Normans"
    assert task.dropped["train"] == {"no_answer": 1}
    assert len(task.splits["validation"][0]["answers"]["text"]) == 3  # every annotator's answer is kept


def test_squad_v2_keeps_unanswerable_questions_everywhere(tmp_path):
    questions = [{"id": "q1", "question": "What region?", "answers": [{"text": "Normandy", "answer_start": 31}],
                  "is_impossible": False},
                 {"id": "q2", "question": "What did the Normans take from France?", "answers": [], "is_impossible": True,
                  "plausible_answers": [{"text": "Normandy", "answer_start": 31}]}]
    (task,) = suites.load("squad_v2", _write(tmp_path, {"train-v2.0.json": _squad("v2.0", questions),
                                                       "dev-v2.0.json": _squad("v2.0", questions)}))
    assert task.no_answer and task.name == "squad_v2"
    for split in ("train", "validation"):
        assert [r["answers"]["text"] for r in task.splits[split]] == [["Normandy"], []]  # plausible answers are not gold


def test_squad_holdout_keeps_articles_whole(tmp_path):
    articles = [{"title": f"T{i}", "paragraphs": [{"context": "The Normans gave their name to Normandy.", "qas": [
        {"id": f"{i}-{j}", "question": "What?", "answers": [{"text": "Normandy", "answer_start": 31}]} for j in range(3)]}]}
        for i in range(40)]
    _write(tmp_path, {"train-v1.1.json": json.dumps({"data": articles}), "dev-v1.1.json": _squad("1.1", [
        {"id": "d", "question": "What?", "answers": [{"text": "Normandy", "answer_start": 31}]}])})
    (task,) = suites.load("squad", str(tmp_path), suites.SuiteOptions(suite_holdout=0.3))
    train_titles = {r["title"] for r in task.splits["train"]}
    held_titles = {r["title"] for r in task.splits["validation"]}
    assert train_titles and held_titles and not train_titles & held_titles
    assert len(task.splits["validation"]) == 3 * len(held_titles) and [r["id"] for r in task.splits["test"]] == ["d"]


def test_squad_file_that_is_not_squad_is_one_line(tmp_path):
    _write(tmp_path, {"train-v1.1.json": '{"data": [{"title": "x"}]}', "dev-v1.1.json": "{"})
    with pytest.raises(SuiteError, match=r"train-v1.1.json: question 0: not in SQuAD's layout"):
        suites.load("squad", str(tmp_path))


# ---- CoNLL-2003 ---------------------------------------------------------------------------------------------------

CONLL_IOB1 = ("-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\nGerman JJ I-NP I-MISC\ncall NN I-NP O\n\n"
              "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\n\n-DOCSTART- -X- -X- O\n\n"
              "Rome NNP I-NP I-LOC\nParis NNP I-NP B-LOC\n")


def test_conll2003_reads_sentences_and_detects_iob1(tmp_path):
    (task,) = suites.load("conll2003", _write(tmp_path, {"eng.train": CONLL_IOB1, "eng.testa": CONLL_IOB1,
                                                        "eng.testb": CONLL_IOB1}))
    assert task.kind == "tag" and task.tag_scheme == "IOB1" and task.selection == "entity_f1"
    assert task.splits["train"][0] == {"tokens": ["EU", "rejects", "German", "call"],
                                       "tags": ["I-ORG", "O", "I-MISC", "O"], "line": 3}
    assert len(task.splits["train"]) == 3  # -DOCSTART- lines are not sentences
    assert task.scored_splits == ("test",) and task.files["test"]["url"].endswith("eng.testb")


def test_conll2003_bio_copies_and_bad_tags(tmp_path):
    bio = CONLL_IOB1.replace("I-ORG", "B-ORG").replace("I-MISC", "B-MISC").replace("Peter NNP I-NP I-PER", "Peter NNP I-NP B-PER") \
        .replace("Rome NNP I-NP I-LOC", "Rome NNP I-NP B-LOC")
    names = ("train.txt", "valid.txt", "test.txt")
    (task,) = suites.load("conll2003", _write(tmp_path / "bio", dict.fromkeys(names, bio)))
    assert task.tag_scheme == "BIO"
    _write(tmp_path / "bad", dict.fromkeys(names, "Alice NNP I-NP U-PER\n"))
    with pytest.raises(SuiteError, match=r"train.txt: tags are not IOB1, BIO or BIOES .*found 'U-PER'"):
        suites.load("conll2003", str(tmp_path / "bad"))
    _write(tmp_path / "one", dict.fromkeys(names, "Alice\n"))
    with pytest.raises(SuiteError, match=r"train.txt:1: one column"):
        suites.load("conll2003", str(tmp_path / "one"))


# ---- the table ------------------------------------------------------------------------------------------------------

def test_table_reports_each_task_and_the_average(tmp_path):
    tasks = {t.name: t for t in suites.load("glue", _write(tmp_path / "data", GLUE_FILES))}
    mrpc_runs = [{"validation": {"f1": 90.0, "accuracy": 86.0}}, {"validation": {"f1": 88.0, "accuracy": 84.0}}]
    mnli_runs = [{"validation": {"accuracy": 84.0}, "validation_mismatched": {"accuracy": 85.0}}]
    mrpc, mnli = task_scores(tasks["mrpc"], mrpc_runs), task_scores(tasks["mnli"], mnli_runs)
    assert mrpc.per_seed == [88.0, 86.0]  # the mean of F1 and accuracy on each seed
    assert mnli.metrics == {"accuracy": [84.0], "accuracy (validation_mismatched)": [85.0]}
    scratch = [TaskScores(name="mrpc", metrics={"f1": [80.0, 82.0], "accuracy": [70.0, 72.0]}),
               TaskScores(name="mnli", metrics={"accuracy": [60.0], "accuracy (validation_mismatched)": [61.0]})]
    paths = write_table(str(tmp_path / "out"), "glue", {"model": [mrpc, mnli], "scratch": scratch}, expected=8)
    body = json.loads(pathlib.Path(paths["json"]).read_text())
    model = body["arms"]["model"]
    assert model["tasks"][0]["score"] == {"mean": 87.0, "se": pytest.approx(1.0)}  # (88, 86): SE = sd / sqrt(2) = 1
    assert model["average"]["mean"] == pytest.approx((87.0 + 84.5) / 2)
    assert model["average"]["se"] == pytest.approx(1.0 / 2)  # sqrt(1^2 + 0^2) / 2 tasks
    assert model["average"]["tasks"] == 2 and model["average"]["of"] == 8
    md = pathlib.Path(paths["md"]).read_text()
    assert "| mrpc | f1 / accuracy (seeds: 2) | 87.0 ± 1.0 (89.0 / 85.0) | 76.0 ± 1.0 (81.0 / 71.0) |" in md
    assert "average of 2 of 8 tasks" in md
    assert pathlib.Path(paths["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no 'f1' on its validation split"):
        task_scores(tasks["mrpc"], [{"validation": {"accuracy": 1.0}}])


def test_decontamination_is_matched_by_content():
    from downstream.finetune.suites.run import decontamination

    record = {"ngram": 13, "files": [{"url": "/elsewhere/dev.tsv", "sha256": "a" * 64}]}
    files = {"validation": {"url": "/data/RTE/dev.tsv", "sha256": "a" * 64}}
    assert decontamination(record, files) == {"decontaminated": True, "ngram": 13, "files": {"validation": True}}
    files["test"] = {"url": "/data/RTE/test.tsv", "sha256": "b" * 64}
    assert decontamination(record, files)["decontaminated"] is False
    assert decontamination({"ngram": 13, "files": []}, files)["files"] == {"validation": False, "test": False}
    assert decontamination(None, files)["decontaminated"] is None


def _mnli_file(rows, dev=False) -> str:
    header = _MNLI_DEV_HEADER if dev else _MNLI_HEADER
    return "\n".join([header, *(_mnli_line(i, a, b, label, dev) for i, (a, b, label) in enumerate(rows))]) + "\n"


@pytest.mark.integration
def test_finetune_runs_each_suite_and_writes_its_table(tmp_path):
    """`clozeforge finetune MODEL --suite NAME --data DIR` on tiny official files: every task runs with its suite's
    settings (RTE from MNLI's model, MNLI scored matched and mismatched), then the table."""
    pytest.importorskip("transformers")
    from downstream.finetune.command import finetune_main

    from .finetune_assets import tiny_export

    hf = tiny_export(str(tmp_path / "model"))
    labels = ["entailment", "neutral", "contradiction"]
    mnli_train = [(f"the team won match {i}", f"a goal in minute {i}", labels[i % 3]) for i in range(9)]
    rte = "index\tsentence1\tsentence2\tlabel\n" + "".join(
        f"{i}\tthe soup was hot {i}\tthe soup {i}\t{'entailment' if i % 2 else 'not_entailment'}\n" for i in range(6))
    v2 = [{"id": "q1", "question": "What region?", "answers": [{"text": "Normandy", "answer_start": 31}]},
          {"id": "q2", "question": "Who took France?", "answers": [], "is_impossible": True}]
    data = {
        "glue": _write(tmp_path / "glue", {"MNLI/train.tsv": _mnli_file(mnli_train),
                                           "MNLI/dev_matched.tsv": _mnli_file(mnli_train[:3], dev=True),
                                           "MNLI/dev_mismatched.tsv": _mnli_file(mnli_train[3:6], dev=True),
                                           "RTE/train.tsv": rte, "RTE/dev.tsv": rte,
                                           "MRPC/train.tsv": _repeat_rows(GLUE_FILES["MRPC/train.tsv"], 3),
                                           "MRPC/dev.tsv": GLUE_FILES["MRPC/train.tsv"]}),
        "squad_v2": _write(tmp_path / "squad", {"train-v2.0.json": _squad("v2.0", v2), "dev-v2.0.json": _squad("v2.0", v2)}),
        "conll2003": _write(tmp_path / "conll", dict.fromkeys(("eng.train", "eng.testa", "eng.testb"), CONLL_IOB1)),
    }
    for suite, root in data.items():
        out = tmp_path / "out" / suite
        # GLUE without a baseline (RTE then starts from MNLI's model); the others beside scratch
        baseline = [] if suite == "glue" else ["--baseline", "scratch", "--baseline-lr", "1e-3", "--bootstrap", "0"]
        assert finetune_main([hf, "--suite", suite, "--data", root, "--output", str(out), "--epochs", "1",
                              "--lr", "1e-3", *baseline]) == 0
        body = json.loads((out / "results.json").read_text())
        table = json.loads((out / f"{suite}.json").read_text())["arms"]
        assert set(table) == ({"model"} if suite == "glue" else {"model", "scratch"})
        assert (out / f"{suite}.md").exists() and (out / f"{suite}.png").exists()
        for name, task in body["tasks"].items():
            task_results = json.loads((out / name / "results.json").read_text())
            assert len(task_results["pretrained"]["runs"]) == task["seeds"]
            assert task_results["metric"] == task["selection"]
            assert task["decontamination"]["decontaminated"] is None  # an export does not say what it trained on
        if suite == "glue":
            assert [t["name"] for t in table["model"]["tasks"]] == ["mnli", "mrpc", "rte"]
            assert body["tasks"]["mrpc"]["selection"] == "f1" and body["tasks"]["mrpc"]["start_from"] == "mnli"
            assert body["tasks"]["rte"]["start_from"] == "mnli" and body["tasks"]["rte"]["seeds"] == 5
            mnli = table["model"]["tasks"][0]
            assert set(mnli["metrics"]) == {"accuracy", "accuracy (validation_mismatched)"}
            assert table["model"]["average"]["of"] == 8 and table["model"]["average"]["tasks"] == 3
        if suite == "squad_v2":
            assert body["tasks"]["squad_v2"]["scored"] == {"validation": "validation"}
        if suite == "conll2003":
            assert body["tasks"]["conll2003"]["tag_scheme"] == "IOB1"
    # beside a baseline, RTE starts from the model as the baseline does: MNLI's transfer is not counted as gain
    out = tmp_path / "out" / "glue-scratch"
    assert finetune_main([hf, "--suite", "glue", "--data", data["glue"], "--output", str(out), "--epochs", "1",
                          "--lr", "1e-3", "--baseline", "scratch", "--baseline-lr", "1e-3", "--bootstrap", "0"]) == 0
    body = json.loads((out / "results.json").read_text())
    assert body["tasks"]["rte"]["start_from"] is None and "MNLI's transfer" in body["notes"][0]
    with pytest.raises(SystemExit):
        finetune_main([hf, "--suite", "nope", "--data", "x", "--output", str(tmp_path / "x")])


@pytest.mark.parametrize("argv, message", [
    (["--suite", "glue", "--output", "o"], "--suite needs --data DIR"),
    (["--suite", "glue", "--data", "d", "--task", "pair", "--output", "o"], "--suite sets the task, splits and metric"),
    (["--task", "pair", "--output", "o"], "--task, --train and --validation are required"),
])
def test_suite_flags_are_checked_in_one_line(argv, message, capsys):
    from downstream.finetune.command import finetune_main

    assert finetune_main(["model", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_runs_prep_record_is_found_and_mnli_splits_map_to_the_jobs(tmp_path):
    from downstream.finetune.suites import run

    pairs = tmp_path / "prep" / "pairs"
    pairs.mkdir(parents=True)
    record = {"ngram": 13, "files": [{"url": "/x/dev.tsv", "sha256": "a" * 64, "long_texts": 3}]}
    (pairs / "manifest.json").write_text(json.dumps({"config": {"decontamination": record}}))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train_config.json").write_text(json.dumps({"data": str(pairs)}))
    assert run._prep_record(str(tmp_path / "run")) == record
    assert run._prep_record(str(tmp_path / "prep")) is None  # an export, or anything else: unknown
    (task,) = [t for t in suites.load("glue", _write(tmp_path / "glue", GLUE_FILES)) if t.name == "mnli"]
    files = {s: f"{s}.jsonl" for s in task.splits}
    assert run._job_splits(task, files) == ({"train": "train.jsonl", "validation": "validation.jsonl",
                                             "test": "validation_mismatched.jsonl"},
                                            {"validation": "validation", "validation_mismatched": "test"}, [])
    held = dataclasses.replace(task, splits={s: [] for s in ("train", "validation", "test", "test_mismatched")})
    _, where, unscored = run._job_splits(held, {s: s for s in held.splits})
    assert where == {"validation": "validation", "test": "test"} and unscored == ["test_mismatched"]


def _repeat_rows(tsv: str, times: int) -> str:
    header, *rows = tsv.splitlines(keepends=True)
    return header + "".join(rows * times)
