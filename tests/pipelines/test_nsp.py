"""BERT's instance construction at the statistics it promises (pure function, 20,000+ pairs)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from pipelines.documents.nsp import make_pairs, truncate_pair


def synthetic_documents(n_docs: int, seed: int = 0) -> list[list[list[int]]]:
    """Documents whose token ids encode (document, sentence), so a pair's provenance can be read back."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n_docs):
        sentences = []
        for s in range(int(rng.integers(1, 30))):
            length = int(rng.integers(3, 40))
            sentences.append([d * 10_000 + s * 100 + t % 100 for t in range(length)])
        docs.append(sentences)
    return docs


@pytest.fixture(scope="module")
def pairs():
    docs = synthetic_documents(6000)
    out, stats = [], Counter()
    for k, doc in enumerate(docs):
        partners = docs[:k] + docs[k + 1 :]
        made, s = make_pairs(doc, partners, max_seq_len=128, short_seq_prob=0.1, rng=np.random.default_rng([7, k]))
        out += [(k, p) for p in made]
        stats += s
    return out, stats


def test_enough_pairs(pairs):
    assert len(pairs[0]) >= 20_000


def test_random_next_fraction_is_half(pairs):
    made, _ = pairs
    fraction = np.mean([p.is_random_next for _, p in made])
    assert abs(fraction - 0.5) <= 0.01


def test_random_next_never_from_the_same_document(pairs):
    for k, p in pairs[0]:
        docs_in_b = {t // 10_000 for t in p.tokens_b}
        if p.is_random_next:
            assert k not in docs_in_b
        else:
            assert docs_in_b == {k}


def test_no_pair_too_long_and_both_segments_present(pairs):
    for _, p in pairs[0]:
        assert p.num_tokens <= 128 and p.tokens_a and p.tokens_b


def test_short_target_fraction_close_to_flag(pairs):
    made, _ = pairs
    assert abs(np.mean([p.short_target for _, p in made]) - 0.1) <= 0.01


def test_true_next_keeps_sentence_order(pairs):
    for k, p in pairs[0]:
        if not p.is_random_next:
            last_a = max(t % 10_000 // 100 for t in p.tokens_a)
            first_b = min(t % 10_000 // 100 for t in p.tokens_b)
            assert first_b > last_a


def test_without_partners_no_random_label():
    doc = synthetic_documents(1, seed=3)[0] * 3
    made, stats = make_pairs(doc, [], max_seq_len=64, short_seq_prob=0.0, rng=np.random.default_rng(0))
    assert made and not any(p.is_random_next for p in made)
    assert stats["no_random_partner"] > 0


def test_truncate_pair_trims_the_longer_side():
    a, b = list(range(50)), list(range(10))
    truncate_pair(a, b, 40, np.random.default_rng(0))
    assert len(a) == 30 and len(b) == 10


def _truncate_one_token_at_a_time(a: list[int], b: list[int], max_tokens: int, rng: np.random.Generator) -> None:
    """google-research/bert's truncate_seq_pair, with the coins drawn up front as truncate_pair draws them."""
    excess = len(a) + len(b) - max_tokens
    coins = rng.random(max(excess, 0)) < 0.5
    for front in coins:
        longer = a if len(a) > len(b) else b
        if front:
            del longer[0]
        else:
            longer.pop()


def test_truncate_pair_cuts_what_one_token_at_a_time_cuts():
    lengths = np.random.default_rng(1)
    for case in range(3000):
        la, lb, max_tokens = (int(n) for n in lengths.integers([0, 0, 1], [70, 70, 130]))
        a, b = list(range(la)), list(range(100, 100 + lb))
        expected_a, expected_b = a[:], b[:]
        truncate_pair(a, b, max_tokens, np.random.default_rng(case))
        _truncate_one_token_at_a_time(expected_a, expected_b, max_tokens, np.random.default_rng(case))
        assert (a, b) == (expected_a, expected_b), (la, lb, max_tokens)
