"""--init-from, in process: the model built from a source gives the source's logits before any update (fp32, within
1e-5) for sources made by transformers itself and by `clozeforge export`; the heads a source lacks start fresh and
are named; bad sources are one line naming the file. The DeepSpeed runs are test_init_from_training.py."""

from __future__ import annotations

import json
import os
import re
import shutil
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")

from downstream.export import export_hf, verify_export  # noqa: E402
from schemas.pairs import NSP_PAIRS  # noqa: E402
from tests.helpers import learned_vocab_dir  # noqa: E402
from trainer.builders import build_model  # noqa: E402
from trainer.config import TrainConfig, TrainError  # noqa: E402
from trainer.model import BertForPretraining, ModelConfig  # noqa: E402
from trainer.model.hf_names import our_name  # noqa: E402
from trainer.start import defaults  # noqa: E402
from trainer.start.rate import Rate  # noqa: E402
from trainer.start.sources import ARCHITECTURE, open_source, source_problem  # noqa: E402

TEXTS = ["Paris is the capital of France, and Berlin is the capital of Germany.",
         "Rome, Madrid and Lisbon are capitals in the south of Europe.",
         "A small BERT learns to fill the masked word from both sides of the sentence."]
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> str:
    return learned_vocab_dir(tmp_path_factory.mktemp("vocab"), TEXTS, vocab_size=300)


def _tokens(vocab: str) -> list[str]:
    with open(os.path.join(vocab, "vocab.txt")) as f:
        return f.read().splitlines()


def hf_source(path, vocab: str, cls=None, seed: int = 3, **save) -> str:
    """A small random transformers BERT of class `cls` saved with save_pretrained, with the vocabulary beside it."""
    cls = cls or transformers.BertForPreTraining
    config = transformers.BertConfig(vocab_size=len(_tokens(vocab)), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=48, max_position_embeddings=64, layer_norm_eps=1e-7)
    torch.manual_seed(seed)
    model = cls(config)
    with torch.no_grad():  # transformers zeroes the MLM bias; a random one checks that it is carried over too
        for name, p in model.named_parameters():
            if name.endswith("predictions.bias"):
                p.normal_()
    model.save_pretrained(str(path), **save)
    shutil.copy(os.path.join(vocab, "vocab.txt"), os.path.join(path, "vocab.txt"))
    return str(path)


def manifest_for(vocab: str, max_seq_len: int = 32):
    """What build_model and source_problem read of a manifest (its vocabulary record and length)."""
    from trainer.start.sources import canonical_vocab_sha256

    with open(os.path.join(vocab, "vocab.txt"), "rb") as f:
        sha = canonical_vocab_sha256(f.read(), "vocab.txt")
    return SimpleNamespace(vocab={"size": len(_tokens(vocab)), "sha256": sha}, special_tokens={"[PAD]": 0},
                           special_id={"pad_token": 0}.__getitem__, row_format=NSP_PAIRS, tokenizer="wordpiece",
                           max_seq_len=max_seq_len, url="memory://pairs")


def built(source_dir: str, vocab: str, lines: list | None = None, **flags) -> BertForPretraining:
    config = TrainConfig(data="unused", output="unused", init_from=source_dir, **flags)
    source = open_source(source_dir)
    architecture = {k: source.architecture[k] for k in ARCHITECTURE}
    return build_model(config, manifest_for(vocab), source=source, architecture=architecture,
                       log=(lines.append if lines is not None else print))


