"""The heads' warm-up trains exactly the parts a source lacked, in every network: for a source lacking the MLM head
(a bare encoder), the warm-up's fresh prefixes (trainer/start/warmup.py `plan`, read from the network's row of
trainer/model/__init__.py PARTS) cover every parameter of that head and no encoder parameter."""

from __future__ import annotations

import pytest
import torch

from trainer.config import TrainConfig
from trainer.model import PARTS, ModelConfig, build
from trainer.start import warmup

TINY = dict(vocab_size=64, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, max_position_embeddings=64)


@pytest.mark.parametrize(("family", "objective", "lacking"), [
    ("bert", "mlm", ["MLM head", "NSP head", "pooler"]),
    ("roberta", "mlm", ["MLM head"]),
    ("modernbert", "mlm", ["MLM head"]),
    ("bert", "electra", ["discriminator head", "generator"]),
])
def test_the_warm_up_trains_every_fresh_parameter_and_holds_the_rest(family, objective, lacking):
    config = ModelConfig(**TINY, family=family, objective=objective, type_vocab_size=2 if family == "bert" else 1,
                         nsp_weight=1.0 if family == "bert" and objective == "mlm" else 0.0)
    with torch.device("meta"):
        model = build(config)
    plan, trained = warmup.plan(TrainConfig(data="d", output="o", max_steps=100), lacking, config)
    assert plan is not None and trained
    parts = PARTS[config.network]
    fresh = {n for n, _ in model.named_parameters() if not plan.held(n)}
    wanted = {n for n, _ in model.named_parameters() if any(n.startswith(parts[p]) for p in lacking)}
    assert fresh == wanted and fresh, sorted(fresh ^ wanted)[:5]
    encoder = [n for n, _ in model.named_parameters() if n.startswith(parts.get("encoder", parts.get("discriminator")))]
    assert encoder and all(plan.held(n) for n in encoder)
