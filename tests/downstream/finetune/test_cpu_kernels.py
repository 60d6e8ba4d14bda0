"""Fine-tuning's CPU dropout (downstream/finetune/cpu_kernels.py, issue 62): transformers' BERT, RoBERTa and ELECTRA
classes trained with lane-mask dropout give eager attention's arithmetic, drop what p says, and are left as they were;
XLM and ModernBERT keep transformers' own dropout."""

from __future__ import annotations

import importlib

import pytest
import torch

transformers = pytest.importorskip("transformers")

from downstream.finetune import cpu_kernels  # noqa: E402

SIZES = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=64, num_labels=3)


def _model(kind: str, dropout: float = 0.1):
    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(**SIZES, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        return transformers.BertForSequenceClassification(config)
    if kind == "roberta":
        config = transformers.RobertaConfig(**SIZES, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        return transformers.RobertaForSequenceClassification(config)
    config = transformers.ElectraConfig(**SIZES, embedding_size=32, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return transformers.ElectraForSequenceClassification(config)


def _dispatches(kind: str) -> bool:
    """Whether this transformers' class for `kind` goes through its attention interface (5.x; 4.56's BERT family
    chose its attention classes when the model was built, and then keeps its own dropout: the last test)."""
    return hasattr(importlib.import_module(f"transformers.models.{kind}.modeling_{kind}"), "ALL_ATTENTION_FUNCTIONS")


def _needs_interface(kind: str) -> None:
    if not _dispatches(kind):
        pytest.skip(f"transformers {transformers.__version__}'s {kind} does not dispatch through the attention interface")


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 300, (4, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[3, 3:] = 0
    return {"input_ids": ids * mask + (1 - mask), "attention_mask": mask, "labels": torch.tensor([0, 1, 2, 1])}


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
def test_the_written_out_attention_is_eager_attentions_arithmetic(kind):
    """p small enough to round to no lane dropped: the training path's arithmetic (scores, mask, softmax, values)
    against transformers' eager attention, logits and gradients."""
    _needs_interface(kind)
    batch = _batch()
    results = []
    for lanes in (False, True):
        model = _model(kind, dropout=1e-9)  # rounds to 0 of 65,536 lanes: nothing dropped, scale 1
        model.set_attn_implementation("eager")
        model.train()
        with cpu_kernels.lane_dropout(model) if lanes else torch.enable_grad():
            out = model(**batch)
            out.loss.backward()
        results.append((out.logits.detach(), model.classifier.out_proj.weight.grad if kind != "bert" else model.classifier.weight.grad,
                        next(model.base_model.encoder.parameters()).grad))
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
def test_inside_the_context_dropout_draws_lane_masks_and_after_it_the_model_is_as_it_was(kind, monkeypatch):
    _needs_interface(kind)
    model = _model(kind)
    before_state = {k: v.clone() for k, v in model.state_dict().items()}
    before_attention = model.config._attn_implementation
    calls = []
    real = cpu_kernels.lane_mask_dropout
    monkeypatch.setattr(cpu_kernels, "lane_mask_dropout", lambda x, p, training: calls.append(x.shape) or real(x, p, training))
    model.train()
    with cpu_kernels.lane_dropout(model):
        assert model.config._attn_implementation == cpu_kernels.ATTENTION
        assert not any(type(m) is torch.nn.Dropout for m in model.modules())
        model(**_batch()).loss.backward()
        weights = cpu_kernels._attention(model.base_model.encoder.layer[0].attention.self, *(torch.randn(64, 4, 32, 8),) * 3,
                                         None, dropout=0.1)[1]
    assert len(calls) == 2 + 1  # one attention's dropout a layer, and the direct call
    dropped = (weights == 0).float().mean().item()
    assert 0.09 < dropped < 0.11  # p = 0.1 of the attention weights, over 262,144 of them
    assert model.config._attn_implementation == before_attention
    assert sum(type(m) is torch.nn.Dropout for m in model.modules()) > 0
    assert all(torch.equal(v, before_state[k]) for k, v in model.state_dict().items())  # the context moves no weight


def test_xlm_and_modernbert_keep_transformers_dropout():
    xlm = transformers.XLMForSequenceClassification(transformers.XLMConfig(vocab_size=300, emb_dim=32, n_layers=1, n_heads=2))
    modern = transformers.ModernBertForSequenceClassification(transformers.ModernBertConfig(
        vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2))
    for model in (xlm, modern):
        assert not cpu_kernels.applies_to(model)
        kinds = [type(m) for m in model.modules()]
        with cpu_kernels.lane_dropout(model):
            assert [type(m) for m in model.modules()] == kinds
    assert cpu_kernels.applies_to(_model("electra")) == _dispatches("electra")  # ELECTRA: BERT's spelling


def test_a_transformers_whose_class_does_not_dispatch_through_the_interface_keeps_its_own(monkeypatch):
    """A release before the attention interface reached BERT (its classes chosen when the model was built): the
    model trains as transformers has it."""
    model = _model("bert")
    monkeypatch.delattr(transformers.models.bert.modeling_bert, "ALL_ATTENTION_FUNCTIONS", raising=False)  # 4.56: absent
    assert not cpu_kernels.applies_to(model)
    before = model.config._attn_implementation
    with cpu_kernels.lane_dropout(model):
        assert model.config._attn_implementation == before
        assert any(type(m) is torch.nn.Dropout for m in model.modules())