def batch(vocab: str) -> dict[str, torch.Tensor]:
    tokenizer = transformers.BertTokenizerFast(vocab_file=os.path.join(vocab, "vocab.txt"))
    enc = tokenizer([("Paris is the capital", "of France."), ("Rome", "Madrid and the small word")], padding=True, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any()
    return {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}


def test_a_transformers_bert_for_pretraining_gives_its_own_logits_at_step_0(vocab, tmp_path):
    source = hf_source(tmp_path / "src", vocab)
    lines: list[str] = []
    model = built(source, vocab, lines)
    diffs = verify_export(source, model, batch(vocab))
    print("step-0 |ours - transformers| (BertForPreTraining source):", diffs)
    assert diffs["mlm_max_abs_diff"] <= TOLERANCE and diffs["nsp_max_abs_diff"] <= TOLERANCE, diffs
    assert model.config.layer_norm_eps == 1e-7 and model.config.intermediate_size == 48  # read from config.json
    assert len(lines) == 1 and "fresh from --seed: none" in lines[0]


def test_a_clozeforge_export_gives_its_own_logits_at_step_0_and_span_masking_gets_a_fresh_sbo_head(vocab, tmp_path):
    cfg = ModelConfig(vocab_size=len(_tokens(vocab)), hidden_size=32, num_layers=2, num_heads=4, intermediate_size=40,
                      max_position_embeddings=48, use_sbo=True)
    ours = BertForPretraining(cfg, seed=11)
    with torch.no_grad():
        ours.cls.predictions.bias.normal_()
    export_hf(ours.state_dict(), cfg, vocab, str(tmp_path / "export"))
    lines: list[str] = []
    from trainer.masking import MaskingConfig

    model = built(str(tmp_path / "export"), vocab, lines, masking=MaskingConfig(strategy="span"))
    diffs = verify_export(str(tmp_path / "export"), model, batch(vocab))
    print("step-0 |ours - transformers| (clozeforge export source):", diffs)
    assert max(diffs.values()) <= TOLERANCE, diffs
    assert "fresh from --seed: SBO head" in lines[0]
    for name, tensor in ours.state_dict().items():  # the very weights, not only close logits
        if not name.startswith("sbo."):
            assert torch.equal(model.state_dict()[name], tensor), name


def test_a_masked_lm_source_keeps_its_mlm_logits_and_names_the_fresh_pooler_and_nsp_head(vocab, tmp_path):
    source = hf_source(tmp_path / "mlm", vocab, cls=transformers.BertForMaskedLM)
    lines: list[str] = []
    model = built(source, vocab, lines).eval()
    inputs = batch(vocab)
    with torch.no_grad():
        theirs = transformers.BertForMaskedLM.from_pretrained(source).eval()(**inputs).logits
        ours = model.dense_mlm_logits(model.encode(**inputs)[0])
    real = inputs["attention_mask"].bool()
    assert (ours - theirs)[real].abs().max().item() <= TOLERANCE
    assert "fresh from --seed: pooler, NSP head" in lines[0], lines


def test_a_bare_bert_model_keeps_its_encoder_and_gets_fresh_heads(vocab, tmp_path):
    source = hf_source(tmp_path / "bare", vocab, cls=transformers.BertModel)
    lines: list[str] = []
    model = built(source, vocab, lines).eval()
    inputs = batch(vocab)
    with torch.no_grad():
        theirs = transformers.BertModel.from_pretrained(source).eval()(**inputs)
        sequence, pooled, _ = model.encode(**inputs)
    real = inputs["attention_mask"].bool()
    assert (sequence - theirs.last_hidden_state)[real].abs().max().item() <= TOLERANCE
    assert (pooled - theirs.pooler_output).abs().max().item() <= TOLERANCE
    assert "fresh from --seed: MLM head, NSP head" in lines[0], lines


def pickled(source: str, shards: int = 1, legacy_names: bool = False) -> str:
    """Rewrite `source`'s weights as pytorch_model.bin (or `shards` files and their index), as older transformers
    saved them (transformers 5 writes safetensors only); `legacy_names`: LayerNorm's gamma/beta of TensorFlow BERT."""
    from safetensors.torch import load_file

    path = os.path.join(source, "model.safetensors")
    state = load_file(path)
    os.remove(path)
    if legacy_names:
        state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v for k, v in state.items()}
    state["bert.embeddings.position_ids"] = torch.arange(64)[None]  # a buffer older versions saved
    if shards == 1:
        torch.save(state, os.path.join(source, "pytorch_model.bin"))
        return source
    names, weight_map = sorted(state), {}
    for i in range(shards):
        file = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = {k: state[k] for k in names[i::shards]}
        torch.save(part, os.path.join(source, file))
        weight_map.update(dict.fromkeys(part, file))
    with open(os.path.join(source, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return source


@pytest.mark.parametrize("kind", ["bin", "sharded-safetensors", "sharded-bin", "tensorflow-names-bin"])
def test_pickled_and_sharded_checkpoints_load_exactly(vocab, tmp_path, kind):
    if kind == "sharded-safetensors":
        source = hf_source(tmp_path / "src", vocab, max_shard_size="20KB")
        assert "model.safetensors.index.json" in os.listdir(source)
        reference = source
    else:
        reference = hf_source(tmp_path / "reference", vocab)
        source = pickled(hf_source(tmp_path / "src", vocab), shards=3 if kind == "sharded-bin" else 1,
                         legacy_names=kind.startswith("tensorflow"))
    diffs = verify_export(reference, built(source, vocab), batch(vocab))
    assert max(diffs.values()) <= TOLERANCE, diffs


def test_tensorflow_layernorm_names_and_position_ids_buffers_are_read():
    assert our_name("bert.embeddings.LayerNorm.gamma") == "bert.embeddings.LayerNorm.weight"
    assert our_name("encoder.layer.0.output.LayerNorm.beta") == "bert.encoder.layer.0.output.LayerNorm.bias"
    assert our_name("cls.predictions.transform.dense.weight") == "cls.predictions.transform.dense.weight"


def _problem(source: str, vocab: str) -> str:
    config = TrainConfig(data="unused", output="/nonexistent/run", init_from=source)
    found = source_problem(config, manifest_for(vocab))
    assert found is not None and "\n" not in found
    return found


def _rewrite_config(source: str, **changes) -> None:
    path = os.path.join(source, "config.json")
    with open(path) as f:
        body = json.load(f)
    with open(path, "w") as f:
        json.dump({**body, **changes}, f)


@pytest.mark.parametrize("model_type", ["gpt2", "t5"])
def test_a_config_of_no_family_is_one_line(vocab, tmp_path, model_type):
    source = hf_source(tmp_path / "src", vocab)
    _rewrite_config(source, model_type=model_type, architectures=["X"])
    assert f"config.json: model_type '{model_type}' is not a family clozeforge trains" in _problem(source, vocab)


def test_a_tensor_whose_shape_differs_from_the_config_is_named(vocab, tmp_path):
    source = hf_source(tmp_path / "src", vocab)
    _rewrite_config(source, intermediate_size=64)
    found = _problem(source, vocab)
    assert re.search(r"model\.safetensors: bert\.encoder\.layer\.0\.intermediate\.dense\.(weight|bias) has shape \(48(, 32)?,?\), "
                     r"the config says \(64(, 32)?,?\)", found), found


def test_a_missing_weights_file_is_one_line(vocab, tmp_path):
    source = hf_source(tmp_path / "src", vocab)
    os.remove(os.path.join(source, "model.safetensors"))
    assert "no weights file (model.safetensors, model.safetensors.index.json, pytorch_model.bin" in _problem(source, vocab)


def test_a_sharded_index_naming_a_missing_file_is_one_line(vocab, tmp_path):
    source = hf_source(tmp_path / "src", vocab, max_shard_size="20KB")
    shard = sorted(f for f in os.listdir(source) if f.startswith("model-"))[-1]
    os.remove(os.path.join(source, shard))
    assert f"model.safetensors.index.json names {shard}, which is not in" in _problem(source, vocab)


def test_a_vocabulary_mismatch_is_one_line(vocab, tmp_path):
    source = hf_source(tmp_path / "src", vocab)
    other = learned_vocab_dir(tmp_path / "other", ["entirely different words here", "and more of them"], vocab_size=300)
    assert "prepped with another vocabulary than --init-from" in _problem(source, other)


def test_a_pickle_that_would_run_code_is_refused_unrun(vocab, tmp_path):
    source = pickled(hf_source(tmp_path / "src", vocab))

    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    torch.save({"bert.embeddings.word_embeddings.weight": Boom()}, os.path.join(source, "pytorch_model.bin"))
    assert "refused to load" in _problem(source, vocab)
    assert not os.path.exists(tmp_path / "ran")


def test_a_disagreeing_model_preset_is_refused_and_defaults_follow_the_recipe(vocab, tmp_path):
    source = hf_source(tmp_path / "src", vocab)
    config = TrainConfig(data="unused", output=str(tmp_path / "run"), init_from=source, model="tiny")
    found = defaults.agreement(config, open_source(source).architecture)
    assert found and found.startswith("--model tiny disagrees with --init-from") and "hidden_size 128 (--model tiny) vs 32" in found
    chosen = Rate(6e-4, "the width rule")
    settled, notes = defaults.with_defaults(TrainConfig(data="d", output="o", init_from=source), set(), None, chosen)
    assert (settled.lr, settled.warmup_ratio) == (6e-4, 0.06) and notes == ["lr 0.0006: the width rule"]  # warmup: scratch's 6%
    kept, notes = defaults.with_defaults(TrainConfig(data="d", output="o", init_from=source, lr=3e-4), {"lr"}, {"strategy": "wwm"}, chosen)
    assert kept.lr == 3e-4 and kept.warmup_ratio == 0.06 and kept.masking.strategy == "wwm"
    assert notes == ["lr 0.0003: given (--lr)", "masking wwm 0.15 (the source's)"]


def test_a_source_that_is_no_directory_of_either_kind_is_one_line(tmp_path):
    with pytest.raises(TrainError, match="no config.json there, nor checkpoints/"):
        open_source(str(tmp_path / "nothing"))


def test_the_flags_a_user_gave_are_told_from_defaults():
    from trainer.pretrain import given_flags

    given = given_flags(["--data", "d", "--output", "o", "--lr", "1e-3", "--mask-prob", "0.15", "--no-verify-checksums"])
    assert {"lr", "masking.mask_prob", "verify_checksums", "data", "output"} <= given
    assert not given & {"warmup_ratio", "model", "init_from", "masking.strategy"}  # even a value equal to the default counts


def _started_run(run, record: dict) -> str:
    """A run directory that has a checkpoint (what `recorded` looks at) and its train_config.json."""
    os.makedirs(os.path.join(run, "checkpoints", "step_00000002"))
    with open(os.path.join(run, "checkpoints", "latest"), "w") as f:
        f.write("step_00000002")
    with open(os.path.join(run, "train_config.json"), "w") as f:
        json.dump(record, f)
    return str(run)


def test_a_resume_keeps_the_source_and_its_recipe_without_the_flag_and_refuses_it_with(tmp_path):
    from trainer.start.steps import settle

    run = _started_run(tmp_path / "run", {"init_from": "/gone/source", "masking": {"strategy": "wwm", "mask_prob": 0.2},
                                          "lr": 6e-4})
    config, notes = settle(TrainConfig(data="d", output=run), set())
    assert (config.init_from, config.lr, config.warmup_ratio, config.model) == ("/gone/source", 6e-4, 0.06, None)
    assert (config.masking.strategy, config.masking.mask_prob) == ("wwm", 0.2) and notes  # the source need not exist
    with pytest.raises(TrainError, match="already has checkpoints .* rerun without --init-from"):
        settle(TrainConfig(data="d", output=run, init_from="/gone/source"), set())
    scratch = _started_run(tmp_path / "scratch", {"model": "tiny"})
    config, notes = settle(TrainConfig(data="d", output=scratch), set())
    assert (config.init_from, config.lr, config.model, notes) == (None, 1e-3, "tiny", [])


def test_a_source_at_an_fsspec_url_loads_the_same(vocab, tmp_path):
    import fsspec

    local = hf_source(tmp_path / "src", vocab)
    fs = fsspec.filesystem("memory")
    for name in os.listdir(local):
        with open(os.path.join(local, name), "rb") as f:
            fs.pipe(f"/i36-source/{name}", f.read())
    remote = built("memory://i36-source", vocab).state_dict()
    for name, tensor in built(local, vocab).state_dict().items():
        assert torch.equal(remote[name], tensor), name


def test_positions_shorter_than_the_data_are_one_line(vocab, tmp_path):
    source = hf_source(tmp_path / "src", vocab)  # 64 positions
    config = TrainConfig(data="unused", output="/nonexistent/run", init_from=source)
    found = source_problem(config, manifest_for(vocab, max_seq_len=128))
    assert found == f"--init-from {source}: its positions stop at 64, --data's rows are up to 128 tokens"
