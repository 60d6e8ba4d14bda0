"""`clozeforge finetune` end to end on tiny local data through real transformers: the four tasks, batches of
mixed lengths, SQuAD v2's questions without an answer, the baselines (scratch on its own grid, another model) and
the paired gain, determinism, the sequence length, the checkpoint sweep, the output directory's rules, and
one-line errors."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("sklearn")

from downstream.finetune.command import finetune_main  # noqa: E402

from tests.downstream.contextual.contextual_assets import fake_run  # noqa: E402  (a training RUN with stage-0 checkpoints)
from .finetune_assets import (  # noqa: E402
    classify_rows,
    pair_rows,
    span_rows,
    tag_rows,
    tiny_export,
    write_jsonl,
)

ROWS = {"classify": classify_rows, "pair": pair_rows, "tag": tag_rows, "span": span_rows}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    files = {task: write_jsonl(root / f"{task}.jsonl", rows()) for task, rows in ROWS.items()}
    return tiny_export(str(root)), files, root


def _run(hf, task, data, out, *extra) -> int:
    return finetune_main([hf, "--task", task, "--train", data, "--validation", data, "--test", data, "--output", str(out),
                          "--seeds", "1", "--epochs", "2", "--lr", "1e-3", *extra])


def _results(out) -> dict:
    with open(os.path.join(out, "results.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("task", list(ROWS))
def test_each_task_fine_tunes_and_saves_a_model_transformers_loads(assets, task, tmp_path):
    hf, files, _ = assets
    assert _run(hf, task, files[task], tmp_path / "out") == 0
    results = _results(tmp_path / "out")
    with open(files[task], "rb") as f:
        assert results["data"]["train"]["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert results["task"] == task and results["scored_on"] == "test"
    assert len(results["pretrained"]["scores"]) == 1 and 0 <= results["pretrained"]["mean"] <= 100
    with open(tmp_path / "out" / "predictions.jsonl") as f:
        assert len(f.readlines()) == len(ROWS[task]())
    model_dir = str(tmp_path / "out" / "model")
    if task in ("classify", "pair"):
        out = transformers.pipeline("text-classification", model=model_dir)("the team won the match")
        assert out[0]["label"] in results["labels"]
    elif task == "tag":
        out = transformers.pipeline("token-classification", model=model_dir)("Alice lives in Paris")
        assert all(o["entity"] in results["labels"] for o in out)
    else:  # transformers 5 dropped the question-answering pipeline; the model and tokenizer still load on their own
        model = transformers.AutoModelForQuestionAnswering.from_pretrained(model_dir)
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
        logits = model(**tokenizer("Where?", "In Paris.", return_tensors="pt"))
        assert logits.start_logits.shape == logits.end_logits.shape


def test_same_seed_same_scores_and_a_scratch_baseline(assets, tmp_path):
    hf, files, _ = assets
    args = ("--seeds", "2", "--baseline", "scratch", "--baseline-lr", "1e-3", "--baseline-lr", "3e-3")
    assert _run(hf, "classify", files["classify"], tmp_path / "a", *args) == 0
    assert _run(hf, "classify", files["classify"], tmp_path / "b", *args) == 0
    a, b = _results(tmp_path / "a"), _results(tmp_path / "b")
    for key in ("pretrained", "baseline"):
        assert [r["validation"] for r in a[key]["runs"]] == [r["validation"] for r in b[key]["runs"]]
        assert [r["history"] for r in a[key]["runs"]] == [r["history"] for r in b[key]["runs"]]
    assert a["gain"] == b["gain"]
    assert a["gain"]["mean"] == pytest.approx(a["pretrained"]["mean"] - a["baseline"]["mean"], abs=1e-3)  # 4 decimals
    differences = np.subtract(a["pretrained"]["scores"], a["baseline"]["scores"])  # seed by seed
    assert a["gain"]["se"] == pytest.approx(np.std(differences, ddof=1) / np.sqrt(2), abs=1e-3)
    lo, hi = a["gain"]["bootstrap"]
    assert lo <= hi and a["gain"]["bootstrap_examples"] == len(ROWS["classify"]())
    search = a["baseline"]["grid"]["search"]  # a given grid: searched as given, one round that adds nothing
    assert a["baseline"]["grid"] == {"lrs": [1e-3, 3e-3], "from": "--baseline-lr", "epochs": 2, "min_epochs": 1,
                                      "search": search}  # min_epochs: half of 2, the floor under --patience
    assert search["start"] == [1e-3, 3e-3] and [r["added"] for r in search["rounds"]] == [[]]
    means = [a["baseline"]["per_lr"][k]["validation_mean"] for k in ("0.001", "0.003")]
    assert search["at_edge"] == (None if means[0] == means[1] else "budget")  # two rates: the best is at an edge
    assert a["pretrained"]["grid"] == {"lrs": [1e-3], "from": "--lr", "epochs": 2, "min_epochs": 1, "search": {
        "start": [1e-3], "rounds": [{"lrs": [1e-3], "chosen": 1e-3, "added": []}], "at_edge": None}}  # one rate: no edge
    assert a["best_model"]["source"] == "pretrained" and a["best_model"]["lr"] == a["pretrained"]["lr"]
    # the two seeds are different runs: different batch orders give different losses
    histories = a["pretrained"]["runs"]
    assert histories[0]["history"][0]["loss"] != histories[1]["history"][0]["loss"]


def test_the_loop_learns_a_separable_task(assets, tmp_path):
    hf, _, root = assets
    data = write_jsonl(tmp_path / "c.jsonl", classify_rows(repeat=3))
    assert finetune_main([hf, "--task", "classify", "--train", data, "--validation", data, "--output", str(tmp_path / "o"),
                          "--seeds", "1", "--epochs", "12", "--lr", "3e-3", "--batch-size", "8"]) == 0
    assert _results(tmp_path / "o")["pretrained"]["mean"] > 50  # chance is 33; a loop that does not learn stays there


def test_probe_trains_the_head_only(assets, tmp_path):
    from downstream.finetune.loop import freeze

    hf, _, _ = assets
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hf, num_labels=3)
    freeze(model, "probe", 0)
    assert {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad} == {"classifier"}
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hf, num_labels=3)
    freeze(model, "last-n", 1)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(n.startswith("bert.encoder.layer.1.") for n in trainable)
    assert not any(n.startswith(("bert.encoder.layer.0.", "bert.embeddings.")) for n in trainable)



@pytest.mark.parametrize("config", [
    lambda: transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64),
    lambda: transformers.RobertaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64),
    lambda: transformers.ElectraConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                       intermediate_size=64, embedding_size=32),
    lambda: transformers.XLMConfig(vocab_size=50, emb_dim=32, n_layers=3, n_heads=2, n_langs=2, use_lang_emb=True),
], ids=["bert", "roberta", "electra", "xlm"])
def test_last_n_trains_the_top_layers_of_every_family(config):
    """--strategy last-n on each family's transformers class: the top layer trains, the layers below and the
    embeddings do not (XLM keeps a layer's parts in lists of their own, not under encoder.layer)."""
    from downstream.finetune.loop import freeze

    model = transformers.AutoModelForSequenceClassification.from_config(config())
    freeze(model, "last-n", 1)
    prefix = model.base_model_prefix + "."
    encoder = {n.removeprefix(prefix) for n, p in model.named_parameters() if p.requires_grad and n.startswith(prefix)}
    assert encoder and all(".2." in n or n.startswith("pooler.") for n in encoder), sorted(encoder)
    head = [n for n, p in model.named_parameters() if not n.startswith(prefix)]
    assert head and all(p.requires_grad for n, p in model.named_parameters() if not n.startswith(prefix))

def test_output_directory_is_ours_or_refused(assets, tmp_path, capsys):
    hf, files, _ = assets
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert _run(hf, "classify", files["classify"], out) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not written by clozeforge finetune" in err and "--overwrite" in err
    assert (out / "notes.txt").exists()
    assert _run(hf, "classify", files["classify"], out, "--overwrite") == 0
    assert not (out / "notes.txt").exists() and (out / "results.json").exists()
    assert _run(hf, "classify", files["classify"], out) == 0  # our own directory: replaced whole
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".out.")]  # no staging or lock left behind


