"""BertForPretraining: transformers-compatible names and outputs, sparse MLM, losses, SBO, init, config."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from trainer.model import IGNORE_INDEX, PRESET_NAMES, BertForPretraining, ModelConfig

VOCAB = 1000


def _config(**overrides) -> ModelConfig:
    return ModelConfig.preset("tiny", vocab_size=VOCAB, **overrides)


def _batch(seed: int = 0, batch: int = 3, seq: int = 24, positions: int = 5) -> dict[str, torch.Tensor]:
    """Random ids with ragged padding, two segments, and `positions` MLM slots of which the last is padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, seq), generator=g)
    lengths = torch.tensor([seq, seq - 7, seq // 2])[:batch]
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    ids = ids * mask  # [PAD] = 0
    types = ((torch.arange(seq)[None, :] >= (lengths[:, None] // 2)) & mask.bool()).long()
    pos = torch.stack([torch.randperm(int(n) - 1, generator=g)[:positions] + 1 for n in lengths])
    labels = torch.randint(5, VOCAB, (batch, positions), generator=g)
    labels[:, -1] = IGNORE_INDEX
    pos[:, -1] = 0
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "mlm_positions": pos,
            "mlm_labels": labels, "next_sentence_label": torch.tensor([0, 1, 1])[:batch]}


def _encoder_inputs(b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: b[k] for k in ("input_ids", "token_type_ids", "attention_mask")}


def test_state_dict_keys_are_transformers_keys_exactly():
    transformers = pytest.importorskip("transformers")
    cfg = _config()
    theirs = transformers.BertForPreTraining(transformers.BertConfig(**cfg.to_hf_config())).state_dict()
    ours = BertForPretraining(cfg).state_dict()
    # Same names in the same order, tied decoder entries included on both sides; position_ids/token_type_ids are
    # non-persistent buffers in transformers 5, so neither side has a buffer entry.
    assert list(ours) == list(theirs)
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in theirs.items()}
    # The extras are project-only and nothing else changes.
    pre_ln = set(BertForPretraining(_config(pre_layernorm=True)).state_dict()) - set(ours)
    assert pre_ln == {"bert.encoder.LayerNorm.weight", "bert.encoder.LayerNorm.bias"}
    sbo = set(BertForPretraining(_config(use_sbo=True)).state_dict()) - set(ours)
    assert sbo and all(k.startswith("sbo.") for k in sbo)


def test_outputs_equal_transformers_on_a_padded_batch():
    transformers = pytest.importorskip("transformers")
    cfg = _config()
    ours = BertForPretraining(cfg, seed=3).eval()
    theirs = transformers.BertForPreTraining(transformers.BertConfig(**cfg.to_hf_config())).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    b = _batch()
    real = b["attention_mask"].bool()
    with torch.no_grad():
        seq, pooled, states = ours.encode(**_encoder_inputs(b), output_hidden_states=True)
        ref = theirs(**_encoder_inputs(b), output_hidden_states=True)
    assert len(states) == len(ref.hidden_states) == cfg.num_layers + 1
    for mine, hf in zip(states, ref.hidden_states):
        assert (mine - hf)[real].abs().max() <= 1e-5
    assert (ours.dense_mlm_logits(seq) - ref.prediction_logits)[real].abs().max() <= 1e-4
    assert (ours.cls.seq_relationship(pooled) - ref.seq_relationship_logits).abs().max() <= 1e-4


def test_padding_does_not_change_real_positions():
    model = BertForPretraining(_config()).eval()
    b = _batch(batch=1)
    ids, types, mask = b["input_ids"], b["token_type_ids"], b["attention_mask"]
    padded = [torch.cat([t, torch.zeros(1, 9, dtype=t.dtype)], 1) for t in (ids, types, mask)]
    with torch.no_grad():
        short, _, _ = model.encode(ids, types, mask)
        long, _, _ = model.encode(*padded)
    assert (short - long[:, : ids.shape[1]]).abs().max() <= 1e-5
    # ... and the mask matters: without it the padded tail changes the real positions.
    with torch.no_grad():
        unmasked, _, _ = model.encode(padded[0], padded[1], None)
    assert (short - unmasked[:, : ids.shape[1]]).abs().max() > 1e-3


def test_an_all_padding_row_stays_finite():
    # A row with no real key (e.g. an -inf mask, or a boolean one on some torch builds) must not NaN the batch.
    model = BertForPretraining(_config())
    b = _batch()
    b["attention_mask"][0] = 0
    assert torch.isfinite(model(**b)["loss"])
    assert torch.isfinite(model(**{**b, "mlm_labels": None})["mlm_logits"]).all()


def test_sparse_mlm_logits_equal_dense_logits_gathered():
    model = BertForPretraining(_config()).eval()
    b = _batch()
    with torch.no_grad():
        out = model(**{**b, "mlm_labels": None})  # with labels the loss spends the logits: none come back
        dense = model.dense_mlm_logits(model.encode(**_encoder_inputs(b))[0])  # (batch, seq, vocab)
    assert out["mlm_logits"].shape == (*b["mlm_positions"].shape, VOCAB)
    gathered = torch.stack([dense[i, b["mlm_positions"][i]] for i in range(dense.shape[0])])
    assert (out["mlm_logits"] - gathered).abs().max() <= 1e-5
    assert out["nsp_logits"].shape == (3, 2)


def test_losses_and_counts_equal_a_manual_cross_entropy():
    cfg = _config(mlm_weight=1.0, nsp_weight=0.5)
    model = BertForPretraining(cfg).eval()
    b = _batch()
    with torch.no_grad():
        out = model(**b)
        mlm_logits = model(**{**b, "mlm_labels": None})["mlm_logits"]
    assert "mlm_logits" not in out  # spent by the loss
    keep = b["mlm_labels"] != IGNORE_INDEX
    logits, labels = mlm_logits[keep], b["mlm_labels"][keep]  # (n, vocab), (n,)
    log_probs = torch.log_softmax(logits, -1)
    manual_mlm = -log_probs[torch.arange(len(labels)), labels].mean()
    nsp_log_probs = torch.log_softmax(out["nsp_logits"], -1)
    manual_nsp = -nsp_log_probs[torch.arange(3), b["next_sentence_label"]].mean()
    assert out["mlm_loss"].item() == pytest.approx(manual_mlm.item(), rel=1e-5)
    assert out["nsp_loss"].item() == pytest.approx(manual_nsp.item(), rel=1e-5)
    assert out["loss"].item() == pytest.approx(manual_mlm.item() + 0.5 * manual_nsp.item(), rel=1e-5)
    assert out["mlm_count"].item() == int(keep.sum())
    assert out["mlm_correct"].item() == int((logits.argmax(-1) == labels).sum())
    assert out["nsp_count"].item() == 3
    assert out["nsp_correct"].item() == int((out["nsp_logits"].argmax(-1) == b["next_sentence_label"]).sum())


def test_no_masked_positions_gives_zero_loss_not_nan():
    model = BertForPretraining(_config())
    b = _batch()
    b["mlm_labels"] = torch.full_like(b["mlm_labels"], IGNORE_INDEX)
    out = model(**b)
    assert out["mlm_loss"].item() == 0.0 and out["mlm_count"].item() == 0
    assert torch.isfinite(out["loss"])


def test_nsp_weight_zero_keeps_loss_to_mlm_but_every_parameter_gets_a_gradient():
    model = BertForPretraining(_config(nsp_weight=0.0))
    out = model(**_batch())
    assert out["loss"].item() == pytest.approx(out["mlm_loss"].item(), rel=1e-6)
    out["loss"].backward()
    assert all(p.grad is not None for p in model.parameters())
    assert model.cls.seq_relationship.weight.grad.abs().max() == 0


def test_gradient_reaches_tied_embeddings_through_the_decoder():
    model = BertForPretraining(_config())
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
    b = _batch()
    target = 4  # [MASK]-like id that never occurs in input_ids (all >= 5 or [PAD]): only the decoder can move it
    assert not (b["input_ids"] == target).any()
    b["mlm_labels"][0, 0] = target
    model(**b)["mlm_loss"].backward()
    grad = model.bert.embeddings.word_embeddings.weight.grad
    assert grad[target].abs().sum() > 0
    assert grad[b["input_ids"][0, 1]].abs().sum() > 0  # and the input side too
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())  # counted once


def test_sbo_head_shapes_loss_and_gradients():
    cfg = _config(use_sbo=True, sbo_max_relative_positions=4)
    model = BertForPretraining(cfg)
    b = _batch()
    left = (b["mlm_positions"] - 1).clamp(min=0)
    right = (b["mlm_positions"] + 1).clamp(max=b["input_ids"].shape[1] - 1)
    rel = torch.tensor([[0, 1, 2, 9, 0]] * 3)  # 9 is past the table: shares its last row
    assert model(**{**b, "mlm_labels": None}, sbo_left=left, sbo_right=right, sbo_rel_pos=rel)["sbo_logits"].shape == (3, 5, VOCAB)
    out = model(**b, sbo_left=left, sbo_right=right, sbo_rel_pos=rel)
    assert torch.isfinite(out["sbo_loss"]) and out["sbo_count"].item() == out["mlm_count"].item()
    assert out["loss"].item() == pytest.approx(
        (out["mlm_loss"] + out["nsp_loss"] + out["sbo_loss"]).item(), rel=1e-5)
    out["sbo_loss"].backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.sbo.parameters())
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0  # tied decoder
    # Without SBO inputs the head is skipped rather than guessed at.
    assert "sbo_loss" not in model(**b)


def test_dropout_only_in_training_mode():
    model = BertForPretraining(_config())
    inputs = _encoder_inputs(_batch())
    model.train()
    assert not torch.equal(model.encode(**inputs)[0], model.encode(**inputs)[0])
    model.eval()
    with torch.no_grad():
        assert torch.equal(model.encode(**inputs)[0], model.encode(**inputs)[0])


def test_pre_layernorm_matches_a_hand_written_pre_ln_layer():
    # A large init so the sub-layers are not negligible against the residual (at std 0.02 pre- and post-LN
    # outputs differ by only ~3e-3).
    model = BertForPretraining(_config(pre_layernorm=True, num_layers=1, initializer_range=0.3)).eval()
    b = _batch()
    ids, types, mask = b["input_ids"], b["token_type_ids"], b["attention_mask"]
    layer, emb = model.bert.encoder.layer[0], model.bert.embeddings
    att, heads = layer.attention, model.config.num_heads
    with torch.no_grad():
        x = emb.LayerNorm(emb.word_embeddings(ids) + emb.token_type_embeddings(types)
                          + emb.position_embeddings.weight[: ids.shape[1]])
        h = att.output.LayerNorm(x)
        split = lambda t: t.view(*t.shape[:2], heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = split(att.self.query(h)), split(att.self.key(h)), split(att.self.value(h))
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + (1.0 - mask[:, None, None, :].float()) * -1e9
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
        x = x + att.output.dense(a)
        x = x + layer.output.dense(F.gelu(layer.intermediate.dense(layer.output.LayerNorm(x))))
        expected = model.bert.encoder.LayerNorm(x)
        got = model.encode(ids, types, mask)[0]
        post = BertForPretraining(_config(num_layers=1, initializer_range=0.3)).eval().encode(ids, types, mask)[0]
    real = mask.bool()
    assert (got - expected)[real].abs().max() <= 1e-4
    assert (post - expected)[real].abs().max() > 0.1  # the flag changes the computation


def test_init_is_bert_like_and_seeded():
    cfg = _config()
    a, b, c = BertForPretraining(cfg, seed=7), BertForPretraining(cfg, seed=7), BertForPretraining(cfg, seed=8)
    for (name, x), y, z in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(x, y), name
    words = a.bert.embeddings.word_embeddings.weight
    assert not torch.equal(words, c.bert.embeddings.word_embeddings.weight)
    assert words[cfg.pad_token_id].abs().sum() == 0
    assert abs(words[1:].std().item() - cfg.initializer_range) < 0.1 * cfg.initializer_range
    layer = a.bert.encoder.layer[0]
    assert torch.equal(layer.output.LayerNorm.weight, torch.ones(cfg.hidden_size))
    assert layer.attention.self.query.bias.abs().sum() == 0 and a.cls.predictions.bias.abs().sum() == 0


def test_presets_shapes_and_bert_base_size():
    assert PRESET_NAMES == ("tiny", "mini", "small", "base", "large", "modernbert-base", "modernbert-large")
    tiny = ModelConfig.preset("tiny", vocab_size=VOCAB)
    assert (tiny.num_layers, tiny.hidden_size, tiny.num_heads, tiny.intermediate_size) == (2, 128, 2, 512)
    with torch.device("meta"):  # shapes only
        base = BertForPretraining(ModelConfig.preset("base", vocab_size=30522))
    # BERT-base is "110M parameters" in the BERT paper.
    assert 109e6 < base.num_parameters() < 111e6


def test_config_validation_messages():
    with pytest.raises(ValueError, match="tiny, mini, small, base, large, modernbert-base"):
        ModelConfig.preset("huge", vocab_size=VOCAB)
    with pytest.raises(ValueError, match="unknown keys.*hidden.*valid keys.*hidden_size"):
        ModelConfig.preset("tiny", vocab_size=VOCAB, hidden=64)
    with pytest.raises(ValueError, match="multiple of num_heads"):
        ModelConfig.preset("tiny", vocab_size=VOCAB, num_heads=3)
    with pytest.raises(ValueError, match="pad_token_id"):
        ModelConfig.preset("tiny", vocab_size=VOCAB, pad_token_id=VOCAB)
    with pytest.raises(ValueError, match="every loss weight is zero"):
        ModelConfig.preset("tiny", vocab_size=VOCAB, mlm_weight=0.0, nsp_weight=0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        _config().hidden_size = 3
    cfg = _config(use_sbo=True)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_hf_config_refuses_pre_layernorm():
    hf = _config().to_hf_config()
    assert hf["model_type"] == "bert" and hf["architectures"] == ["BertForPreTraining"] and hf["hidden_act"] == "gelu"
    with pytest.raises(ValueError, match="pre-LayerNorm"):
        _config(pre_layernorm=True).to_hf_config()



@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_dropout_flag_reaches_every_dropout_of_the_model(prepped, tmp_path, dropout):
    """--dropout 0 (the demo's) makes training-mode forwards deterministic; 0.1 (BERT's) does not."""
    import os

    from schemas import Manifest
    from trainer.builders import build_model
    from trainer.config import TrainConfig

    url = os.path.join(prepped, "pairs")
    model = build_model(TrainConfig(data=url, output=str(tmp_path), dropout=dropout), Manifest.read(url)).train()
    assert (model.config.hidden_dropout, model.config.attention_dropout) == (dropout, dropout)
    b = _batch()
    b["input_ids"] = b["input_ids"] % model.config.vocab_size
    b["mlm_labels"] = torch.where(b["mlm_labels"] >= 0, b["mlm_labels"] % model.config.vocab_size, b["mlm_labels"])
    first, second = model(**b)["loss"], model(**b)["loss"]
    assert torch.equal(first, second) == (dropout == 0.0)


def test_softmax_cross_entropy_is_cross_entropy_with_argmax_counts():
    from trainer.model.bert import SoftmaxCrossEntropy

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(300, 50, generator=g, dtype=torch.float64) * 4).requires_grad_()
    labels = torch.randint(0, 50, (300,), generator=g)
    labels[::7] = IGNORE_INDEX
    spent = logits.clone()  # the function computes in its input's storage
    loss, correct, exp = SoftmaxCrossEntropy.apply(spent, labels)
    assert exp.data_ptr() == spent.data_ptr()  # no (N, C) buffer of its own
    loss.backward()
    ours = logits.grad.clone()
    logits.grad = None
    ref = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    ref.backward()
    assert abs(float(loss.detach()) - float(ref.detach())) < 1e-9 and (ours - logits.grad).abs().max() < 1e-12
    valid = labels != IGNORE_INDEX
    assert int(correct) == int(((logits.argmax(-1) == labels) & valid).sum()) > 0
    # every row left out: loss 0 and no gradient, never NaN
    none = torch.randn(4, 3, requires_grad=True)
    loss, correct, _ = SoftmaxCrossEntropy.apply(none.clone(), torch.full((4,), IGNORE_INDEX))
    loss.backward()
    assert float(loss) == 0.0 and int(correct) == 0 and not none.grad.any()
    # logits far from 0 stay finite (the max is subtracted before exp)
    big = torch.tensor([[1e4, -1e4, 0.0]], requires_grad=True)
    loss, _, _ = SoftmaxCrossEntropy.apply(big.clone(), torch.tensor([1]))
    assert float(loss) == 2e4
    # the gradient is built in the saved buffer, so a second backward is refused, not wrong
    again = torch.randn(5, 4, requires_grad=True)
    loss, _, _ = SoftmaxCrossEntropy.apply(again.clone(), torch.arange(4).repeat(2)[:5])
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        loss.backward()


def test_softmax_cross_entropy_backward_makes_no_logits_sized_tensor():
    # The spent logits are an output without a gradient: autograd must not fill an (N, C) zero tensor for them
    from torch.profiler import profile

    from trainer.model.bert import SoftmaxCrossEntropy

    logits = torch.randn(64, 1000, requires_grad=True)
    loss, _, _ = SoftmaxCrossEntropy.apply(logits.clone(), torch.randint(0, 1000, (64,)))
    with profile(record_shapes=True) as prof:
        loss.backward()
    # a zero gradient is made as empty + zero_ (-> fill_); only the fills carry the tensor's shape in the trace
    fresh = [e.name for e in prof.events() if e.name in ("aten::fill_", "aten::zero_") and [64, 1000] in e.input_shapes]
    assert not fresh, fresh
    assert logits.grad.shape == (64, 1000)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_cpu_dropout_drops_p_and_keeps_the_mean(p):
    from trainer.model.bert import dropout

    torch.manual_seed(0)
    x = torch.ones(400, 1001)  # an element count that is not a multiple of 4 lanes per draw
    y = dropout(x, p, True)
    dropped = float((y == 0).float().mean())
    assert abs(dropped - p) < 0.005  # 400,400 draws: the standard error is under 0.001
    assert torch.allclose(y[y != 0], torch.tensor(1 / (1 - p)), rtol=1e-4) and abs(float(y.mean()) - 1) < 0.01
    lanes = (y == 0).view(-1)[:400_000].view(-1, 4).float().mean(0)  # each 16-bit lane of a 64-bit draw
    assert ((lanes - p).abs() < 0.01).all()
    assert dropout(x, p, False) is x and dropout(x, 0.0, True) is x
    torch.manual_seed(1)
    a = dropout(x, p, True)
    torch.manual_seed(1)
    assert torch.equal(a, dropout(x, p, True))  # the global generator decides, so a seeded step repeats
    y.sum().backward() if y.requires_grad else None
    grad_in = torch.ones(3, 9, requires_grad=True)
    out = dropout(grad_in, p, True)
    out.sum().backward()
    assert torch.equal(grad_in.grad, out.detach())  # the gradient is the same mask times the same scale


def test_the_written_out_cpu_attention_is_sdpas_arithmetic():
    """Training with attention dropout on a CPU takes the written-out attention (for its cheaper dropout mask); an
    attention dropout too small to drop anything (it rounds to 0 of 65,536) takes that path and must give the
    eval-mode (SDPA) loss."""
    model = BertForPretraining(_config(hidden_dropout=0.0, attention_dropout=1e-9), seed=0)
    b = _batch()
    with torch.no_grad():
        train_loss = float(model.train()(**b)["loss"])
        eval_loss = float(model.eval()(**b)["loss"])
    assert abs(train_loss - eval_loss) < 1e-5


def _gpu_path(monkeypatch) -> None:
    """Take the model's GPU code (F.dropout, SDPA, F.cross_entropy) on this CPU."""
    import trainer.model.bert as bert

    monkeypatch.setattr(bert, "cpu_kernels", lambda x: False)


def test_the_gpu_path_losses_counts_and_gradients_are_the_cpu_paths(monkeypatch):
    """Without dropout the two paths are the same arithmetic: F.cross_entropy against the in-place loss, with
    ties counted as correct on both (MLM, NSP and SBO, a padded MLM slot left out)."""
    b = _batch()
    b.update(sbo_left=b["mlm_positions"].clamp(min=1) - 1, sbo_right=b["mlm_positions"] + 1, sbo_rel_pos=torch.zeros_like(b["mlm_positions"]))
    model = BertForPretraining(_config(use_sbo=True, hidden_dropout=0.0, attention_dropout=0.0), seed=0).train()
    found = []
    for gpu in (False, True):
        if gpu:
            _gpu_path(monkeypatch)
        model.zero_grad(set_to_none=True)
        out = model(**b)
        out["loss"].backward()
        found.append(({k: v.detach() for k, v in out.items() if k.endswith(("_loss", "_correct", "_count"))},
                      {n: p.grad.clone() for n, p in model.named_parameters()}))
    (cpu, cpu_grads), (gpu, gpu_grads) = found
    assert sorted(cpu) == sorted(gpu) and {"mlm_loss", "nsp_loss", "sbo_loss"} <= set(cpu)
    for key in cpu:
        assert torch.allclose(cpu[key].double(), gpu[key].double(), rtol=1e-5, atol=1e-6), key
    assert all(torch.allclose(cpu_grads[n], gpu_grads[n], rtol=1e-4, atol=1e-6) for n in cpu_grads)


@pytest.mark.parametrize("sbo", [False, True])
def test_the_gpu_path_compiles_to_one_graph(monkeypatch, sbo):
    """torch.compile traces the training model's GPU code, losses included, as one graph: nothing falls back to
    eager between the encoder and the heads. The check can fail: a `.item()` in the traced code breaks the graph
    (the CPU path's in-place losses did too, up to some torch release before 2.13; 2.7 traces them whole)."""
    import torch._dynamo

    b = _batch()
    if sbo:
        b.update(sbo_left=b["mlm_positions"].clamp(min=1) - 1, sbo_right=b["mlm_positions"] + 1, sbo_rel_pos=torch.zeros_like(b["mlm_positions"]))
    model = BertForPretraining(_config(use_sbo=sbo), seed=0).train()
    assert torch._dynamo.explain(lambda x: x * x.sum().item())(torch.ones(3)).graph_break_count > 0
    _gpu_path(monkeypatch)
    explained = torch._dynamo.explain(model)(**b)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), [r.reason for r in explained.break_reasons]
