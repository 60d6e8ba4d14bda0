"""Tests of trainer.masking: pair collation, and the statistics of every masking strategy.

Statistical checks use one seeded batch of 2,000 sequences of up to 128 tokens (about 250,000 tokens,
36,000 selections); each bound is stated next to it in standard errors (sigma) of the figure tested.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from trainer.data.collate import collate_pairs
from tests.trainer.masking_helpers import Masker, continuation_from_vocab
from trainer.heads import IGNORE_INDEX
from trainer.masking import MaskingConfig

PAD, UNK, CLS, SEP, MASK = range(5)
SPECIALS = [PAD, UNK, CLS, SEP, MASK]
VOCAB = 2000
FIRST_CONTINUATION = 1000  # ids 1000.. are '##' pieces in the synthetic vocabulary
CONTINUATION = np.arange(VOCAB) >= FIRST_CONTINUATION
ROWS, SEQ = 2000, 128


def _pairs(rng: np.random.Generator, rows: int):
    """NSP-like pairs: 90% fill max_seq_len - 3 tokens, 10% are short; ~30% of tokens are '##' pieces."""
    total = np.where(rng.random(rows) < 0.9, SEQ - 3, rng.integers(2, SEQ - 2, rows))
    len_a = rng.integers(1, total)
    pieces = np.where(rng.random(total.sum()) < 0.3, rng.integers(FIRST_CONTINUATION, VOCAB, total.sum()),
                      rng.integers(5, FIRST_CONTINUATION, total.sum()))
    cuts = np.cumsum(total)[:-1]
    docs = np.split(pieces, cuts)
    return [d[:a] for d, a in zip(docs, len_a)], [d[a:] for d, a in zip(docs, len_a)]


def _collate(a, b):
    return collate_pairs(a, b, np.zeros(len(a), bool), cls_id=CLS, sep_id=SEP, pad_id=PAD, max_seq_len=SEQ)


@pytest.fixture(scope="module")
def batch():
    return _collate(*_pairs(np.random.default_rng(1234), ROWS))


def _masker(strategy: str, **overrides) -> Masker:
    return Masker(MaskingConfig(strategy=strategy, **overrides), vocab_size=VOCAB, special_ids=SPECIALS,
                  mask_id=MASK, continuation=CONTINUATION)


def _selected(out: dict[str, np.ndarray], shape) -> np.ndarray:
    rows, slots = np.nonzero(out["mlm_labels"] != IGNORE_INDEX)
    selected = np.zeros(shape, bool)
    selected[rows, out["mlm_positions"][rows, slots]] = True
    return selected


def _word_start(ids: np.ndarray, special: np.ndarray) -> np.ndarray:
    start = ~special & ~CONTINUATION[ids]
    start[:, 1:] |= ~special[:, 1:] & special[:, :-1]
    return start


def _budget(special: np.ndarray, prob: float = 0.15) -> np.ndarray:
    n = (~special).sum(1)
    return np.where(n > 0, np.maximum(1, np.floor(prob * n + 0.5)), 0).astype(int)


def _runs(selected: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximal runs of selected tokens: (row, first position, length) each."""
    padded = np.pad(selected, ((0, 0), (1, 1)))
    rows, starts = np.nonzero(padded[:, 1:-1] & ~padded[:, :-2])
    _, ends = np.nonzero(padded[:, 1:-1] & ~padded[:, 2:])
    return rows, starts, ends - starts + 1


# --- collation -------------------------------------------------------------------------------------------