@pytest.mark.parametrize("rows,message", [
    ([{"sentence": "x", "label": "a"}], "no column 'text'"),
    ([{"text": "x", "label": "a"}, {"text": "y", "label": "b"}, {"text": "z", "label": "a"}, {"text": "w", "label": "b"}],
     None),
])
def test_bad_input_is_one_line_and_exit_2(assets, tmp_path, capsys, rows, message):
    hf, files, _ = assets
    valid = write_jsonl(tmp_path / "v.jsonl", rows if message else [{"text": "q", "label": "unseen"}])
    train = valid if message else write_jsonl(tmp_path / "t.jsonl", rows)
    code = finetune_main([hf, "--task", "classify", "--train", train, "--validation", valid, "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err
    assert (message or f"{valid}:1: column 'label': label 'unseen' never appears") in err
    assert not (tmp_path / "o").exists()


def test_checkpoint_sweep_writes_the_figure_and_table(assets, tmp_path):
    hf, files, _ = assets
    run = fake_run(str(tmp_path), hf, [10, 20])
    out = tmp_path / "sweep"
    assert _run(run, "classify", files["classify"], out, "--checkpoints", "all", "--baseline", "scratch") == 0
    results = _results(out)
    assert [p["step"] for p in results["checkpoints"]] == [10, 20] and results["baseline"] is not None
    assert (out / "downstream.png").stat().st_size > 1000
    table = (out / "downstream.md").read_text()
    assert "| 10 |" in table and "| 20 |" in table and "scratch" in table
    assert _run(run, "classify", files["classify"], tmp_path / "one", "--checkpoints", "20") == 0
    assert _run(run, "classify", files["classify"], tmp_path / "bad", "--checkpoints", "30") == 2


def test_float_labels_are_a_regression_scored_by_pearson(assets, tmp_path):
    hf, _, _ = assets
    rows = [{"text": r["text"], "label": {"sport": 0.1, "food": 0.5, "tech": 0.9}[r["label"]]} for r in classify_rows()]
    data = write_jsonl(tmp_path / "r.jsonl", rows)
    assert _run(hf, "classify", data, tmp_path / "o") == 0
    results = _results(tmp_path / "o")
    assert results["labels"] == "regression" and results["metric"] == "pearson"
    assert results["pretrained"]["runs"][0]["validation"]["score"] == results["pretrained"]["runs"][0]["validation"]["pearson"]
    assert "spearman" in results["pretrained"]["runs"][0]["validation"]
    with open(tmp_path / "o" / "predictions.jsonl") as f:
        assert isinstance(json.loads(f.readline())["prediction"], float)


def _mixed_length_rows(task: str) -> list[dict]:
    """Rows far shorter than the longest: every batch of 2 but one is cut to a fraction of the padded width."""
    long_words = " ".join(["the team won the match and the fans cheered the home side"] * 4).split()
    if task == "classify":
        return [*classify_rows(), {"text": " ".join(long_words), "label": "sport"}]
    if task == "tag":
        return [*tag_rows(), {"tokens": long_words, "tags": ["O"] * len(long_words)},
                {"tokens": ["Rome"], "tags": ["B-LOC"]}, {"tokens": ["Bob", "ran"], "tags": ["B-PER", "O"]}]
    context = " ".join(long_words) + " Paris is the capital of France."
    return [*span_rows(), {"question": "What is the capital of France?", "context": context,
                           "answers": {"text": ["Paris"], "answer_start": [context.index("Paris")]}}]


@pytest.mark.parametrize("task", ["classify", "tag", "span"])
def test_batches_of_mixed_lengths(assets, task, tmp_path):
    # a batch is cut to its longest row; the cut 2-D labels of tag once failed transformers' labels.view(-1)
    hf, _, _ = assets
    data = write_jsonl(tmp_path / "m.jsonl", _mixed_length_rows(task))
    assert _run(hf, task, data, tmp_path / "o", "--batch-size", "2") == 0
    assert 0 <= _results(tmp_path / "o")["pretrained"]["mean"] <= 100


def test_long_questions_blank_contexts_and_blank_answers(assets, tmp_path):
    # a question longer than the window once failed the tokenizer's truncation; a context of spaces indexed nothing
    hf, _, _ = assets
    rows = span_rows() + [
        {"question": " ".join(["which"] * 200) + "?", "context": "Paris is big.", "answers": {"text": ["Paris"], "answer_start": [0]}},
        {"question": "q?", "context": "   ", "answers": {"text": [" "], "answer_start": [0]}},
        {"question": "q?", "context": "Paris is big.", "answers": {"text": [" "], "answer_start": [5]}}]
    data = write_jsonl(tmp_path / "q.jsonl", rows)
    assert _run(hf, "span", data, tmp_path / "o", "--max-seq-len", "48", "--stride", "8") == 0
    results = _results(tmp_path / "o")
    assert results["data"]["train"]["dropped"] == {"empty_question_or_context": 1}
    assert results["data"]["train"]["examples"] == len(rows) - 1


def test_questions_without_an_answer_are_kept_and_scored(assets, tmp_path):
    hf, _, _ = assets
    rows = span_rows() + [{"question": "Who painted the river?", "context": "The river Thames flows through London.",
                           "answers": {"text": [], "answer_start": []}},
                          {"question": "What is the capital of Spain?", "context": "Paris is the capital of France.",
                           "answers": {"text": [], "answer_start": []}}]
    data = write_jsonl(tmp_path / "v2.jsonl", rows)
    assert _run(hf, "span", data, tmp_path / "o") == 0
    results = _results(tmp_path / "o")
    assert results["data"]["test"]["examples"] == len(rows) and results["data"]["test"]["dropped"] == {}
    run = results["pretrained"]["runs"][0]
    assert "null_threshold" in run["calibration"] and "NoAns_f1" in run["test"]
    assert "null_threshold" in results["best_model"]["calibration"]
    with open(tmp_path / "o" / "predictions.jsonl") as f:
        records = [json.loads(line) for line in f]
    assert [r["answers"] for r in records[-2:]] == [[], []] and all(isinstance(r["prediction"], str) for r in records)


def test_another_model_as_the_baseline_and_a_gain_within_its_se(assets, tmp_path, capsys):
    # the same export on both arms with the same grid: identical runs, a gain of 0 ± 0, and one warning line
    hf, files, _ = assets
    assert _run(hf, "classify", files["classify"], tmp_path / "o", "--baseline", hf, "--baseline-lr", "1e-3") == 0
    results = _results(tmp_path / "o")
    base = results["baseline"]
    assert base["kind"] == "model" and base["model"] == os.path.abspath(hf) and base["grid"]["epochs"] == 2
    assert results["gain"]["mean"] == 0 and results["gain"]["se"] == 0 and results["gain"]["bootstrap"] == [0, 0]
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "within its standard error" in warnings[0]


def test_scratch_gets_its_own_default_grid(assets, tmp_path):
    """No --baseline-lr: scratch's grid starts a rung above the model's default for its width (lr_grid.start) and
    grows at an edge; --baseline-epochs sets its budget apart from --epochs."""
    from downstream.finetune import protocol as lr_grid

    hf, files, _ = assets
    assert _run(hf, "classify", files["classify"], tmp_path / "o", "--baseline", "scratch", "--baseline-epochs", "1",
                "--bootstrap", "0") == 0
    base = _results(tmp_path / "o")["baseline"]
    search = base["grid"]["search"]
    assert base["kind"] == "scratch" and base["grid"]["epochs"] == 1 and base["grid"]["from"].startswith("default")
    assert search["start"] == list(lr_grid.start(32, from_scratch=True)) == [1e-3, 3e-3, 1e-2]
    added = [lr for r in search["rounds"] for lr in r["added"]]
    assert base["grid"]["lrs"] == sorted(search["start"] + added) and set(base["per_lr"]) == {f"{x:g}" for x in base["grid"]["lrs"]}
    assert len(added) <= lr_grid.DEFAULT_EXTEND and search["rounds"][-1]["added"] == []
    assert "bootstrap" not in _results(tmp_path / "o")["gain"]


def test_sequence_length_defaults_to_the_trained_length(assets, tmp_path, capsys):
    import shutil

    hf, files, _ = assets
    short = str(tmp_path / "short")
    shutil.copytree(hf, short)
    with open(os.path.join(short, "tokenizer_config.json")) as f:
        tokenizer_config = json.load(f)
    with open(os.path.join(short, "tokenizer_config.json"), "w") as f:
        json.dump({**tokenizer_config, "model_max_length": 16}, f)
    assert _run(short, "classify", files["classify"], tmp_path / "a") == 0
    assert _results(tmp_path / "a")["max_seq_len"]["value"] == 16
    assert "warning" not in capsys.readouterr().err
    assert _run(short, "classify", files["classify"], tmp_path / "b", "--max-seq-len", "32") == 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--max-seq-len 32 is longer than the model trained on (16)" in err
    assert _results(tmp_path / "b")["max_seq_len"]["value"] == 32
    assert _run(short, "classify", files["classify"], tmp_path / "c", "--max-seq-len", "100") == 0
    assert "cut to the model's 64 positions" in capsys.readouterr().err
    assert _results(tmp_path / "c")["max_seq_len"]["value"] == 64


@pytest.mark.parametrize("args,message", [
    (("--metric", "pearson"), "--metric pearson: not a metric of --task classify"),
    (("--baseline", "/nonexistent/model"), "/nonexistent/model: neither an export"),
    (("--baseline-lr", "1e-3"), "--baseline-lr and --baseline-epochs need --baseline"),
    (("--min-epochs", "-1"), "--min-epochs must be >= 0, got -1"),
    (("--max-seq-len", "16", "--task", "span"), "--stride 32 leaves no room for a question in windows of 16 pieces"),
])
def test_new_flags_refuse_in_one_line(assets, tmp_path, capsys, args, message):
    hf, files, _ = assets
    task = args[args.index("--task") + 1] if "--task" in args else "classify"
    code = _run(hf, task, files[task], tmp_path / "o", *args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and message in err
