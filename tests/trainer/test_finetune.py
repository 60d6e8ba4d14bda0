"""`clozeforge finetune` end to end on tiny local data through real transformers: the four tasks, the scratch
baseline, determinism, the checkpoint sweep, the output directory's rules, and one-line errors."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("sklearn")

from trainer.downstream.finetune.command import finetune_main  # noqa: E402

from .finetune_assets import classify_rows, pair_rows, span_rows, tag_rows, tiny_export, write_jsonl  # noqa: E402

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
    args = ("--seeds", "2", "--baseline", "scratch")
    assert _run(hf, "classify", files["classify"], tmp_path / "a", *args) == 0
    assert _run(hf, "classify", files["classify"], tmp_path / "b", *args) == 0
    a, b = _results(tmp_path / "a"), _results(tmp_path / "b")
    for key in ("pretrained", "baseline"):
        assert [r["validation"] for r in a[key]["runs"]] == [r["validation"] for r in b[key]["runs"]]
        assert [r["history"] for r in a[key]["runs"]] == [r["history"] for r in b[key]["runs"]]
    assert a["gain"]["mean"] == pytest.approx(a["pretrained"]["mean"] - a["baseline"]["mean"])
    assert a["gain"]["se"] == pytest.approx((a["pretrained"]["se"] ** 2 + a["baseline"]["se"] ** 2) ** 0.5)
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
    from trainer.downstream.finetune.recipe import freeze

    hf, _, _ = assets
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hf, num_labels=3)
    freeze(model, "probe", 0)
    assert {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad} == {"classifier"}
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hf, num_labels=3)
    freeze(model, "last-n", 1)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(n.startswith("bert.encoder.layer.1.") for n in trainable)
    assert not any(n.startswith(("bert.encoder.layer.0.", "bert.embeddings.")) for n in trainable)


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


def _fake_run(root, hf_vocab_source: str, steps: list[int]) -> str:
    """A training RUN directory with stage-0 checkpoints at `steps`, as `clozeforge train` writes them."""
    import shutil

    import torch

    from trainer.checkpoint import integrity
    from trainer.model import BertForPretraining, ModelConfig

    run = os.path.join(root, "run")
    shutil.copytree(os.path.join(os.path.dirname(hf_vocab_source), "vocab"), os.path.join(run, "vocab"))
    with open(os.path.join(hf_vocab_source, "config.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    config = ModelConfig(vocab_size=vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                         max_position_embeddings=64)
    for step in steps:
        torch.manual_seed(step)
        folder = os.path.join(run, "checkpoints", f"step_{step:08d}")
        os.makedirs(folder)
        torch.save({"module": BertForPretraining(config).state_dict(), "model_config": config.to_dict(), "step": step,
                    "train_config": {}}, os.path.join(folder, "mp_rank_00_model_states.pt"))
        integrity.write_record(folder)
    with open(os.path.join(run, "checkpoints", "latest"), "w") as f:
        f.write(f"step_{steps[-1]:08d}")
    return run


def test_checkpoint_sweep_writes_the_figure_and_table(assets, tmp_path):
    hf, files, _ = assets
    run = _fake_run(str(tmp_path), hf, [10, 20])
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
    assert "spearman" in results["pretrained"]["runs"][0]["validation"]
    with open(tmp_path / "o" / "predictions.jsonl") as f:
        assert isinstance(json.loads(f.readline())["prediction"], float)