def test_collate_lays_out_cls_a_sep_b_sep_and_pads_to_the_longest():
    a = [np.array([10, 11], np.uint16), np.array([20], np.uint16)]
    b = [np.array([12], np.uint16), np.array([21, 22, 23], np.uint16)]
    out = collate_pairs(a, b, [False, True], cls_id=CLS, sep_id=SEP, pad_id=PAD, max_seq_len=16)
    np.testing.assert_array_equal(out["input_ids"], [[CLS, 10, 11, SEP, 12, SEP, PAD],
                                                     [CLS, 20, SEP, 21, 22, 23, SEP]])
    np.testing.assert_array_equal(out["token_type_ids"], [[0, 0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1]])
    np.testing.assert_array_equal(out["attention_mask"], [[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(out["special_mask"], out["input_ids"] < 5)
    np.testing.assert_array_equal(out["next_sentence_label"], [0, 1])
    assert out["input_ids"].dtype == np.int64 and out["special_mask"].dtype == bool


def test_collate_pads_to_a_multiple_and_rejects_pairs_longer_than_max_seq_len():
    a, b = [np.arange(5, 10)], [np.arange(5, 8)]
    assert collate_pairs(a, b, [False], cls_id=CLS, sep_id=SEP, pad_id=PAD, max_seq_len=16,
                         pad_to_multiple_of=8)["input_ids"].shape == (1, 16)
    with pytest.raises(ValueError, match="11 tokens.*max_seq_len is 10"):
        collate_pairs(a, b, [False], cls_id=CLS, sep_id=SEP, pad_id=PAD, max_seq_len=10)


# --- configuration ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [("strategy", "whole"), ("mask_prob", 1.5), ("mask_token_frac", -0.1),
                                          ("random_token_frac", 0.3), ("random_token_dist", "zipf"),
                                          ("span_geometric_p", 0.0), ("max_span_words", 0),
                                          ("max_predictions", 0), ("sbo_max_positions_per_span", 0)])
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"{field}|--{field.replace('_', '-')}"):  # the field, or its flag
        MaskingConfig(**{field: value})


def test_config_from_dict_rejects_unknown_keys_listing_the_valid_ones():
    assert MaskingConfig.from_dict({"strategy": "wwm"}).strategy == "wwm"
    with pytest.raises(ValueError, match="mask_rate.*valid keys.*mask_prob"):
        MaskingConfig.from_dict({"mask_rate": 0.2})


def test_masker_requires_the_inputs_its_strategy_needs():
    with pytest.raises(ValueError, match="continuation"):
        Masker(MaskingConfig(strategy="span"), vocab_size=VOCAB, special_ids=SPECIALS, mask_id=MASK)
    with pytest.raises(ValueError, match="unigram_counts"):
        Masker(MaskingConfig(random_token_dist="unigram"), vocab_size=VOCAB, special_ids=SPECIALS, mask_id=MASK)
    with pytest.raises(ValueError, match="no mass"):
        counts = np.zeros(VOCAB)
        counts[SPECIALS] = 100
        Masker(MaskingConfig(random_token_dist="unigram"), vocab_size=VOCAB, special_ids=SPECIALS, mask_id=MASK,
               unigram_counts=counts)


def test_continuation_from_vocab_flags_double_hash_pieces():
    np.testing.assert_array_equal(continuation_from_vocab(["[PAD]", "play", "##ing", "#"]), [0, 0, 1, 0])


# --- properties every strategy must hold -----------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["bert", "wwm", "span"])
def test_outputs_are_consistent_and_specials_are_never_selected(batch, strategy):
    ids, special = batch["input_ids"], batch["special_mask"]
    out = _masker(strategy)(ids, special, np.random.default_rng(0))
    selected = _selected(out, ids.shape)
    assert not (selected & special).any()
    np.testing.assert_array_equal(out["input_ids"][special], ids[special])
    np.testing.assert_array_equal(out["input_ids"][~selected], ids[~selected])  # only selected tokens change
    real = out["mlm_labels"] != IGNORE_INDEX
    counts = real.sum(1)
    assert out["mlm_positions"].shape[1] == counts.max()  # dynamic width: the most selected in the batch
    assert (real == (np.arange(counts.max()) < counts[:, None])).all()  # padding after the real slots
    assert (out["mlm_positions"][~real] == 0).all()
    np.testing.assert_array_equal(out["mlm_labels"][real], np.take_along_axis(ids, out["mlm_positions"], 1)[real])
    positions = np.where(real, out["mlm_positions"], SEQ)
    assert (np.diff(positions, axis=1) > 0)[real[:, 1:]].all()  # ascending
    assert all(v.dtype == np.int64 for v in out.values())


@pytest.mark.parametrize("strategy", ["bert", "wwm", "span"])
def test_same_seed_same_mask_and_a_fresh_state_a_fresh_mask(batch, strategy):
    ids, special = batch["input_ids"][:64], batch["special_mask"][:64]
    masker = _masker(strategy)
    first, again = masker(ids, special, np.random.default_rng(7)), masker(ids, special, np.random.default_rng(7))
    assert first.keys() == again.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    rng = np.random.default_rng(7)
    masker(ids, special, rng)
    fresh = masker(ids, special, rng)  # the same generator, advanced: a new mask
    assert not np.array_equal(_selected(first, ids.shape), _selected(fresh, ids.shape))


