"""--init-from's learning rate (trainer/start/rate.py), on configs and cards alone (no weights are read): the width
rule gives BERT-base's 1e-4 at width 768 and 6e-4 at the demo's 128; an export whose card records its training rate
gives that rate, a card without it (or a HuggingFace directory) the rule; a given --lr is kept; a resume keeps the
rate the run started with; each chooses with the one line start-up prints. The warning of a run whose accuracy did
not move (evaluate.unmoved) on exact figures. The runs themselves: test_init_from_training.py."""

from __future__ import annotations

import json
import os

import pytest

from downstream.export import export_hf
from tests.helpers import learned_vocab_dir
from trainer.config import TrainConfig
from trainer.evaluate import unmoved
from trainer.model import BertForPretraining, ModelConfig
from trainer.start import rate
from trainer.start.sources import open_source
from trainer.start.steps import settle

TEXTS = ["The manual page describes the options of the command and the files it reads.",
         "A small BERT learns to fill the masked word from both sides of the sentence."]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> str:
    return learned_vocab_dir(tmp_path_factory.mktemp("vocab"), TEXTS, vocab_size=200)


def bert_config_dir(path, **shape) -> str:
    """A HuggingFace BERT directory with config.json only (rate and architecture need no weights)."""
    os.makedirs(path)
    body = {"model_type": "bert", "architectures": ["BertForMaskedLM"], **shape}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(body, f)
    return str(path)


def settled(source: str, tmp_path, given: set[str] = frozenset(), **flags) -> tuple[TrainConfig, list[str]]:
    return settle(TrainConfig(data="unused", output=str(tmp_path / "run"), init_from=source, **flags), set(given))


def test_the_width_rule_gives_bert_base_its_rate_and_scales_as_one_over_width():
    assert rate.by_width(768) == 1e-4
    assert (rate.by_width(128), rate.by_width(256), rate.by_width(512), rate.by_width(1024)) == (6e-4, 3e-4, 1.5e-4, 7.5e-5)


def test_a_bert_base_config_gets_1e_4_from_the_config_alone(tmp_path):
    source = bert_config_dir(tmp_path / "bert-base")  # BertConfig's defaults: 768 wide, 12 layers
    config, lines = settled(source, tmp_path)
    assert config.lr == 1e-4
    assert lines[0] == ("lr 0.0001: the source records no training rate (a clozeforge run or export does); the width rule "
                        "1e-4 x 768 / hidden_size (768) (BERT-base's rate scaled as 1/width, µP-style: trainer/start/rate.py)")
    tiny = bert_config_dir(tmp_path / "tiny", hidden_size=128, num_attention_heads=2, intermediate_size=512, num_hidden_layers=2)
    config, lines = settled(tiny, tmp_path)
    assert config.lr == 6e-4 and lines[0].startswith("lr 0.0006: ") and "(128)" in lines[0]


def _export(vocab: str, path, card: dict | None) -> str:
    shape = ModelConfig(vocab_size=200, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=48, max_position_embeddings=32)
    export_hf(BertForPretraining(shape, seed=1).state_dict(), shape, vocab, str(path), card=card)
    return str(path)


def test_an_export_whose_card_records_its_rate_gives_that_rate(vocab, tmp_path):
    trained = TrainConfig(data="d", output="o", lr=2.5e-3, warmup_ratio=0.06)
    source = _export(vocab, tmp_path / "export", {"train_config": trained.to_dict(), "step": 7})
    found = open_source(source)
    assert found.training["lr"] == "0.0025" and found.training["warmup_ratio"] == "0.06"  # the card's table, as shown
    config, lines = settled(source, tmp_path)
    assert config.lr == 2.5e-3
    assert lines[0] == f"lr 0.0025: the rate the source's own training used ({source}/README.md, its train config)"


