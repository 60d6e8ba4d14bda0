"""export_hf / verify_export: transformers loads the export with no project code and reproduces our logits."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
from safetensors import safe_open  # noqa: E402

from downstream.export import ExportError, export_hf, exported_keys, verify_export  # noqa: E402
from downstream.export_dir import EXPORT_FILES  # noqa: E402
from process.outputs import OutputDirError  # noqa: E402
from schemas.vocab import SPECIAL_TOKENS  # noqa: E402
from tests.helpers import learned_vocab_dir  # noqa: E402
from trainer.model import BertForPretraining, ModelConfig  # noqa: E402

SENTENCES = [
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "The quick brown Fox jumps over the lazy dog near the River Seine.",
    "Rome, Madrid and Lisbon are capitals in the south of Europe.",
    "A small BERT learns to fill the masked word from both sides of the sentence.",
    "Café owners in Zürich serve coffee; the museum opens at nine o'clock.",
]


def _vocab_dir(path, *, lowercase: bool, with_config: bool = True) -> str:
    """vocab.txt + tokenizer.json (+ vocab_config.json) for a WordPiece trained on SENTENCES, as prep writes them."""
    tok = tokenizers.BertWordPieceTokenizer(lowercase=lowercase)
    tok.train_from_iterator(SENTENCES * 4, vocab_size=1000, special_tokens=list(SPECIAL_TOKENS))
    os.makedirs(path, exist_ok=True)
    tok.save_model(str(path))
    tok.save(os.path.join(path, "tokenizer.json"))
    if with_config:
        with open(os.path.join(path, "vocab_config.json"), "w") as f:
            json.dump({"lowercase": lowercase, "strip_accents": None}, f)
    return str(path)


def _vocab_size(vocab_dir: str) -> int:
    with open(os.path.join(vocab_dir, "vocab.txt")) as f:
        return len(f.read().splitlines())


@pytest.fixture(scope="module")
def uncased(tmp_path_factory):
    """An exported tiny SBO model (so a project-only head is dropped) with its vocab dir and model."""
    root = tmp_path_factory.mktemp("uncased")
    vocab = _vocab_dir(root / "vocab", lowercase=True)
    cfg = ModelConfig.preset("tiny", vocab_size=_vocab_size(vocab), use_sbo=True)
    model = BertForPretraining(cfg, seed=5)
    card = {"training": {"steps": 12, "lr": 1e-4}, "data": {"fingerprint": "sha256:feedbeef"},
            "metrics": {"mlm_accuracy": 0.4321}}
    out = str(root / "hf")
    export_hf(model.state_dict(), cfg, vocab, out, card=card)
    return {"vocab": vocab, "cfg": cfg, "model": model, "out": out}


@contextlib.contextmanager
def _captured_transformers_logs():
    """Collect transformers' log records (its logger does not propagate to root) and Python warnings."""
    messages: list[str] = []

    class _Handler(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler, logger = _Handler(level=logging.WARNING), logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield messages
        messages.extend(str(w.message) for w in caught)
    finally:
        logger.removeHandler(handler)


def _padded_batch(tokenizer, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    enc = tokenizer([("Paris is the capital", "of France."), ("Rome", "Madrid and the dog")], padding=True,
                    return_tensors="pt")
    assert (enc["attention_mask"] == 0).any()  # the batch really is padded
    return {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}


def test_files_and_tensor_names_match_save_pretrained(uncased, tmp_path):
    out, cfg = uncased["out"], uncased["cfg"]
    assert sorted(os.listdir(out)) == sorted(["config.json", "model.safetensors", "vocab.txt", "tokenizer.json",
                                              "tokenizer_config.json", "special_tokens_map.json", "README.md"])
    # transformers' own save of the same architecture is the reference for which names are written.
    reference = transformers.BertForPreTraining(transformers.BertConfig(**cfg.to_hf_config()))
    reference.save_pretrained(tmp_path / "ref")
    ref_file, our_file = tmp_path / "ref" / "model.safetensors", os.path.join(out, "model.safetensors")
    with safe_open(ref_file, "pt") as ref, safe_open(our_file, "pt") as ours:
        assert set(ours.keys()) == set(ref.keys()) == set(exported_keys(cfg))
        assert all(ours.get_slice(k).get_dtype() == "F32" for k in ours.keys())
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == ["BertForPreTraining"] and config["vocab_size"] == cfg.vocab_size
    assert not any(name.startswith(".") for name in os.listdir(os.path.dirname(out)))  # no staging left behind


def test_transformers_reproduces_mlm_and_nsp_logits(uncased):
    tokenizer = transformers.AutoTokenizer.from_pretrained(uncased["out"])
    model = uncased["model"].train()
    diffs = verify_export(uncased["out"], model, _padded_batch(tokenizer, uncased["cfg"]))
    assert model.training  # restored
    assert set(diffs) == {"mlm_max_abs_diff", "nsp_max_abs_diff"}
    assert diffs["mlm_max_abs_diff"] <= 1e-4 and diffs["nsp_max_abs_diff"] <= 1e-4


def test_verify_export_notices_a_different_model(uncased):
    tokenizer = transformers.AutoTokenizer.from_pretrained(uncased["out"])
    other = BertForPretraining(uncased["cfg"], seed=6)
    diffs = verify_export(uncased["out"], other, _padded_batch(tokenizer, uncased["cfg"]))
    assert diffs["mlm_max_abs_diff"] > 1e-3


def test_auto_classes_load_with_no_missing_weights(uncased):
    out = uncased["out"]
    with _captured_transformers_logs() as messages:
        _, mlm_info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
        _, base_info = transformers.AutoModel.from_pretrained(out, output_loading_info=True)
        _, pre_info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
        tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert not mlm_info["missing_keys"] and not base_info["missing_keys"] and not pre_info["missing_keys"]
    assert not pre_info["unexpected_keys"]  # nothing project-only leaked into the file
    assert not [m for m in messages if "MISSING" in m or "newly initialized" in m], messages
    assert tokenizer.mask_token == "[MASK]" and tokenizer.pad_token_id == uncased["cfg"].pad_token_id
    # Control: a head that is not in the export is reported through the same channel.
    with _captured_transformers_logs() as messages:
        transformers.AutoModelForSequenceClassification.from_pretrained(out)
    assert any("MISSING" in m or "newly initialized" in m for m in messages)


def test_fill_mask_pipeline_returns_vocabulary_tokens(uncased):
    fill = transformers.pipeline("fill-mask", model=uncased["out"], device="cpu")
    predictions = fill("Paris is the [MASK] of France.", top_k=3)
    with open(os.path.join(uncased["out"], "vocab.txt")) as f:
        vocab = f.read().splitlines()
    assert len(predictions) == 3
    assert all(vocab[p["token"]] == p["token_str"].replace(" ", "") or p["token_str"] in vocab[p["token"]]
               for p in predictions)


def test_uncased_tokenizer_matches_prep_tokenizer(uncased):
    tokenizer = transformers.AutoTokenizer.from_pretrained(uncased["out"])
    prep = tokenizers.Tokenizer.from_file(os.path.join(uncased["vocab"], "tokenizer.json"))
    text = "PARIS is the Capital of Zürich."
    assert tokenizer.do_lower_case is True
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == prep.encode(text).ids
    ids = tokenizer("Paris", "Rome")["input_ids"]
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id


def test_cased_vocab_exports_cased_tokenizer(tmp_path):
    vocab = _vocab_dir(tmp_path / "vocab", lowercase=False)
    cfg = ModelConfig.preset("tiny", vocab_size=_vocab_size(vocab))
    export_hf(BertForPretraining(cfg).state_dict(), cfg, vocab, str(tmp_path / "hf"))
    with open(tmp_path / "hf" / "tokenizer_config.json") as f:
        assert json.load(f)["do_lower_case"] is False
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    prep = tokenizers.Tokenizer.from_file(os.path.join(vocab, "tokenizer.json"))
    assert tokenizer.tokenize("Paris")[0] == "Paris" and tokenizer.tokenize("paris")[0] != "Paris"
    text = "Paris and Berlin; the Fox in Zürich."
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == prep.encode(text).ids


def test_missing_vocab_config_means_lowercase(tmp_path):
    vocab = _vocab_dir(tmp_path / "vocab", lowercase=True, with_config=False)
    cfg = ModelConfig.preset("tiny", vocab_size=_vocab_size(vocab) + 11)  # a padded embedding table is fine
    export_hf(BertForPretraining(cfg).state_dict(), cfg, vocab, str(tmp_path / "hf"))
    with open(tmp_path / "hf" / "tokenizer_config.json") as f:
        assert json.load(f)["do_lower_case"] is True


def test_pre_layernorm_export_is_refused_and_writes_nothing(uncased, tmp_path):
    cfg = ModelConfig.preset("tiny", vocab_size=uncased["cfg"].vocab_size, pre_layernorm=True)
    with pytest.raises(ExportError, match="pre-LayerNorm") as err:
        export_hf(BertForPretraining(cfg).state_dict(), cfg, uncased["vocab"], str(tmp_path / "hf"))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "hf").exists()


def test_inconsistent_inputs_are_refused(uncased, tmp_path):
    cfg, vocab = uncased["cfg"], uncased["vocab"]
    state = BertForPretraining(cfg).state_dict()
    untied = dict(state, **{"cls.predictions.decoder.weight": state["cls.predictions.decoder.weight"] + 1})
    with pytest.raises(ExportError, match="tied"):
        export_hf(untied, cfg, vocab, str(tmp_path / "a"))
    renamed = {("module." + k): v for k, v in state.items()}
    with pytest.raises(ExportError, match="missing"):
        export_hf(renamed, cfg, vocab, str(tmp_path / "b"))
    small = ModelConfig.preset("tiny", vocab_size=cfg.vocab_size - 1)
    with pytest.raises(ExportError, match="more than the model's vocab_size"):
        export_hf(BertForPretraining(small).state_dict(), small, vocab, str(tmp_path / "c"))
    with pytest.raises(ExportError, match="does not match ModelConfig|word embeddings"):
        export_hf(state, ModelConfig.preset("tiny", vocab_size=cfg.vocab_size + 1), vocab, str(tmp_path / "d"))


def test_model_card_reports_shape_card_and_dropped_head(uncased):
    with open(os.path.join(uncased["out"], "README.md")) as f:
        text = f.read()
    sbo_params = sum(p.numel() for p in uncased["model"].sbo.parameters())
    exported = uncased["model"].num_parameters(exported_only=True)
    assert text.startswith("---\nlibrary_name: transformers")
    assert f"| 2 | 128 | 2 | 512 | {uncased['cfg'].vocab_size} | 512 | 512 | {exported:,} |" in text  # no trained length given: every position
    assert f"({sbo_params:,} parameters, `sbo.*`)" in text
    assert "sha256:feedbeef" in text and "0.4321" in text and "| steps | 12 |" in text
    reloaded = transformers.BertForPreTraining.from_pretrained(uncased["out"])
    assert reloaded.num_parameters() == exported  # the card's count is what transformers counts


def test_a_vocabulary_without_cjk_splitting_exports_as_such(tmp_path):
    """handle_chinese_chars=False in vocab_config.json reaches tokenizer_config.json, so transformers' slow
    tokenizer splits ideographs as prep's encoder did (the fast one reads tokenizer.json)."""

    from pipelines.wordpiece import WordPieceEncoder

    texts = SENTENCES + ["東京は日本の首都です。", "北京是中国的首都。"] * 3
    vocab = learned_vocab_dir(tmp_path / "vocab", texts, vocab_size=400, handle_chinese_chars=False)
    cfg = ModelConfig.preset("tiny", vocab_size=_vocab_size(vocab))
    export_hf(BertForPretraining(cfg).state_dict(), cfg, vocab, str(tmp_path / "hf"))
    with open(tmp_path / "hf" / "tokenizer_config.json") as f:
        assert json.load(f)["tokenize_chinese_chars"] is False
    text = "東京は日本の首都です。 Paris is the capital."
    ours = WordPieceEncoder.from_directory(vocab).encode(text)
    for fast in (True, False):
        tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", use_fast=fast)
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == ours, fast


def test_model_card_metrics_stop_at_the_exported_step(tmp_path):
    """`export --tag step_10` reports the figures logged up to step 10, not the run's last ones."""
    from downstream.export import _final_metrics

    records = [{"step": 10, "loss": 5.0}, {"step": 10, "split": "validation", "mlm_loss": 4.5},
               {"step": 20, "loss": 3.0}, {"step": 20, "split": "validation", "mlm_loss": 2.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert _final_metrics(str(tmp_path), up_to_step=10) == {"train_step": 10, "train_loss": 5.0, "valid_step": 10, "valid_mlm_loss": 4.5}
    assert _final_metrics(str(tmp_path), up_to_step=None)["valid_mlm_loss"] == 2.5


def test_export_replaces_an_earlier_export_whole_and_refuses_another_model(uncased, tmp_path):
    """Files of another model never survive beside a new export: transformers would load a stale
    added_tokens.json (one token more than the embedding) and a pytorch_model.bin would sit beside ours."""
    cfg, vocab, state = uncased["cfg"], uncased["vocab"], uncased["model"].state_dict()
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "added_tokens.json").write_text(json.dumps({"[NEW]": cfg.vocab_size}))
    (other / "pytorch_model.bin").write_bytes(b"not ours")
    with pytest.raises(OutputDirError, match=r"added_tokens.json, pytorch_model.bin\); pass --overwrite") as err:
        export_hf(state, cfg, vocab, str(other))
    assert "\n" not in str(err.value)
    assert sorted(os.listdir(other)) == ["added_tokens.json", "pytorch_model.bin"]  # left as it was
    export_hf(state, cfg, vocab, str(other), overwrite=True)
    assert set(os.listdir(other)) == EXPORT_FILES
    assert len(transformers.AutoTokenizer.from_pretrained(str(other))) == _vocab_size(vocab)
    export_hf(state, cfg, vocab, str(other))  # an earlier export of ours needs no flag
    assert set(os.listdir(other)) == EXPORT_FILES
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no staging left behind


KILLED_EXPORT = """
import os, signal, sys
from downstream import export_dir as output_dir

real_rename, renames = os.rename, int(sys.argv[2])


def rename(a, b):  # the kill -9 lands after this many of the swap's renames
    global renames
    if renames == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    renames -= 1
    real_rename(a, b)


os.rename = rename
with output_dir.staged_directory(sys.argv[1]) as staging:
    with open(os.path.join(staging, "README.md"), "w") as f:
        f.write("half of an export")
    if renames < 0:
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.integration  # kills a real process
@pytest.mark.parametrize("renames", [-1, 1])
def test_the_next_export_cleans_what_a_killed_one_left(uncased, tmp_path, renames, capsys):
    """Issue 26's closing note: kill -9 of export left its hidden staging directory beside --output, forever; and
    killed between the swap's two renames it would leave the old export set aside with nothing in its place.
    The next export into the same --output (holding its lock, so no live run owns them) puts the old directory
    back and removes the rest. renames=-1: killed while filling the staging; 1: after the old one was set aside."""
    import subprocess
    import sys

    from tests.helpers import ROOT

    out = tmp_path / "hf"
    cfg, vocab, state = uncased["cfg"], uncased["vocab"], uncased["model"].state_dict()
    export_hf(state, cfg, vocab, str(out))
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    killed = subprocess.run([sys.executable, "-c", KILLED_EXPORT, str(out), str(renames)], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    left = sorted(n for n in os.listdir(tmp_path) if n.startswith(".hf."))
    assert any(".tmp-" in n for n in left) and ".hf.lock" in left  # what kill -9 leaves
    assert out.exists() == (renames < 0)
    capsys.readouterr()
    export_hf(state, cfg, vocab, str(out))
    assert "removed the leftovers of an interrupted run" in capsys.readouterr().out
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


def test_export_files_have_the_modes_of_the_umask(uncased, tmp_path):
    previous = os.umask(0o022)
    try:
        export_hf(uncased["model"].state_dict(), uncased["cfg"], uncased["vocab"], str(tmp_path / "hf"))
    finally:
        os.umask(previous)
    modes = {name: stat.S_IMODE(os.stat(tmp_path / "hf" / name).st_mode) for name in os.listdir(tmp_path / "hf")}
    assert modes == dict.fromkeys(EXPORT_FILES, 0o644)
    assert stat.S_IMODE(os.stat(tmp_path / "hf").st_mode) == 0o755


def test_trained_length_is_the_tokenizers_default_and_the_cards(uncased, tmp_path):
    """A model trained on 64-token pairs: transformers truncates at 64 by default; config.json keeps 512 positions."""
    out = str(tmp_path / "hf")
    export_hf(uncased["model"].state_dict(), uncased["cfg"], uncased["vocab"], out, trained_seq_len=64)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.model_max_length == 64
    assert len(tokenizer(" ".join(SENTENCES * 10), truncation=True)["input_ids"]) == 64
    assert transformers.AutoConfig.from_pretrained(out).max_position_embeddings == 512
    with open(os.path.join(out, "README.md")) as f:
        assert "positions 64-511 exist but were never trained" in f.read()
    with pytest.raises(ExportError, match="trained sequence length 600 is outside the model's 512 positions"):
        export_hf(uncased["model"].state_dict(), uncased["cfg"], uncased["vocab"], str(tmp_path / "hf2"), trained_seq_len=600)
