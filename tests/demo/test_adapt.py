"""`clozeforge demo --adapt`: its refusal without a finished demo, the man-page corpus it continues on, and its scoring stage."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from downstream.finetune.builtin.man_sections import write_pages

ROFF = """.TH LS 1
.SH NAME
ls \\- list directory contents
.SH DESCRIPTION
List information about the FILEs (the current directory by default) in a long and careful way.
.PP
Sort entries alphabetically if none of the sorting options is given at all.
"""


def _page(root, section: str, name: str, text: str = ROFF) -> None:
    os.makedirs(root / f"man{section}", exist_ok=True)
    with gzip.open(root / f"man{section}" / f"{name}.{section}.gz", "wt", encoding="utf-8") as f:
        f.write(text)


def test_the_man_page_corpus_is_prose_pages_without_aliases_in_a_fixed_order(tmp_path):
    root = tmp_path / "man"
    for section, name in (("1", "ls"), ("1", "cp"), ("5", "passwd"), ("8", "mount")):
        _page(root, section, name)
    _page(root, "1", "dir", ".so man1/ls.1\n")  # an alias: no page of its own
    out = tmp_path / "man.jsonl"
    size = write_pages(str(out), 10_000, root=str(root))
    docs = [json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert size == out.stat().st_size and len(docs) == 4
    assert all(d.startswith("List information about the FILEs") and "ls - list" not in d and "\\" not in d for d in docs)
    again = tmp_path / "again.jsonl"
    write_pages(str(again), 10_000, root=str(root))
    assert again.read_bytes() == out.read_bytes()
    assert write_pages(str(tmp_path / "cut.jsonl"), 1, root=str(root)) < size  # stops once past max_bytes


def test_adapt_without_a_finished_demo_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "clozeforge", "demo", "--adapt", "--workdir", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--adapt continues a finished demo's export" in lines[0] and "Traceback" not in done.stderr


@pytest.mark.integration  # `clozeforge score` twice, as the demo runs it
def test_adapt_scores_both_models_on_the_tasks_held_out_text(tmp_path, capsys):
    """demo --adapt's scoring stage (flows.score_both): the man-sections task's test rows, one a line, scored by
    `clozeforge score` for the source and the adapted model; the same model twice gives the same figures."""
    pytest.importorskip("transformers")
    from demo.flows import score_both
    from downstream.export import export_hf
    from tests.helpers import learned_vocab_dir
    from trainer.model import BertForPretraining, ModelConfig

    rows = [{"text": f"List information about the FILEs\nin a long listing, number {i}.", "label": "1 commands"} for i in range(6)]
    task = tmp_path / "task"
    task.mkdir()
    (task / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    vocab = learned_vocab_dir(tmp_path / "vocab", [r["text"] for r in rows], vocab_size=200)
    shape = ModelConfig(vocab_size=200, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=48, max_position_embeddings=64)
    export_hf(BertForPretraining(shape, seed=1).state_dict(), shape, vocab, str(tmp_path / "hf"))
    adapted = tmp_path / "adapt"
    adapted.mkdir()
    score_both(str(tmp_path / "hf"), str(tmp_path / "hf"), str(task), str(adapted))
    assert (adapted / "heldout.txt").read_text(encoding="utf-8").splitlines() == [" ".join(r["text"].split()) for r in rows]
    source, again = (json.loads((adapted / f"score-{name}.json").read_text()) for name in ("source", "adapted"))
    assert source["lines"]["scored"] == 6 and source["mlm_accuracy"] == again["mlm_accuracy"]
    assert "held-out masked-LM accuracy" in capsys.readouterr().out


def test_adapt_from_a_directory_that_is_no_encoder_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "clozeforge", "demo", "--adapt", "--from", str(tmp_path),
                           "--workdir", str(tmp_path / "w")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--from:" in lines[0] and "neither config.json nor modules.json" in lines[0], done.stderr


def test_adapt_from_finds_the_encoder_of_a_sentence_transformers_directory_and_the_package(tmp_path):
    import argparse

    from demo.flows import adapt_source, has_masked_lm
    from downstream.public_encoders import installed

    root = tmp_path / "st"
    (root / "0_Transformer").mkdir(parents=True)
    (root / "0_Transformer" / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    (root / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "0_Transformer",
                                                    "type": "sentence_transformers.models.Transformer"}]))
    args = argparse.Namespace(source=str(root), from_package=None)
    assert adapt_source(args, str(tmp_path)) == (str(root), str(root / "0_Transformer"))
    assert not has_masked_lm(str(root / "0_Transformer"))
    if installed("all-minilm-l6-v2") is None:
        pytest.skip("the MiniLM package is not installed")
    args = argparse.Namespace(source=None, from_package="all-minilm-l6-v2")
    directory, encoder = adapt_source(args, str(tmp_path))
    assert directory == encoder == str(tmp_path / "sources" / "all-minilm-l6-v2")
    assert os.path.exists(os.path.join(directory, "model.safetensors")) and not has_masked_lm(encoder)
