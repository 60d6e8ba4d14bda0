"""clozeforge similarity: Spearman per layer and the anisotropy figures against a direct numpy computation over
transformers' own hidden states; the PNG; a word the tokenizer only knows as [UNK] is one line, or a counted drop."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from downstream.contextual.encoder import Encoder
from downstream.contextual.similarity import _draw, anisotropy, similarity_main
from downstream.contextual.standardize import Stats
from tests.downstream.contextual.contextual_assets import docstring_lines, tiny_export

# test inputs for the arithmetic (distinct scores, so the ranks are not tied), not a study: experiments/README.md has
# the figures on SimLex-999 and WordSim-353
PAIRS = [("file", "directory", 7.0), ("list", "tuple", 8.5), ("return", "value", 4.0), ("string", "text", 9.0),
         ("error", "exception", 9.5), ("module", "function", 5.5), ("object", "instance", 8.0), ("line", "number", 2.0),
         ("name", "path", 3.0), ("read", "write", 6.0), ("default", "argument", 4.5), ("true", "false", 1.0)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("similarity")
    lines = docstring_lines(300)
    export = tiny_export(str(root / "model"), lines)
    pairs = root / "pairs.tsv"
    pairs.write_text("word1\tword2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in PAIRS))
    contexts = root / "contexts.txt"
    contexts.write_text("\n".join(lines[:80]) + "\n")
    out = root / "out"
    assert similarity_main([export, "--pairs", str(pairs), "--contexts", str(contexts), "--output", str(out),
                            "--samples", "500"]) == 0
    return {"export": export, "lines": lines[:80], "pairs": pairs, "contexts": contexts, "out": out,
            "report": json.loads((out / "similarity.json").read_text())}


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x)).astype(float)  # no ties in these inputs


def _spearman(a, b) -> float:
    return float(np.corrcoef(_ranks(np.asarray(a)), _ranks(np.asarray(b)))[0, 1])


def _cos(u, v) -> np.ndarray:
    return (u * v).sum(-1) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))


def _alone(model_dir: str, word: str) -> np.ndarray:
    """(layers, hidden): transformers' hidden states of [CLS] word [SEP], the mean over the word's pieces."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        states = model(**tokenizer(word, return_tensors="pt"), output_hidden_states=True).hidden_states
    return torch.stack([s[0, 1:-1].mean(0) for s in states]).numpy()


def test_spearman_per_layer_raw_and_standardised_match_a_direct_computation(setup):
    report, export = setup["report"], setup["export"]
    stats = Stats.load(str(setup["out"] / "standardize.npz"))
    first = np.stack([_alone(export, a) for a, _, _ in PAIRS])  # (pairs, layers, hidden)
    second = np.stack([_alone(export, b) for _, b, _ in PAIRS])
    scores = [s for _, _, s in PAIRS]
    rows = {row["layer"]: row for row in report["layers"]}
    assert sorted(k for k in rows if isinstance(k, int)) == [0, 1, 2] and "mean last:4" in rows
    for layer in (0, 1, 2):
        raw = _spearman(_cos(first[:, layer], second[:, layer]), scores)
        z1, z2 = ((x[:, layer] - stats.mean[layer]) / stats.std[layer] for x in (first, second))
        assert rows[layer]["spearman"] == pytest.approx(raw, abs=1e-5)
        assert rows[layer]["spearman_standardized"] == pytest.approx(_spearman(_cos(z1, z2), scores), abs=1e-5)
        n = len(PAIRS)  # Fieller et al. (1957): var(atanh rho) = 1.06 / (n - 3), carried back by 1 - rho^2
        assert rows[layer]["spearman_se"] == pytest.approx((1 - raw**2) * np.sqrt(1.06 / (n - 3)), abs=1e-5)
    pooled = _spearman(_cos(first[:, 1:].mean(1), second[:, 1:].mean(1)), scores)
    assert rows["mean last:4"]["spearman"] == pytest.approx(pooled, abs=1e-5)
    assert report["pairs"]["read"] == report["pairs"]["kept"] == len(PAIRS)
    assert report["contexts"]["read"] == report["contexts"]["kept"] == 80 and report["contexts"]["dropped"] == {}


