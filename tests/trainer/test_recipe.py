"""ModernBERT's recipe as flags (issue 61): the warmup-stable-decay schedule with its 1-sqrt cooldown, batch-size warmup
(a step trains on its batch's first rows, cut alike in the padded and the unpadded form), and weight decay on neither
norms nor biases of any network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.builders import batch_share, lr_lambda
from trainer.config import TrainConfig, TrainError
from trainer.data.batch_forms import first_rows, rows_of, unpadded
from trainer.heads import IGNORE_INDEX
from trainer.model import ModelConfig, build
from trainer.optim import parameter_groups


def config(**kw) -> TrainConfig:
    return TrainConfig(data="pairs", output="run", **kw)


def test_wsd_holds_the_peak_then_decays_as_one_minus_sqrt():
    factor = lr_lambda(config(max_steps=100, warmup_steps=10, schedule="wsd", decay_ratio=0.2))
    assert [factor(s) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert all(factor(s) == 1.0 for s in range(10, 80))  # stable
    assert [round(factor(s), 6) for s in (80, 83, 99)] == [round(1 - (k / 20) ** 0.5, 6) for k in (1, 4, 20)]
    assert factor(99) == 0.0
    with pytest.raises(TrainError, match=r"--decay-ratio must be in \(0, 1\]"):
        config(decay_ratio=0.0)


def test_batch_warmup_grows_the_share_from_an_eighth_to_all():
    c = config(max_steps=100, batch_warmup_ratio=0.1)
    assert [batch_share(c, s) for s in (0, 5, 10, 50)] == [0.125, 0.125 + 0.875 * 0.5, 1.0, 1.0]
    assert batch_share(config(max_steps=100), 0) == 1.0  # off by default


def _masked_batch() -> dict[str, np.ndarray]:
    g = np.random.default_rng(0)
    lengths = np.array([12, 9, 7, 5])
    seq = 12
    ids = g.integers(5, 100, (4, seq))
    mask = (np.arange(seq) < lengths[:, None]).astype(np.int64)
    positions = np.array([[1, 3, 5], [2, 4, 0], [1, 0, 0], [3, 0, 0]])
    labels = np.where(np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]]) == 1, g.integers(5, 100, (4, 3)), IGNORE_INDEX)
    return {"input_ids": ids * mask + (1 - mask), "token_type_ids": np.zeros_like(ids), "attention_mask": mask,
            "mlm_positions": positions, "mlm_labels": labels, "next_sentence_label": np.zeros(4, np.int64)}


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_the_first_rows_give_the_loss_of_a_batch_of_those_rows_in_both_forms(family):
    model = build(ModelConfig.preset("tiny", vocab_size=100, family=family, pad_token_id=1, hidden_dropout=0.0,
                                     attention_dropout=0.0), seed=1).eval()
    full = _masked_batch()
    small = {k: v[:2] for k, v in full.items()}
    for form in (lambda b: b, lambda b: unpadded(b, max_seq_len=12, predictions=None, pad_id=1)):
        host = form(full)
        cut = first_rows(host, 2)(host)
        assert rows_of(host) == 4 and rows_of(cut) == 2
        with torch.no_grad():
            ours = model(**{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in cut.items()})
            reference = model(**{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in form(small).items()})
        assert int(ours["mlm_count"]) == 5 and ours["mlm_loss"].item() == pytest.approx(reference["mlm_loss"].item(), abs=1e-6)


def test_no_norm_and_no_bias_is_decayed_in_any_network():
    for family in ("bert", "modernbert"):
        model = build(ModelConfig.preset("tiny", vocab_size=100, family=family, pad_token_id=1))
        decayed, exempt = parameter_groups(model, 0.01)
        assert all(p.dim() == 2 for p in decayed["params"]) and all(p.dim() == 1 for p in exempt["params"])
        assert sum(p.numel() for g in (decayed, exempt) for p in g["params"]) == sum(p.numel() for p in model.parameters())
