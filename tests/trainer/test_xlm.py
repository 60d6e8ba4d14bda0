"""The xlm family (schemas/families.py): its export loads as transformers' XLMWithLMHeadModel with no project code and
gives our logits, languages and TLM's restarted positions included; `pipeline("fill-mask")` and AutoTokenizer run on
it; --init-from that export starts from its logits exactly; TLM rows collate as XLM trains them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
import torch

transformers = pytest.importorskip("transformers")

from downstream.export import export_hf, verify_export  # noqa: E402
from schemas.pairs import PACKED_ROWS, TLM_PAIRS  # noqa: E402
from tests.helpers import learned_vocab_dir  # noqa: E402
from trainer.builders import build_model  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.data.collate import ROW_COLLATORS  # noqa: E402
from trainer.model import BertForPretraining, ModelConfig  # noqa: E402
from trainer.start.sources import ARCHITECTURE, open_source  # noqa: E402

TOLERANCE = 1e-5
LANGUAGES = ("de", "en", "fr")


def _catalog_texts() -> list[str]:
    """English UI strings and their German translations from a gettext catalog this machine has (msgunfmt-free:
    Python's gettext reads .mo files)."""
    import gettext
    import glob

    for path in sorted(glob.glob("/usr/share/locale/de/LC_MESSAGES/*.mo")):
        try:
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog
        except (OSError, UnicodeDecodeError):
            continue
        pairs = [(k, v) for k, v in catalog.items() if isinstance(k, str) and k and v and "%" not in k and len(k.split()) > 3]
        if len(pairs) >= 40:
            return [t for pair in pairs[:200] for t in pair]
    pytest.skip("no German gettext catalog with 40 sentences on this machine")


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> str:
    return learned_vocab_dir(tmp_path_factory.mktemp("vocab"), _catalog_texts(), vocab_size=600, lowercase=False)


def _model(vocab: str) -> tuple[BertForPretraining, ModelConfig]:
    size = sum(1 for _ in open(os.path.join(vocab, "vocab.txt"), encoding="utf-8"))
    config = ModelConfig.preset("tiny", vocab_size=size, family="xlm", languages=LANGUAGES, hidden_size=32, num_heads=2,
                                intermediate_size=128, max_position_embeddings=40, hidden_dropout=0.0, attention_dropout=0.0)
    model = BertForPretraining(config, seed=5).eval()
    with torch.no_grad():  # non-trivial biases and norms
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return model, config


def _tlm_batch(vocab: str) -> dict[str, torch.Tensor]:
    """Three translation pairs (German, English, French sides) collated as TLM rows."""
    rows = {"tokens_a": [[7, 8, 9, 10], [11, 12], [13, 14, 15]], "tokens_b": [[20, 21], [22, 23, 24, 25, 26], [27]],
            "language_a": ["en", "en", "de"], "language_b": ["de", "fr", "en"], "num_tokens": [9, 10, 7],
            "source": ["en-de", "en-fr", "de-en"], "doc_id": ["a.mo:1", "b.mo:2", "c.mo:3"]}
    table = pa.table(rows, schema=TLM_PAIRS.schema(600))
    manifest = SimpleNamespace(special_id={"cls_token": 2, "sep_token": 3, "pad_token": 0}.__getitem__, max_seq_len=40)
    arrays = ROW_COLLATORS[TLM_PAIRS.kind]([(table.to_batches()[0], np.arange(3))], manifest, 1, {c: i for i, c in enumerate(LANGUAGES)})
    return {k: torch.from_numpy(v) for k, v in arrays.items() if k != "special_mask"} | {"special_mask": arrays["special_mask"]}


def test_tlm_rows_collate_with_each_sides_language_and_positions_restarting_at_the_second(vocab):
    batch = _tlm_batch(vocab)
    assert batch["input_ids"][0].tolist() == [2, 7, 8, 9, 10, 3, 20, 21, 3, 0]
    assert batch["position_ids"][0].tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 0]  # B starts again at 0; padding 0
    assert batch["token_type_ids"][0].tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]  # en = 1 for [CLS] A [SEP], de = 0 for B [SEP]
    assert batch["token_type_ids"][1].tolist() == [1, 1, 1, 1, 2, 2, 2, 2, 2, 2]  # en, then fr
    assert batch["position_ids"][2].tolist() == [0, 1, 2, 3, 4, 0, 1, 0, 0, 0]
    assert batch["special_mask"][0].tolist() == [True, False, False, False, False, True, False, False, True, True]  # both sides maskable
    assert batch["next_sentence_label"].tolist() == [0, 0, 0]
    table = pa.table({"tokens": [[7, 8]], "num_tokens": [4], "source": ["ja"], "doc_id": ["x"]}, schema=PACKED_ROWS.schema(600, 2))
    manifest = SimpleNamespace(special_id={"cls_token": 2, "sep_token": 3, "pad_token": 0}.__getitem__, max_seq_len=40, separator_id=None)
    with pytest.raises(ValueError, match="rows in ja, not a language of the model"):
        ROW_COLLATORS[PACKED_ROWS.kind]([(table.to_batches()[0], np.arange(1))], manifest, 1, {c: i for i, c in enumerate(LANGUAGES)})


