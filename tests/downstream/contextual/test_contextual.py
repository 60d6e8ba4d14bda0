"""embed --pooling words and the vectors under senses and similarity: a word's vector is the mean of its pieces'
hidden states over --layers (checked against transformers' hidden states, computed here directly), for WordPiece,
byte-level BPE and SentencePiece-style tokenizers; standardisation statistics are fitted on a reference, saved beside
the output and reused unchanged on new text."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pa = pytest.importorskip("pyarrow")

from downstream.contextual.encoder import Encoder
from downstream.contextual.standardize import STANDARDIZERS, Stats
from downstream.contextual.vectors import STANDARDIZERS as STANDARDIZER_NAMES
from downstream.contextual.vectors import LayersError, WordVectors, layer_indices
from downstream.embed import embed_main
from tests.downstream.contextual.contextual_assets import (
    docstring_lines,
    other_tokenizer_model,
    tiny_export,
)

NEW_TEXT = ["The unbelievable river bank was muddy", "Return a new list with the same elements"]


def test_the_flags_name_every_standardizer():
    """vectors.py lists the --standardize names without numpy; they are standardize.py's rows, in order."""
    assert STANDARDIZER_NAMES == tuple(STANDARDIZERS)


@pytest.fixture(scope="module")
def lines():
    return docstring_lines(200)


@pytest.fixture(scope="module")
def export(tmp_path_factory, lines):
    return tiny_export(str(tmp_path_factory.mktemp("contextual")), lines)


