"""Batch forms (trainer/data/batch_forms.py, trainer/model/attention.py): unpadded rows give the padded step's losses and
gradients; a static batch gives the dynamic batch's loss; the streams hand out the same rows and masks in each form."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from schemas import Manifest
from tests.helpers import masker_for, row_keys
from trainer.data import ShardStream, loader
from trainer.data.audit import row_digests
from trainer.data.batch_forms import FORMS, default_predictions, real_tokens
from trainer.data.collate import collate_pairs
from tests.trainer.masking_helpers import Masker
from trainer.masking import MaskingConfig
from trainer.model import BertForPretraining, ModelConfig

VOCAB = 500


def _masked(lengths: list[tuple[int, int]], seed: int = 0, strategy: str = "bert", max_seq_len: int = 40) -> dict[str, np.ndarray]:
    """A padded masked batch of NSP pairs with segment lengths `lengths` (ids from a seeded generator)."""
    rng = np.random.default_rng(seed)
    a = [rng.integers(5, VOCAB, n) for n, _ in lengths]
    b = [rng.integers(5, VOCAB, n) for _, n in lengths]
    arrays = collate_pairs(a, b, rng.random(len(lengths)) < 0.5, cls_id=2, sep_id=3, pad_id=0, max_seq_len=max_seq_len)
    tokens = [f"t{i}" for i in range(VOCAB)]
    masker = Masker.for_vocabulary(MaskingConfig(strategy=strategy, mask_prob=0.3), tokens, mask_id=4)
    special = arrays.pop("special_mask")
    return {**arrays, **masker(arrays["input_ids"], special, rng)}


def _tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


def _step(model: BertForPretraining, batch: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    model.zero_grad(set_to_none=True)
    out = model(**batch)
    out["loss"].backward()
    losses = {k: v.detach().double() for k, v in out.items() if k.endswith(("loss", "_correct", "_count"))}
    return losses, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


# rows of 5 lengths in 9 rows, three runs of equal length among them, one row a third of the longest
LENGTHS = [(10, 9), (3, 4), (10, 9), (6, 7), (3, 4), (10, 9), (1, 1), (6, 7), (2, 3)]


@pytest.mark.parametrize("family, sbo", [("bert", False), ("bert", True), ("roberta", False)])
def test_the_unpadded_step_has_the_padded_steps_losses_and_gradients(family, sbo):
    """fp32, no dropout (its random masks are drawn per element of each layout): every loss, count and gradient
    within 1e-5 of the padded step's on the same rows and masks; BERT with NSP, SpanBERT's SBO, RoBERTa's
    positions after padding_idx and single token type."""
    arrays = _masked(LENGTHS, seed=1, strategy="span" if sbo else "bert")
    if family == "roberta":
        arrays["token_type_ids"][:] = 0
    packed = FORMS["unpadded"].shape(arrays, max_seq_len=40, predictions=None, pad_id=0)
    assert "attention_mask" not in packed and packed["input_ids"].shape == (int(arrays["attention_mask"].sum()),)
    config = ModelConfig.preset("tiny", vocab_size=VOCAB, family=family, use_sbo=sbo, hidden_dropout=0.0, attention_dropout=0.0)
    model = BertForPretraining(config, seed=0).train()
    padded_losses, padded_grads = _step(model, _tensors(arrays))
    packed_losses, packed_grads = _step(model, _tensors(packed))
    expected = {"loss", "mlm_loss", "mlm_correct", "mlm_count"} | ({"nsp_loss", "nsp_correct", "nsp_count"} if family == "bert" else set()) \
        | ({"sbo_loss", "sbo_correct", "sbo_count"} if sbo else set())
    assert set(padded_losses) == set(packed_losses) == expected
    for key in expected:
        assert abs(float(padded_losses[key] - packed_losses[key])) <= 1e-5, key
    assert set(padded_grads) == set(packed_grads)
    worst = max(float((padded_grads[n] - packed_grads[n]).abs().max()) for n in padded_grads)
    assert worst <= 1e-5, worst
    assert float(padded_losses["mlm_count"]) == len(packed["mlm_labels"])  # the packed batch has the real predictions only


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlashAttention's varlen kernel needs a CUDA GPU")
def test_on_a_gpu_the_varlen_kernel_gives_the_padded_steps_losses():
    """bf16 autocast at attention dropout 0, where Packed takes varlen_attn (torch >= 2.10): every loss within bf16's
    rounding of the padded step's, and fp32 (the runs path on the GPU) within 1e-5."""
    from trainer.model import attention

    if attention._varlen() is None:
        pytest.skip("this torch has no torch.nn.attention.varlen")
    arrays = _masked(LENGTHS, seed=5)
    packed = FORMS["unpadded"].shape(arrays, max_seq_len=40, predictions=None, pad_id=0)
    config = ModelConfig.preset("tiny", vocab_size=VOCAB, hidden_dropout=0.0, attention_dropout=0.0)
    model = BertForPretraining(config, seed=0).cuda().train()
    on_gpu = lambda arrays: {k: v.cuda() for k, v in _tensors(arrays).items()}  # noqa: E731
    for autocast, tolerance in ((True, 2e-2), (False, 1e-5)):
        with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
            padded_losses, _ = _step(model, on_gpu(arrays))
            packed_losses, _ = _step(model, on_gpu(packed))
        for key in padded_losses:
            assert abs(float(padded_losses[key] - packed_losses[key])) <= tolerance * max(1.0, abs(float(padded_losses[key]))), key


