"""trainer/start/warmup.py without a run: which fresh parts ask for a warm-up, its default length, the held groups'
schedule (0 during the warm-up, then the run's shape begun at its end) and the optimizer's groups it needs."""

from __future__ import annotations

import torch

from trainer.builders import lr_lambda
from trainer.config import TrainConfig
from trainer.model import BertForPretraining, ModelConfig
from trainer.optim import parameter_groups
from trainer.start import warmup

MODEL = ModelConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position_embeddings=16)


def test_only_a_fresh_part_the_losses_train_asks_for_a_warm_up_and_the_default_is_a_tenth_at_most_100():
    config = TrainConfig(data="d", output="o", init_from="s", max_steps=5000)
    plan, trained = warmup.plan(config, ["MLM head", "NSP head"], MODEL)
    assert (plan.steps, trained) == (100, ["MLM head", "NSP head"]) and plan.fresh == ("cls.predictions.", "cls.seq_relationship.")
    no_nsp = ModelConfig.from_dict({**MODEL.to_dict(), "nsp_weight": 0.0})
    assert warmup.plan(config, ["pooler", "NSP head"], no_nsp) == (None, [])  # a BertForMaskedLM on packed rows
    short = TrainConfig(data="d", output="o", init_from="s", max_steps=300)
    assert warmup.plan(short, ["MLM head"], MODEL)[0].steps == 30
    assert warmup.plan(TrainConfig(data="d", output="o", max_steps=300, head_warmup_steps=0), ["MLM head"], MODEL)[0] is None


def test_the_held_groups_rate_is_zero_through_the_warm_up_then_the_schedule_restarts():
    config = TrainConfig(data="d", output="o", init_from="s", max_steps=100, warmup_steps=10)
    heads = warmup.HeadWarmup(20, ("cls.",))
    model = BertForPretraining(MODEL)
    groups = parameter_groups(model, 0.01, heads.held)
    assert [bool(g.get("held")) for g in groups] == [False, False, True, True]
    held = {id(p) for g in groups if g.get("held") for p in g["params"]}
    assert held == {id(p) for n, p in model.named_parameters() if not n.startswith("cls.")}
    factors = warmup.lr_factors(lr_lambda(config), config, heads, groups)
    fresh, kept = factors[0], factors[-1]
    assert [kept(s) for s in (0, 19)] == [0.0, 0.0] and kept(20) == 0.1 and kept(29) == 1.0 and kept(99) < kept(30)
    assert fresh(0) == 0.1 and fresh(9) == 1.0  # the fresh heads follow the run's own schedule from step 0
    assert all(f(0) == 0.1 for f in warmup.lr_factors(lr_lambda(config), config, None, groups))  # no warm-up: one schedule


def test_a_held_parameter_at_rate_zero_keeps_every_bit_through_adamw_with_weight_decay():
    model = BertForPretraining(MODEL)
    heads = warmup.HeadWarmup(3, ("cls.",))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(parameter_groups(model, 0.01, heads.held), lr=1e-2)
    for group in optimizer.param_groups:
        group["lr"] = 0.0 if group.get("held") else 1e-2
    for _ in range(3):
        out = model(**{"input_ids": torch.randint(5, 50, (2, 8)), "mlm_positions": torch.tensor([[1, 2], [3, 4]]),
                       "mlm_labels": torch.tensor([[7, 8], [9, 10]]), "next_sentence_label": torch.tensor([0, 1])})
        out["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
    after = dict(model.named_parameters())
    assert all(torch.equal(after[n], v) for n, v in before.items() if not n.startswith("cls."))
    assert not torch.equal(after["cls.predictions.transform.dense.weight"], before["cls.predictions.transform.dense.weight"])
