"""The executed-FLOPs count behind the honest MFU (trainer/metrics.py ExecutedFlops, bench/README.md#honest-mfu): a
hand-worked count on a small shape, and torch's own FlopCounterMode on a real training step of the tiny model in the
unpadded and padded forms (the padded step executes more than it is credited: its padding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tests.trainer.test_batch_forms import LENGTHS, VOCAB, _masked, _tensors
from trainer.data.batch_forms import FORMS
from trainer.metrics import ExecutedFlops, train_flops_per_token
from trainer.model import BertForPretraining, ModelConfig


def test_the_count_by_hand():
    """L 2, h 8, f 16, V 50; rows of 3 and 5 tokens, 2 predictions, NSP: 6 x (8·2·512 + 34·2·16 + 2·464 + 2·80)."""
    flops = ExecutedFlops(layers=2, hidden=8, intermediate=16, vocab=50, pooler=True, sbo=False)
    assert flops.count(rows=2, tokens=8, attended=3 * 3 + 5 * 5, predictions=2) == 6 * (8192 + 1088 + 928 + 160) == 62208
    with_sbo = ExecutedFlops(layers=2, hidden=8, intermediate=16, vocab=50, pooler=False, sbo=True)
    assert with_sbo.count(rows=2, tokens=8, attended=34, predictions=2) == 6 * (8192 + 1088 + 928 + 2 * (4 * 64 + 400))
    batch = {"cu_seqlens": np.array([0, 5, 8], dtype=np.int32), "mlm_labels": np.array([7, 9])}
    padded = {"attention_mask": np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), "mlm_labels": np.array([[7, -100], [9, -100]])}
    assert flops.of_batch(batch) == flops.of_batch(padded) == 62208  # the same rows and predictions in either form


def _counted(model: BertForPretraining, batch: dict[str, torch.Tensor]) -> int:
    """FlopCounterMode's total for one forward and backward; SDPA's math kernel, which it counts as matrix products
    (the CPU's fused kernel is not in its registry)."""
    model.zero_grad(set_to_none=True)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(**batch)["loss"].backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("family, sbo", [("bert", False), ("bert", True), ("roberta", False)])
def test_the_count_is_what_a_training_step_executes(family, sbo):
    """BERT, SpanBERT and RoBERTa (no pooler). Unpadded: torch counts exactly ExecutedFlops' figure (every matrix product of forward and backward at real
    tokens, rows and predictions). Padded, the same rows: torch counts more (attention over padded keys, projections
    at padded positions), ExecutedFlops the same figure; the old per-token figure credits the decoder at every token."""
    config = ModelConfig.preset("tiny", vocab_size=VOCAB, use_sbo=sbo, family=family)
    model = BertForPretraining(config, seed=0).train()
    arrays = _masked(LENGTHS, seed=4, strategy="span" if sbo else "bert")
    if family == "roberta":  # no pooler, no NSP head: ExecutedFlops.of counts none
        arrays["token_type_ids"][:] = 0
        del arrays["next_sentence_label"]
    packed = FORMS["unpadded"].shape(arrays, max_seq_len=40, predictions=None, pad_id=0)
    executed = ExecutedFlops.of(config)
    expected = executed.of_batch(packed)
    assert _counted(model, _tensors(packed)) == expected
    assert executed.of_batch(arrays) == expected
    assert _counted(model, _tensors(arrays)) > expected  # the padded step computes at its padding too
    tokens = int(arrays["attention_mask"].sum())
    old = tokens * train_flops_per_token(model.num_parameters(), config.num_layers, config.hidden_size, 40)
    assert old > expected


def test_the_progress_line_shows_both_figures(tmp_path, capsys):
    from trainer.metrics import MetricsLog

    log = MetricsLog(str(tmp_path), max_steps=10)
    log.progress({"step": 1, "loss": 7.5, "mlm_loss": 6.8, "lr": 1e-4, "tokens_per_s": 1000.0, "mfu": 0.346, "mfu_executed": 0.28})
    log.progress({"step": 2, "loss": 7.4, "lr": 1e-4, "tokens_per_s": 1000.0, "mfu": None, "mfu_executed": None})
    log.close()
    first, second = capsys.readouterr().out.splitlines()
    assert "| mfu 34.6% (executed 28.0%) |" in first and "mfu" not in second