@pytest.mark.parametrize("strategy", ["bert", "wwm", "span"])
def test_max_predictions_caps_every_row(batch, strategy):
    out = _masker(strategy, max_predictions=12)(batch["input_ids"], batch["special_mask"], np.random.default_rng(0))
    counts = (out["mlm_labels"] != IGNORE_INDEX).sum(1)
    assert (counts <= 12).all() and counts.max() == 12 and out["mlm_positions"].shape[1] == 12


@pytest.mark.parametrize("strategy", ["bert", "wwm", "span"])
def test_empty_segments_give_no_selection_and_no_error(strategy):
    b = _collate([np.array([], np.int64), np.array([7, 8, 9])], [np.array([], np.int64), np.array([10])])
    for seed in range(20):
        counts = (_masker(strategy)(b["input_ids"], b["special_mask"], np.random.default_rng(seed))["mlm_labels"]
                  != IGNORE_INDEX).sum(1)
        assert counts[0] == 0
        # budget 1 of 4 one-piece words: exact for bert/wwm; span keeps its first span whole
        assert counts[1] == 1 if strategy != "span" else 1 <= counts[1] <= 4


def test_trainer_masking_imports_neither_beam_nor_torch():
    code = "import sys, trainer.masking; assert not {'apache_beam', 'torch'} & set(sys.modules), 'heavy import'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- bert --------------------------------------------------------------------------------------------------


def test_bert_selects_exactly_the_budget_per_sequence(batch):
    special = batch["special_mask"]
    out = _masker("bert")(batch["input_ids"], special, np.random.default_rng(0))
    np.testing.assert_array_equal((out["mlm_labels"] != IGNORE_INDEX).sum(1), _budget(special))


def test_bert_selects_every_position_alike(batch):
    full = (~batch["special_mask"]).sum(1) == SEQ - 3  # rows of 125 tokens: budget 19 each
    ids, special = batch["input_ids"][full], batch["special_mask"][full]
    selected = _selected(_masker("bert")(ids, special, np.random.default_rng(0)), ids.shape)
    freq = selected[~special].reshape(-1, SEQ - 3).mean(0)  # by rank among the row's non-special tokens
    p, n = 19 / 125, full.sum()
    sigma = np.sqrt(p * (1 - p) / n)  # about 0.008 for 1,800 rows
    assert np.abs(freq - p).max() < 5 * sigma  # the worst of 125 positions within 5 sigma


@pytest.mark.parametrize("strategy", ["bert", "wwm"])
def test_80_10_10_is_decided_per_token(batch, strategy):
    ids = batch["input_ids"]
    out = _masker(strategy)(ids, batch["special_mask"], np.random.default_rng(0))
    selected = _selected(out, ids.shape)
    new, old = out["input_ids"][selected], ids[selected]
    n = selected.sum()
    sigma = np.sqrt(0.8 * 0.2 / n)  # about 0.002 for 36,000 selections
    assert abs((new == MASK).mean() - 0.8) < 5 * sigma
    random_changed = 0.1 * (1 - 1 / (VOCAB - len(SPECIALS)))  # a random draw equal to the original is invisible
    assert abs(((new != MASK) & (new != old)).mean() - random_changed) < 5 * np.sqrt(0.09 / n)
    assert abs((new == old).mean() - (1 - 0.8 - random_changed)) < 5 * np.sqrt(0.09 / n)
    assert not np.isin(new[new != MASK], SPECIALS).any()


def test_uniform_random_tokens_cover_the_non_special_ids_evenly():
    masker = Masker(MaskingConfig(), vocab_size=50, special_ids=SPECIALS, mask_id=MASK)
    draws = masker.random_tokens(np.random.default_rng(0), 450_000)
    freq = np.bincount(draws, minlength=50) / draws.size
    assert (freq[SPECIALS] == 0).all()
    p = 1 / 45
    assert np.abs(freq[5:] - p).max() < 5 * np.sqrt(p * (1 - p) / draws.size)