def test_statistics_come_from_the_even_texts_and_anisotropy_from_the_odd_ones(setup):
    report, export, lines = setup["report"], setup["export"], setup["lines"]
    encoder = Encoder(export)
    words = encoder.words(lines, (0, 1, 2), per_layer=True)
    fitted = np.concatenate([w.vectors for w in words[0::2]])
    stats = Stats.load(str(setup["out"] / "standardize.npz"))
    assert stats.meta["words"] == len(fitted)
    np.testing.assert_allclose(stats.mean, fitted.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.std, fitted.std(0), rtol=1e-4, atol=1e-5)
    measured = np.concatenate([w.vectors for w in words[1::2]])
    owners = np.concatenate([[i] * len(w.words) for i, w in enumerate(words) if i % 2])
    a, b = _draw(owners, 500, 0)
    assert (owners[a] != owners[b]).all()
    for row in (r for r in report["layers"] if isinstance(r["layer"], int)):
        u, v = measured[a, row["layer"]], measured[b, row["layer"]]
        before, after = row["anisotropy"]["before"], row["anisotropy"]["after"]
        assert before["mean_cosine"] == pytest.approx(_cos(u, v).mean(), abs=1e-5)
        zu, zv = ((x - stats.mean[row["layer"]]) / stats.std[row["layer"]] for x in (u, v))
        assert after["mean_cosine"] == pytest.approx(_cos(zu, zv).mean(), abs=1e-5)
    top = report["layers"][-2]["anisotropy"]["before"]
    assert top["mean_cosine"] > 0.3 and abs(report["layers"][-2]["anisotropy"]["after"]["mean_cosine"]) < 0.1


def test_anisotropy_shares_match_numpy():
    rng = np.random.default_rng(1)
    u, v = rng.normal(size=(200, 16)) + 3 * np.eye(16)[2], rng.normal(size=(200, 16)) + 3 * np.eye(16)[2]
    found = anisotropy(u, v)
    contributions = np.mean(u * v / (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1))[:, None], axis=0)
    assert found["mean_cosine"] == pytest.approx(_cos(u, v).mean(), abs=1e-6)
    assert found["top_dimensions"][0] == 2  # the dimension every vector shares carries the cosine
    for k in (1, 3, 10):
        assert found[f"top{k}_share"] == pytest.approx(np.sort(contributions)[::-1][:k].sum() / contributions.sum(), abs=1e-5)


def test_the_png_and_the_statistics_are_written_and_reused(setup, tmp_path):
    out = setup["out"]
    assert (out / "similarity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / "similarity.png").stat().st_size > 10_000
    assert "| 2 |" in (out / "similarity.md").read_text()
    again = tmp_path / "again"
    assert similarity_main([setup["export"], "--pairs", str(setup["pairs"]), "--contexts", str(setup["contexts"]),
                            "--output", str(again), "--samples", "500", "--stats", str(out / "standardize.npz")]) == 0
    reused = json.loads((again / "similarity.json").read_text())
    for first, second in zip(setup["report"]["layers"][:3], reused["layers"][:3]):
        assert first["spearman_standardized"] == second["spearman_standardized"]
    assert reused["contexts"]["occurrences_measured"] > setup["report"]["contexts"]["occurrences_measured"]  # every text


def test_an_unknown_word_is_one_line_or_a_counted_drop(setup, tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(setup["pairs"].read_text() + "file\t\u2603\t5.0\nfile\tpath\tmany\n")
    common = [setup["export"], "--pairs", str(pairs), "--contexts", str(setup["contexts"]), "--samples", "100"]
    assert similarity_main([*common, "--output", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{pairs}:15: score 'many' is not a number" in err[0]
    assert similarity_main([*common, "--output", str(tmp_path / "b"), "--skip-bad-rows"]) == 0
    report = json.loads((tmp_path / "b" / "similarity.json").read_text())
    assert report["pairs"]["dropped"] == {"bad_score": 1, "unknown_word": 1} and report["pairs"]["kept"] == len(PAIRS)
    assert report["pairs"]["dropped_at"] == {"bad_score": [15], "unknown_word": [14]}
    pairs.write_text(setup["pairs"].read_text() + "file\t\u2603\t5.0\n")
    capsys.readouterr()
    assert similarity_main([*common, "--output", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{pairs}:14: '\u2603' is only [UNK] to the tokenizer" in err[0], err