def test_unpadded_attention_runs_rows_of_one_length_together_and_dropout_trains():
    """Rows come longest first; each run of equal lengths is one slice of the tokens; with dropout the step trains
    (finite loss, gradients everywhere) through the CPU's written-out attention."""
    from trainer.model.attention import Packed

    packed = FORMS["unpadded"].shape(_masked(LENGTHS), max_seq_len=40, predictions=None, pad_id=0)
    lengths = np.diff(packed["cu_seqlens"])
    assert lengths.tolist() == sorted(lengths.tolist(), reverse=True)
    runs = Packed(torch.from_numpy(packed["cu_seqlens"]), 40).runs
    assert [(rows, length) for _, rows, length in runs] == [(3, 22), (2, 16), (2, 10), (1, 8), (1, 5)]
    model = BertForPretraining(ModelConfig.preset("tiny", vocab_size=VOCAB), seed=0).train()
    losses, grads = _step(model, _tensors(packed))
    assert torch.isfinite(losses["loss"]) and len(grads) == len(list(model.parameters()))


def test_the_unpadded_form_keeps_rows_masks_and_labels():
    """Row i of the packed batch is a row of the padded one (its tokens, types, masked ids), its predictions the same
    (position, label) pairs; the NSP labels follow their rows; the audit digests are the same set."""
    arrays = _masked(LENGTHS, seed=2)
    packed = FORMS["unpadded"].shape(arrays, max_seq_len=40, predictions=None, pad_id=0)
    cu = packed["cu_seqlens"].tolist()
    padded_rows = {}
    for r, n in enumerate(arrays["attention_mask"].sum(1)):
        real = arrays["mlm_labels"][r] != -100
        padded_rows.setdefault((tuple(arrays["input_ids"][r, :n]), tuple(arrays["token_type_ids"][r, :n])), []).append(
            (int(arrays["next_sentence_label"][r]), sorted(zip(arrays["mlm_positions"][r][real].tolist(), arrays["mlm_labels"][r][real].tolist()))))
    for i, (a, b) in enumerate(zip(cu, cu[1:])):
        key = (tuple(packed["input_ids"][a:b]), tuple(packed["token_type_ids"][a:b]))
        assert packed["position_ids"][a:b].tolist() == list(range(b - a))
        mine = (a <= packed["mlm_positions"]) & (packed["mlm_positions"] < b)
        found = (int(packed["next_sentence_label"][i]), sorted(zip((packed["mlm_positions"][mine] - a).tolist(), packed["mlm_labels"][mine].tolist())))
        assert found in padded_rows[key]
        padded_rows[key].remove(found)
    assert not any(padded_rows.values())
    assert sorted(row_digests(_tensors(packed))) == sorted(row_digests(_tensors(arrays)))
    assert real_tokens(packed) == real_tokens(arrays) == int(arrays["attention_mask"].sum())


def test_a_static_batch_gives_the_dynamic_batchs_loss_where_the_predictions_coincide():
    """Padded to max_seq_len and 20 prediction slots, the rows, masks and every loss are the dynamic batch's (fp32,
    no dropout): the extra positions are attended by none and the extra slots have label -100."""
    arrays = _masked(LENGTHS, seed=3)
    static = FORMS["static"].shape(arrays, max_seq_len=64, predictions=20, pad_id=0)
    assert static["input_ids"].shape == (len(LENGTHS), 64) and static["mlm_labels"].shape == (len(LENGTHS), 20)
    assert (static["mlm_labels"][:, arrays["mlm_labels"].shape[1]:] == -100).all()
    model = BertForPretraining(ModelConfig.preset("tiny", vocab_size=VOCAB, hidden_dropout=0.0, attention_dropout=0.0), seed=0).train()
    dynamic_losses, _ = _step(model, _tensors(arrays))
    static_losses, _ = _step(model, _tensors(static))
    for key in dynamic_losses:
        assert abs(float(dynamic_losses[key] - static_losses[key])) <= 1e-5, key
    with pytest.raises(ValueError, match="holds 2 columns of mlm_positions, this one has 6"):
        FORMS["static"].shape(arrays, max_seq_len=64, predictions=2, pad_id=0)


def test_default_predictions_are_nvidias():
    assert (default_predictions(0.15, 128), default_predictions(0.15, 512), default_predictions(0.15, 16)) == (20, 80, 4)


