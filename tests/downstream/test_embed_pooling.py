"""`embed` on a sentence-transformers directory gives that library's own embeddings (within 1e-5) by default: its
pooling (1_Pooling) and normalisation read from the directory, its encoder a bare BertModel; the MiniLM package's
model where installed. An export's card records the pooling of the sentence-transformers source its run continued,
and `embed` on the export uses it."""

from __future__ import annotations

import os

import numpy as np
import pytest

st = pytest.importorskip("sentence_transformers")
st_models = pytest.importorskip("sentence_transformers.models")
transformers = pytest.importorskip("transformers")

from downstream.embed import embed_main  # noqa: E402
from downstream.export_card import model_card  # noqa: E402
from schemas import encoder_layout  # noqa: E402
from tests.helpers import learned_vocab_dir  # noqa: E402
from trainer.model import ModelConfig  # noqa: E402

TEXTS = ["The cat sat on the mat near the door.", "Berlin is the capital of Germany.",
         "A small model embeds the sentence.", "the door"]
TOLERANCE = 1e-5


def st_directory(path, mode: str, normalize: bool) -> str:
    """A random BertModel with a WordPiece tokenizer, saved by sentence-transformers with `mode` pooling."""
    import torch

    vocab = learned_vocab_dir(path / "vocab", TEXTS * 3, vocab_size=200)
    encoder = str(path / "encoder")
    transformers.BertTokenizerFast(vocab_file=os.path.join(vocab, "vocab.txt")).save_pretrained(encoder)
    torch.manual_seed(1)
    config = transformers.BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=48, max_position_embeddings=64)
    transformers.BertModel(config).save_pretrained(encoder)
    word = st_models.Transformer(encoder)
    modules = [word, st_models.Pooling(word.get_word_embedding_dimension(), mode), *([st_models.Normalize()] if normalize else [])]
    out = str(path / "st")
    st.SentenceTransformer(modules=modules, device="cpu").save(out)
    return out


def embedded(model_dir: str, tmp_path, texts=TEXTS) -> np.ndarray:
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts) + "\n")
    assert embed_main([model_dir, "--input", str(source), "--output", str(tmp_path / "out.npy")]) == 0
    return np.load(tmp_path / "out.npy")


@pytest.mark.parametrize("mode, normalize", [("mean", True), ("cls", False), ("max", True)])
def test_embed_gives_sentence_transformers_own_embeddings(tmp_path, mode, normalize, capsys):
    directory = st_directory(tmp_path, mode, normalize)
    theirs = st.SentenceTransformer(directory, device="cpu").encode(TEXTS, convert_to_numpy=True)
    ours = embedded(directory, tmp_path)
    gap = float(np.abs(ours - theirs).max())
    print(f"max |embed - sentence-transformers| ({mode}, normalize {normalize}): {gap:.2e}")
    assert gap <= TOLERANCE, gap
    assert f"{mode} pooling" in capsys.readouterr().err


def test_the_minilm_package_embeds_as_sentence_transformers_does(tmp_path):
    from downstream.public_encoders import installed, missing

    minilm = installed("all-minilm-l6-v2")
    if minilm is None:
        pytest.skip(f"MiniLM is not installed ({missing('all-minilm-l6-v2')})")
    directory = minilm.extract(str(tmp_path / "minilm"))
    long = " ".join(["word"] * 400)  # past its 256-token max_seq_length: cut there, as sentence-transformers cuts
    texts = [*TEXTS, long]
    theirs = st.SentenceTransformer(directory, device="cpu").encode(texts, convert_to_numpy=True)
    gap = float(np.abs(embedded(directory, tmp_path, texts) - theirs).max())
    print(f"max |embed - sentence-transformers| (all-MiniLM-L6-v2): {gap:.2e}")
    assert gap <= TOLERANCE, gap


def test_an_export_card_records_the_pooling_and_reads_it_back():
    config = ModelConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=48)
    pooling = {"mode": "mean", "normalize": True, "max_seq_length": 256}
    card = model_card(config, 1000, {}, {encoder_layout.CARD_KEY: pooling}, 64)
    assert encoder_layout.pooling_of_card(card, "README.md").to_dict() == pooling
    assert encoder_layout.pooling_of_card(model_card(config, 1000, {}, {}, 64), "README.md") is None
