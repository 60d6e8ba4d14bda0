"""The heads' warm-up (trainer/start/warmup.py) through real DeepSpeed runs (CPU, fp32, gloo): started from a bare
BertModel (no MLM head), the run trains the fresh MLM head alone for --head-warmup-steps, every weight the source
gave unchanged to the bit (ZeRO 0 on one rank, with a stop and resume in the middle of the warm-up; ZeRO 2 on two
ranks), then trains them; metrics.jsonl marks the warm-up's steps; `0` skips it."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.helpers import run_cli  # noqa: E402
from trainer.checkpoint import store  # noqa: E402
from trainer.model.hf_names import our_name  # noqa: E402
from trainer.start import warmup  # noqa: E402

pytestmark = pytest.mark.integration  # starts processes (CLI, DeepSpeed ranks)
QUICK = ("--batch-size", "4", "--log-every", "1", "--eval-every", "0", "--num-workers", "0", "--precision", "fp32")


@pytest.fixture(scope="module")
def bare(prepped, tmp_path_factory) -> dict[str, torch.Tensor]:
    """A random transformers BertModel over the prepped data's vocabulary (its path, and its tensors by our names)."""
    path = str(tmp_path_factory.mktemp("bare"))
    with open(os.path.join(prepped, "vocab", "vocab.txt")) as f:
        size = len(f.read().splitlines())
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128)
    model = transformers.BertModel(config)
    model.save_pretrained(path)
    shutil.copy(os.path.join(prepped, "vocab", "vocab.txt"), path)
    return {"path": path, "tensors": {our_name(k): v.detach().clone() for k, v in model.state_dict().items()
                                      if not k.endswith("position_ids")}}


def train(prepped: str, run: str, *extra: str, nproc: int = 1):
    result = run_cli("train", "--data", os.path.join(prepped, "pairs"), "--output", run, *QUICK,
                     "--nproc-per-node", str(nproc), *extra)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def changed(run: str, step: int, source: dict[str, torch.Tensor]) -> tuple[list[str], dict[str, torch.Tensor]]:
    """(the source's tensors the checkpoint of `step` holds other bits of, the checkpoint's weights)."""
    state, _, _ = store.consolidated_state_dict(run, store.tag_for(step))
    assert set(source) <= set(state), sorted(set(source) - set(state))[:3]
    return [k for k, v in source.items() if not torch.equal(state[k], v)], state


def test_the_warm_up_holds_the_source_to_the_bit_across_a_resume_then_trains_it(prepped, bare, tmp_path):
    run = str(tmp_path / "run")
    said = train(prepped, run, "--init-from", bare["path"], "--zero-stage", "0", "--max-steps", "6",
                 "--head-warmup-steps", "4", "--save-every", "2", "--stop-after", "2")
    assert "head warm-up: the first 4 steps train only the fresh MLM head" in said, said[-2000:]
    held, state2 = changed(run, 2, bare["tensors"])
    assert held == [], held[:5]  # mid warm-up: nothing the source gave has moved
    with open(os.path.join(run, "train_config.json")) as f:
        assert json.load(f)[warmup.RECORD_KEY] == {"steps": 4, "fresh": ["cls.predictions.", "cls.seq_relationship."]}
    # a resume in the middle of the warm-up (no --init-from, nor --head-warmup-steps: the run recorded its 4)
    said = train(prepped, run, "--max-steps", "6", "--save-every", "2", "--stop-after", "2")
    assert "head warm-up over at step 4" in said, said[-2000:]
    held, state4 = changed(run, 4, bare["tensors"])
    assert held == [], held[:5]
    head = "cls.predictions.transform.dense.weight"
    assert not torch.equal(state2[head], state4[head])  # the fresh head trained on
    train(prepped, run, "--max-steps", "6", "--save-every", "2")
    moved, _ = changed(run, 6, bare["tensors"])
    assert len(moved) == len(bare["tensors"]), sorted(set(bare["tensors"]) - set(moved))[:5]  # then all of it trains
    with open(os.path.join(run, "metrics.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    marked = {r["step"]: r.get("head_warmup", False) for r in steps if "loss" in r and "split" not in r}
    assert marked == {1: True, 2: True, 3: True, 4: True, 5: False, 6: False}, marked


def test_zero_2_on_two_ranks_holds_the_source_during_the_warm_up(prepped, bare, tmp_path):
    run = str(tmp_path / "run")
    train(prepped, run, "--init-from", bare["path"], "--zero-stage", "2", "--max-steps", "4", "--head-warmup-steps", "2",
          "--save-every", "2", nproc=2)
    held, _ = changed(run, 2, bare["tensors"])
    assert held == [], held[:5]
    moved, _ = changed(run, 4, bare["tensors"])
    assert len(moved) == len(bare["tensors"]), sorted(set(bare["tensors"]) - set(moved))[:5]


def test_zero_skips_the_warm_up_and_a_sentence_transformers_pooling_reaches_the_export_card(prepped, bare, tmp_path):
    source = shutil.copytree(bare["path"], tmp_path / "st")  # the bare encoder as a sentence-transformers directory
    (source / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (source / "1_Pooling").mkdir()
    (source / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    run = str(tmp_path / "run")
    said = train(prepped, run, "--init-from", str(source), "--zero-stage", "0", "--max-steps", "2", "--head-warmup-steps", "0")
    assert "head warm-up" not in said and "sentence-transformers: BertModel, cls pooling" in said
    moved, _ = changed(run, 2, bare["tensors"])
    assert moved, "the encoder trains from the first step"
    assert run_cli("export", run, "--output", str(tmp_path / "hf")).returncode == 0
    with open(tmp_path / "hf" / "README.md") as f:
        card = f.read()
    from schemas.encoder_layout import pooling_of_card

    assert pooling_of_card(card, "README.md").to_dict() == {"mode": "cls", "normalize": False, "max_seq_length": None}
