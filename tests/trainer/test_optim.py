"""trainer.optim: BERT's weight-decay groups and AdamW on torch's fused kernel where there is one."""

from __future__ import annotations

import torch

from trainer.model import BertForPretraining, ModelConfig
from trainer.optim import adamw, fused_available, parameter_groups


def _model() -> BertForPretraining:
    return BertForPretraining(ModelConfig.preset("tiny", vocab_size=300), seed=0)


def test_groups_decay_weights_only_and_leave_out_frozen_parameters():
    model = _model()
    model.bert.embeddings.position_embeddings.weight.requires_grad_(False)
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.01, 0.0)
    assert all(names[id(p)].endswith(".weight") and "LayerNorm" not in names[id(p)] for p in decay["params"])
    assert all(names[id(p)].endswith(".bias") or "LayerNorm" in names[id(p)] for p in no_decay["params"])
    grouped = [id(p) for g in (decay, no_decay) for p in g["params"]]
    trainable = [id(p) for p in model.parameters() if p.requires_grad]  # the tied decoder weight once
    assert sorted(grouped) == sorted(trainable) and len(grouped) == len(set(grouped))
    assert id(model.bert.embeddings.position_embeddings.weight) not in grouped
    assert id(model.cls.predictions.bias) in [id(p) for p in no_decay["params"]]


def test_adamw_is_fused_on_cpu_and_makes_foreachs_update():
    torch.manual_seed(0)
    fused_model, foreach_model = _model(), _model()
    fused = adamw(fused_model, lr=1e-2, weight_decay=0.01, eps=1e-6)
    assert fused_available(list(fused_model.parameters()))  # torch 2.13 has a CPU kernel
    assert all(g["fused"] for g in fused.param_groups)
    foreach = torch.optim.AdamW(parameter_groups(foreach_model, 0.01), lr=1e-2, eps=1e-6, foreach=True)
    for _ in range(3):
        for m in (fused_model, foreach_model):
            for p in m.parameters():
                p.grad = torch.sin(p.detach() * 7 + 1)  # the same gradient on both sides
        fused.step()
        foreach.step()
    moved = max(float((a - b).detach().abs().max()) for a, b in zip(fused_model.parameters(), _model().parameters()))
    gap = max(float((a - b).detach().abs().max()) for a, b in zip(fused_model.parameters(), foreach_model.parameters()))
    assert moved > 1e-3 and gap < 1e-6, (moved, gap)


def test_fused_needs_every_parameter_on_a_fused_device_and_floating():
    assert not fused_available([])
    assert not fused_available([torch.zeros(3, dtype=torch.int64)])
    assert not fused_available([torch.zeros(3, device="meta")])


def test_a_checkpoint_saved_on_foreach_resumes_on_foreach():
    # What trainer/optim.py promises for checkpoints from before it: the saved group settings win
    old_model, new_model = _model(), _model()
    old = torch.optim.AdamW(parameter_groups(old_model, 0.01), lr=1e-3, eps=1e-6)
    for p in old_model.parameters():
        p.grad = torch.ones_like(p)
    old.step()
    resumed = adamw(new_model, lr=1e-3, weight_decay=0.01, eps=1e-6)
    assert all(g["fused"] for g in resumed.param_groups)
    resumed.load_state_dict(old.state_dict())
    assert [g["fused"] for g in resumed.param_groups] == [None, None]
    for p in new_model.parameters():
        p.grad = torch.ones_like(p)
    resumed.step()  # and it steps