def test_unigram_random_replacements_follow_the_counts():
    # Every token is id 5, which has count 0: a random replacement can never equal the original, so every
    # replacement is visible in the output and the specials' large counts must be ignored.
    vocab = 50
    counts = np.zeros(vocab)
    counts[6:] = 1000.0 / np.arange(1, vocab - 5)  # Zipf over ids 6..49
    counts[SPECIALS] = 1e6
    masker = Masker(MaskingConfig(random_token_dist="unigram"), vocab_size=vocab, special_ids=SPECIALS,
                    mask_id=MASK, unigram_counts=counts)
    b = _collate(*([np.full_like(x, 5) for x in side] for side in _pairs(np.random.default_rng(5), ROWS)))
    assert set(np.unique(b["input_ids"])) == {PAD, CLS, SEP, 5}
    rng = np.random.default_rng(0)
    out = [masker(b["input_ids"], b["special_mask"], rng)["input_ids"] for _ in range(4)]
    replaced = np.concatenate([o[(o != MASK) & (o != b["input_ids"])] for o in out])  # about 14,000
    freq = np.bincount(replaced, minlength=vocab) / replaced.size
    expected = np.where(np.isin(np.arange(vocab), SPECIALS), 0.0, counts) / counts[6:].sum()
    assert (freq[expected == 0] == 0).all()
    sigma = np.sqrt(expected * (1 - expected) / replaced.size)
    assert (np.abs(freq - expected) <= 5 * sigma).all()


# --- whole-word masking -------------------------------------------------------------------------------------


def _assert_whole_words(ids, special, selected):
    start = _word_start(ids, special)
    word_first = np.maximum.accumulate(np.where(start, np.arange(ids.shape[1]), 0), axis=1)
    follows = np.take_along_axis(selected, word_first, axis=1)
    assert (selected[~special] == follows[~special]).all()


def test_wwm_selects_whole_words_to_the_budget(batch):
    ids, special = batch["input_ids"], batch["special_mask"]
    out = _masker("wwm")(ids, special, np.random.default_rng(0))
    selected = _selected(out, ids.shape)
    _assert_whole_words(ids, special, selected)
    counts, budget = selected.sum(1), _budget(special)
    # the word crossing the budget is kept with probability room/len: the budget holds on average
    # (per-row deviation sd about 0.6 tokens, so 5 sigma of the mean over 2,000 rows is 0.07)
    assert abs(counts.mean() - budget.mean()) < 0.07
    assert abs(selected.sum() / (~special).sum() - 0.15) < 0.005
    assert (counts - budget < 10).all()  # at most one word past the budget


def test_wwm_treats_a_continuation_right_after_sep_as_a_word_start():
    # "##" pieces opening segment B (truncation can leave one there) start a word; they are not glued to A
    ids = np.array([[CLS, 10, 1001, SEP, 1002, 1003, 11, SEP]])
    special = np.isin(ids, SPECIALS)
    masker = _masker("wwm", mask_prob=0.4)  # budget 2 of the 5 tokens
    seen = set()
    for seed in range(50):
        selected = _selected(masker(ids, special, np.random.default_rng(seed)), ids.shape)[0]
        assert tuple(selected[[1, 2]]) in {(0, 0), (1, 1)} and tuple(selected[[4, 5]]) in {(0, 0), (1, 1)}
        seen.add((selected[1], selected[4]))
    assert {(True, False), (False, True)} <= seen  # the two words are chosen independently


# --- SpanBERT ----------------------------------------------------------------------------------------------


def test_span_length_sampler_is_the_truncated_geometric():
    masker = _masker("span")
    p, k = 0.2, np.arange(1, 11)
    pmf = p * (1 - p) ** (k - 1) / (p * (1 - p) ** (k - 1)).sum()
    assert abs(masker.mean_span_words - (k * pmf).sum()) < 1e-9 and abs(masker.mean_span_words - 3.8) < 0.01
    draws = masker.span_lengths(np.random.default_rng(0), 200_000)
    freq = np.bincount(draws, minlength=12)[1:11] / draws.size
    assert draws.min() == 1 and draws.max() == 10
    assert (np.abs(freq - pmf) < 5 * np.sqrt(pmf * (1 - pmf) / draws.size)).all()


def test_spans_are_whole_words_with_geometric_lengths_and_the_budget(batch):
    ids, special = batch["input_ids"], batch["special_mask"]
    masker = _masker("span")
    selected = _selected(masker(ids, special, np.random.default_rng(0)), ids.shape)
    _assert_whole_words(ids, special, selected)
    # spans never touch, so the runs of selected tokens are the spans
    rows, starts, lengths = _runs(selected)
    words_before = np.cumsum(_word_start(ids, special), axis=1)
    words = words_before[rows, starts + lengths - 1] - words_before[rows, starts] + 1
    assert words.max() <= 10
    # about 6,800 spans, sd 2.6 words: sigma of the mean is 0.03; a drawn length clipped to the longest
    # free run may lower it a little (measured 3.76-3.82 over 3 seeds): the bound is 5 sigma
    assert abs(words.mean() - masker.mean_span_words) < 0.15
    # whole spans meet the budget on average only (measured 0.1534-0.1546): within 0.01
    assert abs(selected.sum() / (~special).sum() - 0.15) < 0.01
    assert (selected.sum(1) > 0).all()


