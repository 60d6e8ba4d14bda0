"""MinHash + LSH: determinism, estimate accuracy, and candidate rates against the theoretical S-curve."""

import json
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from pipelines.documents.minhash import (
    MinHashConfig,
    candidate_probability,
    estimated_jaccard,
    exact_hash,
    lsh_band_keys,
    minhash_signature,
)

REPO_ROOT = pathlib.Path(__file__).parents[2]
CONFIG = MinHashConfig()
VOCAB = [f"w{i}x" for i in range(5000)]  # synthetic words: random docs share almost no 5-gram


def random_doc(rng: np.random.Generator, words: int = 300) -> list[str]:
    return [VOCAB[i] for i in rng.integers(0, len(VOCAB), size=words)]


def shingles(words: list[str], n: int = 5) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def true_jaccard(a: list[str], b: list[str]) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


def share_a_band(a: str, b: str) -> bool:
    ka = lsh_band_keys(minhash_signature(a, CONFIG), CONFIG)
    kb = lsh_band_keys(minhash_signature(b, CONFIG), CONFIG)
    return bool(set(ka) & set(kb))


def test_config():
    assert CONFIG.rows == 8 and CONFIG.bands == 14
    assert CONFIG.threshold == pytest.approx((1 / 14) ** (1 / 8))
    with pytest.raises(ValueError, match="multiple"):
        MinHashConfig(num_perm=100, bands=14)
    with pytest.raises(ValueError):
        MinHashConfig(shingle_words=0)


def test_signature_shape_dtype_and_determinism_across_processes():
    text = "The quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill."
    sig = minhash_signature(text, CONFIG)
    assert sig.shape == (112,) and sig.dtype == np.uint64 and int(sig.max()) < 2**32
    # Another interpreter with another str-hash salt must produce the same signature.
    code = (
        "import json; from pipelines.documents.minhash import MinHashConfig, minhash_signature;"
        f"print(json.dumps(minhash_signature({text!r}, MinHashConfig()).tolist()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""}, cwd=str(REPO_ROOT))
    assert json.loads(out.stdout) == sig.tolist()
    assert not np.array_equal(sig, minhash_signature(text, MinHashConfig(seed=2)))


def test_signature_ignores_case_punctuation_and_spacing_but_not_order():
    a = minhash_signature("Hello, World! This is a small test of shingles.", CONFIG)
    b = minhash_signature("hello world   this is a small TEST of shingles", CONFIG)
    c = minhash_signature("world hello this is a small test of shingles", CONFIG)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_short_and_empty_texts():
    assert np.array_equal(minhash_signature("", CONFIG), np.full(112, 2**32 - 1, dtype=np.uint64))
    two = minhash_signature("two words", CONFIG)  # shorter than a shingle: one shingle of both words
    assert np.array_equal(two, minhash_signature("Two, words.", CONFIG))
    assert estimated_jaccard(two, minhash_signature("other words", CONFIG)) < 0.2


def test_band_keys():
    sig = minhash_signature("some text to hash into a signature for banding", CONFIG)
    keys = lsh_band_keys(sig, CONFIG)
    assert len(keys) == 14 and all(len(k) == 2 + 4 * 8 for k in keys)
    assert [int.from_bytes(k[:2], "big") for k in keys] == list(range(14))
    # Two signatures equal in exactly one band share exactly that band's key.
    other = sig.copy()
    other[8:] += np.uint64(1)
    assert [k1 == k2 for k1, k2 in zip(keys, lsh_band_keys(other, CONFIG))] == [True] + [False] * 13
    with pytest.raises(ValueError):
        lsh_band_keys(sig[:50], CONFIG)


def test_estimate_tracks_true_jaccard():
    """|estimate - truth| stays within 4 standard errors sqrt(J(1-J)/112) (< 0.19) for every pair."""
    rng = np.random.default_rng(0)
    errors = []
    for keep in np.linspace(0.1, 0.95, 18):
        a = random_doc(rng)
        cut = int(len(a) * keep)
        b = a[:cut] + random_doc(rng, len(a) - cut)
        j = true_jaccard(a, b)
        est = estimated_jaccard(minhash_signature(" ".join(a), CONFIG), minhash_signature(" ".join(b), CONFIG))
        bound = 4 * math.sqrt(max(j * (1 - j), 0.01) / CONFIG.num_perm)
        assert abs(est - j) <= bound, (keep, j, est)
        errors.append(abs(est - j))
    assert float(np.mean(errors)) < 0.06  # mean abs error of an unbiased 112-sample estimate: ~0.03


def test_near_duplicates_share_a_band_and_unrelated_documents_do_not():
    """Near-duplicates (one or two words changed in 300: J >= 0.93) miss with p = (1 - J^8)^14 < 1e-4 per
    pair, so 40 pairs all collide but with probability < 0.4% under any seed; 40 unrelated documents
    (J ~ 0) share a band with p ~ 14 * 2^-256 per pair."""
    rng = np.random.default_rng(1)
    originals = [random_doc(rng) for _ in range(40)]
    for words in originals:
        edited = list(words)
        for i in rng.integers(0, len(words), size=int(rng.integers(1, 3))):
            edited[i] = "changed"
        assert true_jaccard(words, edited) >= 0.93
        assert share_a_band(" ".join(words), " ".join(edited))
    keys = [set(lsh_band_keys(minhash_signature(" ".join(w), CONFIG), CONFIG)) for w in originals]
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            assert not keys[i] & keys[j]


def test_candidate_rate_follows_the_s_curve():
    """Pairs at J ~ 0.7 (the curve's steep part): the observed candidate rate over 150 pairs is within 4
    binomial standard errors of the mean predicted 1 - (1 - J^8)^14."""
    rng = np.random.default_rng(2)
    hits, predicted = 0, []
    for _ in range(150):
        a = random_doc(rng, 200)
        b = list(a)
        # replace ~3.5% of positions: each breaks up to 5 shingles, giving J around 0.7
        for i in rng.choice(len(a), size=7, replace=False):
            b[i] = f"edit{i}"
        predicted.append(candidate_probability(true_jaccard(a, b), CONFIG))
        hits += share_a_band(" ".join(a), " ".join(b))
    p = float(np.mean(predicted))
    assert 0.2 < p < 0.9  # the test really samples the steep part of the curve
    assert abs(hits / 150 - p) <= 4 * math.sqrt(p * (1 - p) / 150)


def test_exact_hash():
    assert exact_hash("Hello   World\n") == exact_hash("hello world")
    assert exact_hash("hello world") != exact_hash("hello worlds")
    assert re.fullmatch(r"[0-9a-f]{40}", exact_hash("x"))