@pytest.fixture(scope="module")
def manifest(prepped) -> Manifest:
    return Manifest.read(os.path.join(prepped, "pairs"))


def _stream_batches(manifest, form: str, **options) -> list[dict]:
    stream = ShardStream(manifest, split="train", batch_size=16, masker=masker_for(manifest), seed=5, epochs=1,
                         batch_form=form, **options)
    return [b for _, b in zip(range(6), loader(stream, 0))]


def test_every_form_of_a_stream_hands_out_the_same_rows_and_masks(manifest):
    """ShardStream with --batch-form padded, unpadded and static: batch by batch the same rows with the same masks
    (as row digests and as the masked rows with their predictions), NSP labels with them; static's shapes fixed."""
    padded = _stream_batches(manifest, "padded")
    unpadded = _stream_batches(manifest, "unpadded")
    static = _stream_batches(manifest, "static", predictions=40)
    for p, u, s in zip(padded, unpadded, static):
        assert sorted(row_digests(p)) == sorted(row_digests(u)) == sorted(row_digests(s))
        assert sorted(row_keys(p)) == sorted(row_keys(s))
        assert s["input_ids"].shape == (16, manifest.max_seq_len) and s["mlm_labels"].shape == (16, 40)
        assert int(p["attention_mask"].sum()) == int(u["cu_seqlens"][-1]) == len(u["input_ids"])
        assert int((p["mlm_labels"] != -100).sum()) == len(u["mlm_labels"])
        assert sorted(p["next_sentence_label"].tolist()) == sorted(u["next_sentence_label"].tolist())
    with pytest.raises(ValueError, match="needs its number of predictions"):
        ShardStream(manifest, split="train", batch_size=16, masker=masker_for(manifest), seed=5, batch_form="static")


@pytest.mark.integration
def test_train_in_each_batch_form_follows_the_padded_runs_losses(prepped, tmp_path):
    """`clozeforge train --batch-form` padded, unpadded and static (through torch.compile's `eager` backend, which
    traces without dynamic-shape marks there) in fp32 at dropout 0: every step's losses and the validation figures within
    1e-5 of the padded run's (static: its 40 slots never cap a mask at this length), the same executed FLOPs a
    step in every form (the same real rows and predictions)."""
    from tests.helpers import run_cli
    from trainer.metrics import read_metrics

    runs = {}
    for form, extra in (("padded", ()), ("unpadded", ()), ("static", ("--compile", "eager", "--max-predictions", "40"))):
        run = str(tmp_path / form)
        result = run_cli("train", "--data", f"{prepped}/pairs", "--output", run, "--max-steps", "3", "--batch-size", "8",
                         "--log-every", "1", "--eval-every", "0", "--eval-batches", "2", "--num-workers", "0", "--dropout", "0",
                         "--precision", "fp32", "--batch-form", form, *extra)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[form] = read_metrics(run)
    steps = {form: [r for r in records if "split" not in r] for form, records in runs.items()}
    assert [r["step"] for r in steps["padded"]] == [1, 2, 3]
    for form in ("unpadded", "static"):
        for mine, theirs in zip(steps[form], steps["padded"]):
            for key in ("loss", "mlm_loss", "nsp_loss"):
                assert mine[key] == pytest.approx(theirs[key], abs=1e-5), (form, key)
        valid = [r for r in runs[form] if r.get("split") == "validation"][0]
        reference = [r for r in runs["padded"] if r.get("split") == "validation"][0]
        assert valid["mlm_n"] == reference["mlm_n"] and valid["mlm_loss"] == pytest.approx(reference["mlm_loss"], abs=1e-5)
    flops = {form: [r["executed_flops"] for r in steps[form]] for form in steps}
    assert flops["unpadded"] == flops["padded"] == flops["static"] and all(f > 0 for f in flops["padded"])


def test_auto_is_the_objectives_form_and_a_form_it_cannot_take_is_one_flag_error():
    """--batch-form auto is AUTO_BATCH_FORM's form on each device where the objective's network takes it, else the
    objective's own (ELECTRA: padded on both); naming a form the objective cannot take is refused up front."""
    from schemas.objectives import OBJECTIVES
    from trainer.config import AUTO_BATCH_FORM, TrainConfig, TrainError

    for on_gpu in (False, True):
        assert TrainConfig(data="d", output="o").batch_form_for(on_gpu) == AUTO_BATCH_FORM[on_gpu]
        assert TrainConfig(data="d", output="o", objective="electra").batch_form_for(on_gpu) == OBJECTIVES["electra"].batch_forms[0]
    assert TrainConfig(data="d", output="o", batch_form="static").batch_form_for(False) == "static"
    with pytest.raises(TrainError, match=r"^--batch-form unpadded: --objective electra takes padded batches only$"):
        TrainConfig(data="d", output="o", objective="electra", batch_form="unpadded")