def test_span_boundaries_are_unmasked_tokens_just_outside_each_span(batch):
    ids, special = batch["input_ids"], batch["special_mask"]
    out = _masker("span")(ids, special, np.random.default_rng(0))
    selected = _selected(out, ids.shape)
    rows, starts, lengths = _runs(selected)
    real = out["mlm_labels"] != IGNORE_INDEX
    slot_rows = np.nonzero(real)[0]
    pos, left, right, rel = (out[k][real] for k in ("mlm_positions", "sbo_left", "sbo_right", "sbo_rel_pos"))
    run_of = np.searchsorted(rows * SEQ + starts, slot_rows * SEQ + pos, side="right") - 1
    np.testing.assert_array_equal(left, starts[run_of] - 1)  # left = first - 1
    np.testing.assert_array_equal(right, starts[run_of] + lengths[run_of])  # right = last + 1
    depth = pos - left - 1
    assert (depth >= 15).any()  # 10-word spans can have more than 15 pieces
    np.testing.assert_array_equal(rel, np.minimum(depth, 14))  # default sbo_max_positions_per_span 15
    np.testing.assert_array_equal(out["sbo_labels"][real], np.where(depth < 15, out["mlm_labels"][real], IGNORE_INDEX))
    # boundaries are real positions, never selected, left unchanged: [CLS]/[SEP] or a free word
    assert (left >= 0).all() and (right < batch["attention_mask"].sum(1)[slot_rows]).all()
    assert not selected[slot_rows, left].any() and not selected[slot_rows, right].any()
    np.testing.assert_array_equal(out["input_ids"][slot_rows, right], ids[slot_rows, right])
    # a span never crosses [SEP]: everything strictly between its boundaries is a selected non-special token
    specials_before, selected_before = np.cumsum(special, axis=1), np.cumsum(selected, axis=1)
    assert ((specials_before[slot_rows, right - 1] - specials_before[slot_rows, left]) == 0).all()
    np.testing.assert_array_equal(selected_before[slot_rows, right - 1] - selected_before[slot_rows, left],
                                  right - left - 1)
    assert (out["sbo_labels"][~real] == IGNORE_INDEX).all()


def test_80_10_10_is_decided_per_span(batch):
    ids, special = batch["input_ids"], batch["special_mask"]
    out = _masker("span")(ids, special, np.random.default_rng(0))
    rows, starts, lengths = _runs(_selected(out, ids.shape))
    is_mask = out["input_ids"] == MASK
    gid = np.repeat(np.arange(rows.size), lengths)
    tok_rows = np.repeat(rows, lengths)
    tok_pos = np.repeat(starts, lengths) + np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    masked_share = np.bincount(gid, weights=is_mask[tok_rows, tok_pos]) / lengths
    assert np.isin(masked_share, [0.0, 1.0]).all()  # all tokens of a span masked, or none
    changed_share = np.bincount(gid, weights=out["input_ids"][tok_rows, tok_pos] != ids[tok_rows, tok_pos]) / lengths
    kept = changed_share == 0  # a random span keeps a token only when the draw hits it (1/1995 per token)
    n = rows.size
    assert abs((masked_share == 1).mean() - 0.8) < 5 * np.sqrt(0.16 / n)  # about 6,800 spans, sigma 0.005
    assert abs(kept.mean() - 0.1) < 5 * np.sqrt(0.09 / n)
    assert abs(((changed_share > 0.5) & (masked_share == 0)).mean() - 0.1) < 5 * np.sqrt(0.09 / n)


def test_sbo_targets_stop_at_the_per_span_cap(batch):
    ids, special = batch["input_ids"][:200], batch["special_mask"][:200]
    out = _masker("span", sbo_max_positions_per_span=2)(ids, special, np.random.default_rng(0))
    real = out["mlm_labels"] != IGNORE_INDEX
    depth = out["mlm_positions"] - out["sbo_left"] - 1  # true position inside the span
    assert (depth[real] >= 2).any()
    assert (out["sbo_rel_pos"] <= 1).all()
    np.testing.assert_array_equal(out["sbo_rel_pos"][real], np.minimum(depth[real], 1))
    expected = np.where(depth[real] < 2, out["mlm_labels"][real], IGNORE_INDEX)
    np.testing.assert_array_equal(out["sbo_labels"][real], expected)
