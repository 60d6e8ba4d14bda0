"""Online masking: a padded batch (trainer/data/collate.py) -> masked batch with MLM (and SpanBERT SBO) targets.

In:  a collated batch `input_ids` (batch, seq) with its `special_mask` (True at [CLS]/[SEP]/[PAD]) and
     an explicit `numpy.random.Generator` for `Masker.__call__`.
Out: numpy arrays ready for `torch.from_numpy`: the masked `input_ids`, the selected positions and their
     original ids (`mlm_positions`, `mlm_labels`, padded with 0 / -100), and for SpanBERT the
     span-boundary targets (`sbo_left`, `sbo_right`, `sbo_rel_pos`, `sbo_labels`).

Strategies (`MaskingConfig.strategy`); the budget of a sequence with n non-special tokens is
`max(1, floor(mask_prob * n + 0.5))` tokens, capped at `max_predictions`:
  bert  exactly the budget per sequence, uniformly without replacement, as BERT's
        create_pretraining_data.py does (not Bernoulli per token: the count does not vary).
  wwm   whole words (a token plus its following '##' pieces) in random order until the budget; the word
        that would cross the budget is kept with probability room/len(word), so the expected count is the
        budget. 80/10/10 is decided per token, as in BERT's whole-word-masking release.
  span  SpanBERT: span lengths in whole words from Geometric(p) truncated to 1..max_span_words and
        renormalised (mean 3.80 words for p=0.2, the paper's figure), each placed uniformly among the
        starts where the whole span fits inside one segment. Spans are added until the budget with a
        stopping rule that keeps every span whole, so span lengths keep their distribution and the
        count meets the budget on average (measured on 2,000 x 128, 3 seeds: mean span 3.76-3.82
        words, count +0.9% to +1.8% of the budget, no sequence without a span). A tight
        max_predictions (20 at seq 128) cuts the last span at the cap: mean span 3.44 words there.
        80/10/10 is decided per span: all its tokens become [MASK], or random tokens, or stay.

NOTE: a span never contains a special token and never touches another span: on each side it has an
unselected word of its own segment, or the [CLS]/[SEP] that closes the segment. So the SBO boundaries
(`first - 1`, `last + 1`) are always real, unmasked positions. (A segment's first piece starts a word
even when it is a '##' piece, so no word crosses [SEP].) SpanBERT's reference implementation
(facebookresearch/SpanBERT, pretraining/fairseq/data/masking.py) lets spans overlap, merges touching ones
afterwards (so its boundaries are unmasked too), masks each segment separately, and gives no SBO target
to a span that touches a segment edge; here such a span uses [CLS]/[SEP] as its boundary, so every
selected token has an SBO target up to `sbo_max_positions_per_span` (its `--max-pair-targets 15`):
deeper tokens keep their MLM label but get sbo_labels = -100.

The work is numpy over the whole batch. The only Python loop is SpanBERT's rounds (one span per row per
round: 9 rounds for a 64 x 128 batch, 21 at seq 512, measured), each round vectorized over the rows still
short of their budget and over words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from schemas.config import Config, check_choices, flag
from schemas.tokenizer_formats import TOKENIZER_FORMATS

STRATEGIES = ("bert", "wwm", "span")
RANDOM_TOKEN_DISTS = ("uniform", "unigram")
IGNORE_INDEX = -100
"""Label of a padding prediction slot (torch's cross-entropy default ignore_index)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaskingConfig(Config):
    """Masking (a fresh mask every time a pair is drawn)"""

    strategy: str = flag("bert", name="--masking", choices=STRATEGIES)
    """"bert" (tokens), "wwm" (whole words) or "span" (SpanBERT spans of whole words, with SBO targets)."""
    mask_prob: float = 0.15
    """Fraction of the non-special tokens of each sequence selected for prediction."""
    mask_token_frac: float = 0.8
    """Of the selected tokens (spans, for "span"): the share replaced by [MASK]."""
    random_token_frac: float = 0.1
    """Of the selected: the share replaced by a random token; the rest is left unchanged."""
    random_token_dist: str = flag("uniform", choices=RANDOM_TOKEN_DISTS)
    """"uniform" over the non-special ids, or "unigram" in proportion to the corpus counts of the ids."""
    span_geometric_p: float = 0.2
    """p of SpanBERT's geometric span-length distribution (in whole words)."""
    max_span_words: int = 10
    """Longest span in whole words; the geometric distribution is truncated here and renormalised."""
    max_predictions: int | None = None
    """Cap on selected tokens per sequence (BERT's max_predictions_per_seq: 20 at seq 128, 80 at 512).
    None: no cap besides the budget rule; the output width P is the most selected in the batch either way."""
    sbo_max_positions_per_span: int = 15
    """Span tokens deeper than this get no SBO target (SpanBERT's --max-pair-targets 15); `sbo_rel_pos`
    is always below it, so the model's relative-position table needs at least this many rows."""

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("mask_prob", "mask_token_frac", "random_token_frac"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.mask_token_frac + self.random_token_frac > 1.0 + 1e-9:
            raise ValueError(
                f"mask_token_frac + random_token_frac must be <= 1, got "
                f"{self.mask_token_frac} + {self.random_token_frac}"
            )
        if not 0.0 < self.span_geometric_p <= 1.0:
            raise ValueError(f"span_geometric_p must be in (0, 1], got {self.span_geometric_p}")
        if self.max_span_words < 1:
            raise ValueError(f"max_span_words must be >= 1, got {self.max_span_words}")
        if self.max_predictions is not None and self.max_predictions < 1:
            raise ValueError(f"max_predictions must be >= 1 or None, got {self.max_predictions}")
        if self.sbo_max_positions_per_span < 1:
            raise ValueError(f"sbo_max_positions_per_span must be >= 1, got {self.sbo_max_positions_per_span}")


def continuation_from_vocab(tokens: Sequence[str]) -> np.ndarray:
    """(vocab_size,) bool: True for WordPiece continuation pieces ('##...'), given the tokens in id order."""
    return np.fromiter((t.startswith("##") for t in tokens), dtype=bool, count=len(tokens))


def _next_index(flags: np.ndarray) -> np.ndarray:
    """(rows, n) -> for each position t the smallest j > t with flags[j] (n when none)."""
    n = flags.shape[1]
    at_or_after = np.where(flags, np.arange(n), n)
    at_or_after = np.minimum.accumulate(at_or_after[:, ::-1], axis=1)[:, ::-1]
    out = np.full_like(at_or_after, n)
    out[:, :-1] = at_or_after[:, 1:]
    return out


def _run_lengths(free: np.ndarray, next_segment: np.ndarray) -> np.ndarray:
    """(rows, words) -> how many consecutive free words start at each word without reaching the next
    segment, which starts at word `next_segment` (from `_next_index`)."""
    n = free.shape[1]
    idx = np.arange(n)
    next_blocked = np.minimum.accumulate(np.where(free, n, idx)[:, ::-1], axis=1)[:, ::-1]
    return np.where(free, np.minimum(next_blocked, next_segment) - idx, 0)


def _pack_rows(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The True entries of (rows, n) `flags` packed left into a (rows, width) table, width the widest row.

    Returns `flat` (their flat indices into `flags`, row-major), `cols` (their columns), `packed` (their
    flat indices into the packed table) and `width`. Flat indices rather than (row, column) pairs: numpy
    scatters and gathers through one index array two to three times as fast as through two (measured: 3.0
    against 7.2 µs for 1,200 entries of a 64 x 128 array)."""
    n = flags.shape[1]
    flat = np.flatnonzero(flags)
    counts = np.count_nonzero(flags, axis=1)
    width = int(counts.max(initial=0))
    rows = flat // n
    rank = np.arange(flat.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return flat, flat - rows * n, rows * width + rank, width


@dataclasses.dataclass
class _WordTable:
    """The whole words of a batch, packed left: word w of row r starts at token pos[r, w]."""

    pos: np.ndarray  # (batch, words) token position of the word's first piece
    length: np.ndarray  # (batch, words) pieces in the word; 0 past the row's last word
    seg_start: np.ndarray  # (batch, words) first word of its segment
    masked: np.ndarray  # (batch, words) already inside a span
    next_segment: np.ndarray  # (batch, words) first word of the next segment (n when none)
    n: int

    @classmethod
    def build(cls, special: np.ndarray, word_start: np.ndarray, word_len: np.ndarray) -> _WordTable:
        flat, cols, packed, n = _pack_rows(word_start)
        table = cls(*(np.zeros((special.shape[0], n), dt) for dt in (np.int64, np.int64, bool, bool, np.int64)), n=n)
        table.pos.reshape(-1)[packed] = cols
        table.length.reshape(-1)[packed] = word_len.reshape(-1)[flat]
        table.seg_start.reshape(-1)[packed] = (cols == 0) | special.reshape(-1)[flat - (cols > 0)]
        table.next_segment = _next_index(table.seg_start)
        return table

    def free_runs(self, rows: np.ndarray) -> np.ndarray:
        """(rows, words): consecutive free words from each word on, within its segment. A free word is
        real, unmasked and not next to a masked word of its segment, so spans never touch."""
        taken, seg_start = self.masked[rows], self.seg_start[rows]
        blocked = taken | (self.length[rows] == 0)
        blocked[:, 1:] |= taken[:, :-1] & ~seg_start[:, 1:]
        blocked[:, :-1] |= taken[:, 1:] & ~seg_start[:, 1:]
        return _run_lengths(~blocked, self.next_segment[rows])


class Masker:
    """Masks collated batches; one instance per loader worker, the Generator passed per call."""

    @classmethod
    def for_vocabulary(cls, config: MaskingConfig, tokens: Sequence[str], mask_id: int,
                       unigram_counts: Sequence[int] | None = None) -> Masker:
        """The Masker for a vocabulary's tokens (id order): every bracketed token ([PAD], [unused3], ...) is special."""
        specials = [i for i, t in enumerate(tokens) if t.startswith("[") and t.endswith("]")]
        return cls(config, vocab_size=len(tokens), special_ids=specials, mask_id=mask_id,
                   continuation=continuation_from_vocab(tokens), unigram_counts=unigram_counts)

    @classmethod
    def for_manifest(cls, config: MaskingConfig, manifest, unigram_counts: Sequence[int] | None = None) -> Masker:
        """The Masker for a prep run's vocabulary of any tokenizer kind (schemas/tokenizer_formats.py): its special and
        reserved tokens are never selected nor drawn, its word marks ('##' continues a word, 'Ġ' and '▁' start one)
        give whole-word and span masking their words."""
        tokens = manifest.read_vocab_tokens()
        kind = TOKENIZER_FORMATS[manifest.tokenizer]
        continuation = manifest.read_word_boundary().continuation_flags(tokens, set(kind.special_tokens))
        return cls(config, vocab_size=len(tokens), special_ids=kind.never_produced(tokens),
                   mask_id=manifest.special_id("mask_token"), continuation=np.asarray(continuation, dtype=bool),
                   unigram_counts=unigram_counts)

    def __init__(
        self,
        config: MaskingConfig,
        *,
        vocab_size: int,
        special_ids: Sequence[int],
        mask_id: int,
        continuation: np.ndarray | None = None,
        unigram_counts: np.ndarray | None = None,
    ) -> None:
        """`special_ids` ([PAD], [UNK], [CLS], [SEP], [MASK], ...) and `mask_id` are never drawn as random
        tokens. `continuation`: (vocab_size,) bool, True for '##' pieces (needed by "wwm" and "span").
        `unigram_counts`: (vocab_size,) corpus counts (needed by random_token_dist "unigram")."""
        self.config = config
        self.mask_id = int(mask_id)
        if not 0 <= self.mask_id < vocab_size:
            raise ValueError(f"mask_id {mask_id} outside the vocabulary of {vocab_size}")
        excluded = np.zeros(vocab_size, dtype=bool)
        excluded[np.asarray(list(special_ids), dtype=np.int64)] = True
        excluded[self.mask_id] = True
        if config.strategy in ("wwm", "span"):
            if continuation is None:
                raise ValueError(f"strategy {config.strategy!r} needs `continuation` (True for '##' vocabulary pieces)")
            continuation = np.asarray(continuation, dtype=bool)
            if continuation.shape != (vocab_size,):
                raise ValueError(f"continuation must have shape ({vocab_size},), got {continuation.shape}")
        self._continuation = continuation
        if config.random_token_dist == "unigram":
            if unigram_counts is None:
                raise ValueError('random_token_dist "unigram" needs `unigram_counts` (corpus count per vocabulary id)')
            counts = np.asarray(unigram_counts, dtype=np.float64)
            if counts.shape != (vocab_size,) or (counts < 0).any():
                raise ValueError(f"unigram_counts must be ({vocab_size},) non-negative counts, got {counts.shape}")
            self._unigram_cdf = np.cumsum(np.where(excluded, 0.0, counts))
            if self._unigram_cdf[-1] <= 0:
                raise ValueError("unigram_counts give no mass to any non-special token")
        else:
            self._candidates = np.flatnonzero(~excluded)
            if self._candidates.size == 0:
                raise ValueError("every vocabulary id is special: no random replacement token exists")
        p, k = config.span_geometric_p, np.arange(config.max_span_words)
        weights = p * (1.0 - p) ** k  # P(length = k + 1) before truncation
        self._span_pmf = weights / weights.sum()
        self._span_words = k + 1.0
        self._span_cdf = np.cumsum(self._span_pmf)
        self.mean_span_words = float(((k + 1) * weights).sum() / weights.sum())

    def random_tokens(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """`size` replacement ids from the configured distribution (never a special id)."""
        if self.config.random_token_dist == "unigram":
            draws = rng.random(size) * self._unigram_cdf[-1]
            # side="right" skips zero-count ids (their cdf step is empty)
            return np.minimum(np.searchsorted(self._unigram_cdf, draws, side="right"), self._unigram_cdf.size - 1)
        return self._candidates[rng.integers(0, self._candidates.size, size=size)]

    def span_lengths(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """`size` span lengths in whole words from the truncated geometric distribution."""
        return np.minimum(np.searchsorted(self._span_cdf, rng.random(size), side="right"), self._span_cdf.size - 1) + 1

    def __call__(
        self, input_ids: np.ndarray, special_mask: np.ndarray, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """Mask a (batch, seq) batch; see the module docstring for the keys returned."""
        if input_ids.ndim != 2 or special_mask.shape != input_ids.shape:
            raise ValueError(f"input_ids {input_ids.shape} and special_mask {special_mask.shape}: not equal 2-D shapes")
        special = special_mask.astype(bool, copy=False)
        n_tokens = (~special).sum(axis=1)
        budget = np.maximum(1, np.floor(self.config.mask_prob * n_tokens + 0.5)).astype(np.int64)
        budget[n_tokens == 0] = 0
        cap = self.config.max_predictions
        if cap is not None:
            budget = np.minimum(budget, cap)
        span: dict[str, np.ndarray] = {}
        if self.config.strategy == "bert":
            selected = self._select_tokens(special, budget, rng)
        else:
            word_start = ~special & ~self._continuation[input_ids]
            word_start[:, 1:] |= ~special[:, 1:] & special[:, :-1]  # a segment's first token starts a word
            word_start[:, 0] = ~special[:, 0]
            word_len = np.where(word_start, _next_index(word_start | special) - np.arange(special.shape[1]), 0)
            if self.config.strategy == "wwm":
                selected = self._select_words(special, word_start, word_len, budget, rng)
            else:
                selected, span = self._select_spans(special, word_start, word_len, budget, rng)
        return self._finish(input_ids, selected, span, rng)

    def _select_tokens(self, special: np.ndarray, budget: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        keys = rng.random(special.shape)
        keys[special] = 2.0  # specials sort last and are never within the budget
        ranked = np.sort(keys, axis=1)
        threshold = np.take_along_axis(ranked, np.maximum(budget - 1, 0)[:, None], axis=1)  # (batch, 1)
        return (keys <= threshold) & (budget > 0)[:, None]

    def _select_words(self, special, word_start, word_len, budget, rng) -> np.ndarray:
        keys = rng.random(special.shape)
        keys[~word_start] = 2.0
        order = np.argsort(keys, axis=1)  # word starts first, in random order
        lens = np.take_along_axis(word_len, order, axis=1)
        cum = np.cumsum(lens, axis=1)
        before = cum - lens
        take = (lens > 0) & (cum <= budget[:, None])
        crossing = (lens > 0) & (before < budget[:, None]) & (cum > budget[:, None])
        if self.config.max_predictions is not None:
            crossing &= cum <= self.config.max_predictions
        take |= crossing & (rng.random(special.shape) * lens < budget[:, None] - before)
        chosen = np.zeros_like(take)
        np.put_along_axis(chosen, order, take, axis=1)
        # each token follows the start of its word (the last word start at or before it)
        word_of = np.maximum.accumulate(np.where(word_start, np.arange(special.shape[1]), 0), axis=1)
        return np.take_along_axis(chosen, word_of, axis=1) & ~special

    def _select_spans(self, special, word_start, word_len, budget, rng):
        batch, seq = special.shape
        words = _WordTable.build(special, word_start, word_len)
        cap = np.inf if self.config.max_predictions is None else self.config.max_predictions
        tokens_per_word = (~special).sum(1) / np.maximum(word_start.sum(1), 1)  # (batch,)
        count = np.zeros(batch, np.int64)
        rows = np.flatnonzero(budget > 0)  # unfinished rows
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (row, first word, words kept) per round
        offsets = np.arange(self.config.max_span_words)
        while rows.size:  # one span per unfinished row per round; late rounds see only the rows left
            run = words.free_runs(rows)  # (rows, words)
            longest = run.max(axis=1, initial=0)
            rows, run, longest = rows[longest > 0], run[longest > 0], longest[longest > 0]
            if rows.size == 0:
                break
            # NOTE: a length longer than every free run is clipped to the longest one (rare at 15%;
            # the measured mean span stays within 0.04 words of 3.80 at seq 128).
            length = np.minimum(self.span_lengths(rng, rows.size), longest)
            keys = rng.random(run.shape)
            keys[run < length[:, None]] = -1.0
            first = keys.argmax(axis=1)  # uniform over the starts where the whole span fits
            span_words = np.minimum(first[:, None] + offsets, words.n - 1)  # (rows, max_span_words)
            inside = offsets < length[:, None]
            cum = np.cumsum(np.where(inside, words.length[rows[:, None], span_words], 0), axis=1)
            # Stop before a span with probability so that the expected final count is the budget,
            # whatever the span's length (cutting the last span at the budget, as the reference does,
            # shortens the mean span to 3.2 words at seq 128): with D tokens of room and X the tokens
            # of a span (capped by max_predictions), go on with probability D / (D + E[(X - D)+]).
            room = budget[rows] - count[rows]
            span_tokens = np.minimum(self._span_words * tokens_per_word[rows, None], (cap - count[rows])[:, None])
            overshoot = np.maximum(span_tokens - room[:, None], 0.0) @ self._span_pmf  # (rows,)
            # the first span always goes, so every non-empty sequence gets predictions (BERT's max(1, .));
            # it only raises the count of sequences whose budget is below one span (about +0.4%)
            go = (rng.random(rows.size) * (room + overshoot) < room) | (count[rows] == 0)
            # a span that would pass max_predictions is cut at whole words
            keep = inside & go[:, None] & (count[rows, None] + cum <= cap)
            kept = keep.sum(axis=1)
            count[rows] += np.where(kept > 0, np.take_along_axis(cum, np.maximum(kept - 1, 0)[:, None], 1)[:, 0], 0)
            words.masked[np.repeat(rows, kept), span_words[keep]] = True
            found.append((rows[kept > 0], first[kept > 0], kept[kept > 0]))
            rows = rows[(kept == length) & (count[rows] < budget[rows])]
        empty = (np.zeros(0, np.int64),) * 3
        span_row, first_word, n_kept = (np.concatenate(x) for x in zip(*found)) if found else empty
        start = words.pos[span_row, first_word]
        last = first_word + n_kept - 1
        end = words.pos[span_row, last] + words.length[span_row, last]  # exclusive; a span is contiguous
        return self._expand_spans((batch, seq), span_row, start, end, rng)

    @staticmethod
    def _expand_spans(shape, span_row, start, end, rng) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Token-level (batch, seq) arrays from spans [start, end) of rows `span_row`."""
        ntok = end - start
        tok_row = np.repeat(span_row, ntok)
        rel = np.arange(ntok.sum()) - np.repeat(np.cumsum(ntok) - ntok, ntok)
        tok_pos = np.repeat(start, ntok) + rel
        selected = np.zeros(shape, bool)
        selected[tok_row, tok_pos] = True
        span = {name: np.zeros(shape, np.int64) for name in ("sbo_left", "sbo_right", "sbo_rel_pos")}
        span["sbo_left"][tok_row, tok_pos] = np.repeat(start - 1, ntok)
        span["sbo_right"][tok_row, tok_pos] = np.repeat(end, ntok)
        span["sbo_rel_pos"][tok_row, tok_pos] = rel
        span["decision"] = np.zeros(shape)
        span["decision"][tok_row, tok_pos] = np.repeat(rng.random(span_row.size), ntok)  # 80/10/10 per span
        return selected, span

    def _finish(self, input_ids, selected, span, rng) -> dict[str, np.ndarray]:
        flat, cols, packed, width = _pack_rows(selected)
        batch = input_ids.shape[0]
        positions = np.zeros((batch, width), np.int64)
        labels = np.full((batch, width), IGNORE_INDEX, np.int64)
        positions.reshape(-1)[packed] = cols
        labels.reshape(-1)[packed] = input_ids.reshape(-1)[flat]
        decision = span["decision"].reshape(-1)[flat] if span else rng.random(flat.size)
        mask_frac, random_frac = self.config.mask_token_frac, self.config.random_token_frac
        masked = input_ids.astype(np.int64, copy=True)
        masked.reshape(-1)[flat[decision < mask_frac]] = self.mask_id
        random_at = flat[(decision >= mask_frac) & (decision < mask_frac + random_frac)]
        masked.reshape(-1)[random_at] = self.random_tokens(rng, random_at.size)
        out = {"input_ids": masked, "mlm_positions": positions, "mlm_labels": labels}
        if span:
            limit = self.config.sbo_max_positions_per_span
            for name in ("sbo_left", "sbo_right", "sbo_rel_pos"):
                out[name] = np.zeros((batch, width), np.int64)
                out[name].reshape(-1)[packed] = span[name].reshape(-1)[flat]
            out["sbo_labels"] = np.where(out["sbo_rel_pos"] < limit, labels, IGNORE_INDEX)
            np.minimum(out["sbo_rel_pos"], limit - 1, out=out["sbo_rel_pos"])
        return out