def test_the_export_is_an_xlm_with_lm_head_model_that_gives_our_logits_and_runs_fill_mask(vocab, tmp_path):
    model, config = _model(vocab)
    out = str(tmp_path / "export")
    export_hf(model.state_dict(), config, vocab, out, trained_seq_len=32)
    body = json.load(open(os.path.join(out, "config.json")))
    assert body["model_type"] == "xlm" and body["architectures"] == ["XLMWithLMHeadModel"]
    assert body["lang2id"] == {"de": 0, "en": 1, "fr": 2} and body["n_langs"] == 3 and body["use_lang_emb"] is True
    batch = _tlm_batch(vocab)
    diffs = verify_export(out, model, batch)  # langs and TLM's positions passed to both
    assert diffs["mlm_max_abs_diff"] <= TOLERANCE, diffs
    unnamed = {k: v for k, v in batch.items() if k != "token_type_ids"}  # no language named: none added, by both
    assert verify_export(out, model, unnamed)["mlm_max_abs_diff"] <= TOLERANCE
    # a process with no project code on its path loads it, its tokenizer included, and fills a mask
    script = (
        "import json, sys, transformers\n"
        "tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "model = transformers.AutoModelForMaskedLM.from_pretrained(sys.argv[1])\n"
        "enc = tok('Die Datei wurde gespeichert.')\n"
        "fill = transformers.pipeline('fill-mask', model=sys.argv[1], top_k=3)\n"
        "print(json.dumps({'class': type(model).__name__, 'tokenizer': type(tok).__name__, 'fast': tok.is_fast, 'keys': sorted(enc),"
        " 'filled': len(fill('Die Datei wurde ' + tok.mask_token + '.'))}))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", script, out], capture_output=True, text=True, cwd=str(tmp_path),
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen.pop("tokenizer").startswith("BertTokenizer")  # BertTokenizerFast (transformers 5 names it BertTokenizer)
    assert seen == {"class": "XLMWithLMHeadModel", "fast": True, "keys": ["attention_mask", "input_ids"], "filled": 3}


def test_init_from_an_xlm_export_starts_from_its_logits_and_languages(vocab, tmp_path):
    model, config = _model(vocab)
    out = str(tmp_path / "export")
    export_hf(model.state_dict(), config, vocab, out)
    source = open_source(out)
    assert source.architecture["family"] == "xlm" and tuple(source.architecture["languages"]) == LANGUAGES
    architecture = {k: source.architecture[k] for k in ARCHITECTURE if k in source.architecture}
    manifest = SimpleNamespace(vocab={"size": config.vocab_size}, special_id={"pad_token": 0}.__getitem__, row_format=TLM_PAIRS,
                               max_seq_len=32, url="memory://pairs")
    lines: list[str] = []
    train = TrainConfig(data="unused", output="unused", init_from=out, family="xlm", languages=("en", "ja"))
    started = build_model(train, manifest, source=source, architecture=architecture, log=lines.append)
    assert started.config.languages == LANGUAGES  # the source's embeddings' order, not the data's
    for name, tensor in model.state_dict().items():
        assert torch.equal(started.state_dict()[name], tensor), name
    assert verify_export(out, started.eval(), _tlm_batch(vocab))["mlm_max_abs_diff"] <= TOLERANCE


def test_an_xlm_model_refuses_one_language_and_another_ffn_width():
    with pytest.raises(ValueError, match="two or more distinct languages"):
        ModelConfig.preset("tiny", vocab_size=100, family="xlm", languages=("en",))
    with pytest.raises(ValueError, match="feed-forward width is 4 x hidden"):
        ModelConfig.preset("tiny", vocab_size=100, family="xlm", languages=("de", "en"), intermediate_size=100)
    with pytest.raises(ValueError, match="no language embeddings"):
        ModelConfig.preset("tiny", vocab_size=100, family="bert", languages=("de", "en"))