def test_a_card_without_a_train_config_or_a_usable_rate_falls_back_to_the_rule(vocab, tmp_path):
    bare = _export(vocab, tmp_path / "no-table", None)  # a card with no train config table
    config, lines = settled(bare, tmp_path)
    assert config.lr == rate.by_width(32) == 2.4e-3 and "the source records no training rate" in lines[0]
    odd = _export(vocab, tmp_path / "odd", {"train_config": {"lr": "fast", "seed": 1}})
    config, lines = settled(odd, tmp_path)
    assert config.lr == 2.4e-3 and lines[0].startswith(f"lr 0.0024: {odd}/README.md, its train config records no usable lr;")


def test_a_given_lr_is_kept_and_said(tmp_path):
    source = bert_config_dir(tmp_path / "bert-base")
    config, lines = settled(source, tmp_path, {"lr"}, lr=3e-5)
    assert config.lr == 3e-5 and lines[0] == "lr 3e-05: given (--lr)"


def test_a_resume_keeps_the_rate_the_run_started_with(tmp_path):
    run = tmp_path / "run"
    os.makedirs(run / "checkpoints" / "step_00000002")
    (run / "checkpoints" / "latest").write_text("step_00000002")
    (run / "train_config.json").write_text(json.dumps({"init_from": "/gone/source", "lr": 6e-4}))
    config, lines = settle(TrainConfig(data="d", output=str(run)), set())
    assert config.lr == 6e-4 and lines[0] == f"lr 0.0006: the rate this run started with ({run}/train_config.json)"


def test_the_card_reader_keeps_json_values_and_stops_at_the_next_section():
    card = '# x\n## Train config\n\n| key | value |\n|---|---|\n| lr | 0.001 |\n| mix | ["a|b"] |\n\n## Step\n\n| lr | 9 |'
    assert rate.card_training(card) == {"lr": "0.001", "mix": '["a|b"]'}
    assert rate.card_training("# a card of someone else's\n\n| lr | 0.1 |") is None


FIRST = {"mlm_acc": 0.1739, "mlm_acc_se": 0.0050, "mlm_loss": 5.00}


def test_the_warning_fires_when_accuracy_moved_within_its_se_and_the_loss_barely_fell_and_names_lr():
    warning = unmoved(FIRST, {"mlm_acc": 0.1770, "mlm_acc_se": 0.0051, "mlm_loss": 4.90}, 200, 1e-4)
    assert warning == ("warning: validation MLM accuracy moved +0.0031 in 200 steps (0.1739 at step 0, the source; 0.1770 "
                       "now), within its standard error 0.0051, and its loss fell 2.0%: at lr 0.0001 the run is not "
                       "adapting the source; rerun with a larger --lr (e.g. 0.001)")
    assert unmoved(FIRST, dict(FIRST), 10, 1e-9) is not None
    nothing = {"mlm_acc": 0.0, "mlm_acc_se": 0.0, "mlm_loss": 6.9}
    assert unmoved(nothing, dict(nothing), 2, 1e-9) is not None  # an accuracy of 0 has an SE of 0: nothing moved


def test_no_warning_when_accuracy_moved_past_its_se_either_way_or_the_loss_fell():
    assert unmoved(FIRST, {"mlm_acc": 0.1850, "mlm_acc_se": 0.0052, "mlm_loss": 4.99}, 200, 6e-4) is None
    assert unmoved(FIRST, {"mlm_acc": 0.1600, "mlm_acc_se": 0.0049, "mlm_loss": 5.01}, 200, 6e-4) is None
    # mini at 1e-3 by step 200 (trainer/start/README.md): its accuracy still within its SE, its loss down 19%
    assert unmoved({"mlm_acc": 0.1772, "mlm_acc_se": 0.0051, "mlm_loss": 5.907},
                   {"mlm_acc": 0.1802, "mlm_acc_se": 0.0052, "mlm_loss": 4.788}, 200, 1e-3) is None
    assert unmoved(FIRST, {"mlm_acc": 0.1739, "mlm_acc_se": 0.0050, "mlm_loss": 4.75}, 200, 6e-4) is None  # exactly 5%
    assert unmoved({}, {"mlm_acc": 0.1, "mlm_acc_se": 0.01, "mlm_loss": 5.0}, 200, 6e-4) is None  # no MLM head read at step 0