def _direct(model_dir: str, text: str, layers: tuple[int, ...]) -> tuple[list[str], np.ndarray]:
    """The whitespace words of `text` (letters only, so they are the tokenizer's words too) and, per word, the mean
    over its pieces and over `layers` of transformers' hidden states; pieces found by tokenizing each word alone."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir).eval()
    ids = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        states = model(**ids, output_hidden_states=True).hidden_states
    stacked = torch.stack([states[i][0] for i in layers]).mean(0)  # (seq, hidden)
    words, vectors, position = text.split(), [], 1  # after [CLS] / <s>
    for i, word in enumerate(words):
        pieces = len(tokenizer.tokenize(word if i == 0 or not _spaced(tokenizer) else " " + word))
        vectors.append(stacked[position : position + pieces].mean(0).numpy())
        position += pieces
    assert position == len(ids["input_ids"][0]) - 1  # every piece but [SEP] / </s> belongs to a word
    return words, np.stack(vectors)


def _spaced(tokenizer) -> bool:
    """Byte-level BPE and Metaspace mark a word by the space before it: a later word is tokenized with it."""
    return "Ġ" in "".join(tokenizer.tokenize("a b")) or "▁" in "".join(tokenizer.tokenize("a b")[1:])


@pytest.mark.parametrize("layers", ["last:4", "last:1", "0,2", "all"])
def test_a_word_vector_is_the_mean_of_its_pieces_over_the_layers(export, layers):
    encoder = Encoder(export)
    indices, note = layer_indices(layers, encoder.num_layers)
    assert (note is not None) == (layers == "last:4")  # the tiny model has 2 layers: last:4 averages both
    for text in NEW_TEXT:
        words, expected = _direct(export, text, indices)
        found = encoder.words([text], indices)[0]
        assert found.words == words and found.cut == 0
        assert [text[s:e] for s, e in found.spans] == words
        np.testing.assert_allclose(found.vectors, expected, rtol=1e-5, atol=1e-5)
    assert encoder.tokenizer.tokenize("unbelievable") != ["unbelievable"]  # a word of several pieces was checked


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_words_follow_byte_level_bpe_and_sentencepiece_boundaries(tmp_path, lines, kind):
    model_dir = other_tokenizer_model(str(tmp_path), kind, lines)
    encoder = Encoder(model_dir)
    for text in NEW_TEXT:
        words, expected = _direct(model_dir, text, (2, 3))
        found = encoder.words([text], (2, 3), per_layer=True)[0]
        assert found.words == words
        np.testing.assert_allclose(found.vectors.mean(1), expected, rtol=1e-5, atol=1e-5)


def test_per_layer_vectors_and_targets_agree_with_words(export):
    encoder = Encoder(export)
    text = NEW_TEXT[0]
    words = encoder.words([text], (0, 1, 2), per_layer=True)[0]
    bank = words.words.index("bank")
    by_span, misses = encoder.targets([text], [("span", *words.spans[bank])], (0, 1, 2), per_layer=True)
    by_index, _ = encoder.targets([text], [("word", bank, 0)], (0, 1, 2))
    assert misses == [None]
    np.testing.assert_allclose(by_span[0], words.vectors[bank], rtol=1e-6)
    np.testing.assert_allclose(by_index[0], words.vectors[bank].mean(0), rtol=1e-6)
    # a span inside a word takes the whole word; a span over two words, the mean of all their pieces
    inside, _ = encoder.targets([text], [("span", words.spans[bank][0] + 1, words.spans[bank][1] - 1)], (2,))
    np.testing.assert_allclose(inside[0], encoder.words([text], (2,))[0].vectors[bank], rtol=1e-6)
    _, misses = encoder.targets([text, text, text], [("span", 3, 4), ("word", 99, 0), ("span", 5, 500)], (2,))
    assert [m.reason for m in misses] == ["bad_span", "bad_index", "bad_span"]


def test_a_long_text_loses_only_the_words_past_the_positions(export):
    encoder = Encoder(export)
    text = " ".join(["river bank"] * 100)
    found = encoder.words([text], (2,))[0]
    assert 0 < len(found.words) < 200 and found.cut == 200 - len(found.words)
    _, misses = encoder.targets([text], [("word", 199, 0)], (2,))
    assert misses[0].reason == "past_positions"


def test_layers_flag_is_checked_in_one_line():
    assert layer_indices("last:2", 12) == ((11, 12), None)
    assert layer_indices("all", 2) == ((0, 1, 2), None)
    for spec, message in (("last:0", "N must be >= 1"), ("3", "no layer 3"), ("1,1", "named twice"), ("x", "expected")):
        with pytest.raises(LayersError, match=message):
            layer_indices(spec, 2)
    with pytest.raises(ValueError, match="needs --reference"):
        WordVectors(standardize="zscore")


def _arrow(path) -> dict:
    return pa.ipc.open_file(str(path)).read_all().to_pydict()


def test_embed_words_standardises_with_statistics_fitted_on_the_reference_and_reuses_them(export, lines, tmp_path, capsys):
    reference, new = tmp_path / "reference.txt", tmp_path / "new.txt"
    reference.write_text("\n".join(lines[:60]) + "\n\n")  # a blank line: a counted drop
    new.write_text("\n".join(NEW_TEXT) + "\n")
    first, second, raw = tmp_path / "first.arrow", tmp_path / "second.arrow", tmp_path / "raw.arrow"
    assert embed_main([export, "--input", str(new), "--output", str(first), "--pooling", "words", "--standardize", "zscore",
                       "--reference", str(reference), "--layers", "1,2"]) == 0
    assert "61 records read, 60 texts, dropped {'blank_line': 1}; zscore statistics of" in capsys.readouterr().err
    stats_file = tmp_path / "first.standardize.npz"
    assert embed_main([export, "--input", str(new), "--output", str(second), "--pooling", "words", "--standardize", "zscore",
                       "--stats", str(stats_file), "--layers", "1,2"]) == 0
    assert embed_main([export, "--input", str(new), "--output", str(raw), "--pooling", "words", "--layers", "1,2"]) == 0
    # the statistics, computed here: every word of the reference's texts, mean and (population) std per dimension
    encoder = Encoder(export)
    reference_words = np.concatenate([w.vectors for w in encoder.words(lines[:60], (1, 2))])
    mean, std = reference_words.mean(0), reference_words.std(0)
    stats = Stats.load(str(stats_file))
    assert stats.meta["words"] == len(reference_words) and stats.meta["layers"] == [1, 2]
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.std, std, rtol=1e-4, atol=1e-5)
    a, b, r = _arrow(first), _arrow(second), _arrow(raw)
    assert a["words"] == r["words"] == [t.split() for t in NEW_TEXT] and a["word_spans"][0][0] == [0, 3]
    assert a["embedding"] == b["embedding"]  # the same statistics, reused on new text
    for row, raw_row, shape in zip(a["embedding"], r["embedding"], a["shape"]):
        expected = (np.array(raw_row).reshape(shape) - mean) / std
        np.testing.assert_allclose(np.array(row).reshape(shape), expected, rtol=1e-3, atol=1e-3)


def test_embed_words_errors_are_one_line(export, tmp_path, capsys):
    new = tmp_path / "new.txt"
    new.write_text("\n".join(NEW_TEXT) + "\n")
    stats = tmp_path / "s.arrow"
    assert embed_main([export, "--input", str(new), "--output", str(stats), "--pooling", "words", "--standardize", "center",
                       "--reference", str(new)]) == 0
    capsys.readouterr()
    cases = [(["--pooling", "words", "--layers", "7"], "no layer 7"),
             (["--pooling", "cls", "--layers", "1"], "go with --pooling words"),
             (["--pooling", "words", "--standardize", "zscore"], "needs --reference"),
             (["--pooling", "words", "--standardize", "center", "--stats", str(tmp_path / "s.standardize.npz"),
               "--layers", "1"], "fitted with layers [1, 2], this run has [1]"),
             (["--pooling", "words", "--standardize", "zscore", "--stats", str(tmp_path / "s.standardize.npz")],
              "center statistics, and --standardize is zscore"),
             (["--pooling", "words", "--standardize", "zscore", "--stats", str(new)], "not statistics saved by clozeforge")]
    for flags, message in cases:
        out = tmp_path / "x.arrow"
        assert embed_main([export, "--input", str(new), "--output", str(out), *flags]) == 2, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and "Traceback" not in err[0], (flags, err)
        assert not out.exists()