def test_unpadded_and_static_batches_keep_tlms_positions(vocab):
    from trainer.data.batch_forms import FORMS

    batch = {k: v.numpy() for k, v in _tlm_batch(vocab).items() if k != "special_mask"}
    batch["mlm_positions"], batch["mlm_labels"] = np.array([[1], [2], [3]]), np.array([[7], [-100], [13]])
    packed = FORMS["unpadded"].shape(batch, max_seq_len=40, predictions=None, pad_id=0)
    real = batch["attention_mask"].astype(bool)
    order = np.argsort(-real.sum(axis=1), kind="stable")  # longest row first
    assert packed["position_ids"].tolist() == batch["position_ids"][order][real[order]].tolist()
    assert packed["token_type_ids"].tolist() == batch["token_type_ids"][order][real[order]].tolist()
    static = FORMS["static"].shape(batch, max_seq_len=16, predictions=4, pad_id=0)
    assert static["position_ids"].shape == (3, 16) and static["position_ids"][:, 10:].sum() == 0
    assert static["position_ids"][:, :10].tolist() == batch["position_ids"].tolist()


def test_micro_batches_cut_from_two_chunks_keep_tlms_positions(vocab):
    from trainer.data.partitions import merge_chunks

    batch = {k: v.numpy() for k, v in _tlm_batch(vocab).items() if k != "special_mask"}
    batch["mlm_positions"], batch["mlm_labels"] = np.array([[1], [2], [3]]), np.array([[7], [-100], [13]])
    wide = {k: (np.pad(v, ((0, 0), (0, 6))) if v.ndim == 2 and k not in ("mlm_positions", "mlm_labels") else v)
            for k, v in batch.items()}  # a chunk padded wider than its rows, as another chunk's longest row makes it
    merged = merge_chunks([wide, batch], 1, 4, pad_id=0, pad_to_multiple_of=1)  # rows 1-2 of the first, row 0 of the second
    assert merged["position_ids"].shape == merged["input_ids"].shape == (3, 10)
    assert merged["position_ids"].tolist() == [*batch["position_ids"][1:].tolist(), batch["position_ids"][0].tolist()]


@pytest.mark.skipif(not os.path.isdir("/usr/share/man/de/man5"), reason="no German man pages here")
def test_finetune_takes_an_xlm_export_with_xlms_own_dropout_names(vocab, tmp_path, capsys):
    pytest.importorskip("sklearn")
    from downstream.finetune.command import finetune_main

    model, config = _model(vocab)
    export = str(tmp_path / "export")
    export_hf(model.state_dict(), config, vocab, export, trained_seq_len=32)
    out = tmp_path / "out"
    assert finetune_main([export, "--task", "man-sections", "--test-language", "de", "--output", str(out), "--seeds", "1",
                          "--epochs", "1", "--lr", "1e-3", "--baseline", "scratch", "--baseline-lr", "1e-3",
                          "--dropout", "0.2"]) == 0
    saved = json.load(open(out / "model" / "config.json"))
    assert saved["architectures"] == ["XLMForSequenceClassification"] and (saved["dropout"], saved["attention_dropout"]) == (0.2, 0.2)
    assert "test [en -> de]" in capsys.readouterr().out


def test_a_resume_keeps_the_runs_languages():
    from trainer.config import resume_refusal

    recorded = json.loads(json.dumps(TrainConfig(data="d", output="o", family="xlm", languages=("de", "en")).to_dict()))
    same = TrainConfig(data="d", output="o", family="xlm", languages=("de", "en")).to_dict()
    assert resume_refusal("RUN", recorded, same) is None  # a JSON list against the config's tuple: the same languages
    other = TrainConfig(data="d", output="o", family="xlm", languages=("en", "de")).to_dict()
    assert "saved with languages=['de', 'en'], this run has ['en', 'de']" in resume_refusal("RUN", recorded, other)
    bert = json.loads(json.dumps(TrainConfig(data="d", output="o").to_dict()))
    bert.pop("languages")  # a run recorded before languages existed resumes as it did
    assert resume_refusal("RUN", bert, TrainConfig(data="d", output="o").to_dict()) is None
