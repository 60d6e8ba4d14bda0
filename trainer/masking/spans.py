"""SpanBERT's masking (`--masking span`): spans of whole words, and the span-boundary targets of its SBO head.

In:  the (batch, seq) special mask, the words (`word_start`, `word_len`: trainer/masking/masker.py), each row's
     budget. Out: the (batch, seq) selected tokens with a per-token 80/10/10 decision drawn per span, and, once the
     masker has packed the predictions, SBO's targets (`sbo_left`, `sbo_right`, `sbo_rel_pos`, `sbo_labels`: the
     sbo row of trainer/heads.py).

Span lengths in whole words come from Geometric(p) truncated to 1..max_span_words and renormalised (mean 3.80 words
for p=0.2, the paper's figure), each placed uniformly among the starts where the whole span fits inside one
segment. Spans are added until the budget with a stopping rule that keeps every span whole, so span lengths keep
their distribution and the count meets the budget on average (measured on 2,000 x 128, 3 seeds: mean span
3.76-3.82 words, count +0.9% to +1.8% of the budget, no sequence without a span). A tight max_predictions (20 at
seq 128) cuts the last span at the cap: mean span 3.44 words there. 80/10/10 is decided per span: all its tokens
become [MASK], or random tokens, or stay.

NOTE: a span never contains a special token and never touches another span: on each side it has an
unselected word of its own segment, or the [CLS]/[SEP] that closes the segment. So the SBO boundaries
(`first - 1`, `last + 1`) are always real, unmasked positions. (A segment's first piece starts a word
even when it is a '##' piece, so no word crosses [SEP].) SpanBERT's reference implementation
(facebookresearch/SpanBERT, pretraining/fairseq/data/masking.py) lets spans overlap, merges touching ones
afterwards (so its boundaries are unmasked too), masks each segment separately, and gives no SBO target
to a span that touches a segment edge; here such a span uses [CLS]/[SEP] as its boundary, so every
selected token has an SBO target up to `sbo_max_positions_per_span` (its `--max-pair-targets 15`):
deeper tokens keep their MLM label but get the sbo_labels fill (trainer/heads.py's IGNORE_INDEX).

The only Python loop is the rounds (one span per row per round: 9 rounds for a 64 x 128 batch, 21 at seq 512,
measured), each round vectorized over the rows still short of their budget and over words.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trainer.heads import IGNORE_INDEX
from trainer.masking.rows import next_index, pack_rows

SBO_POSITIONS = ("sbo_left", "sbo_right", "sbo_rel_pos")


def _run_lengths(free: np.ndarray, next_segment: np.ndarray) -> np.ndarray:
    """(rows, words) -> how many consecutive free words start at each word without reaching the next
    segment, which starts at word `next_segment` (from `next_index`)."""
    n = free.shape[1]
    idx = np.arange(n)
    next_blocked = np.minimum.accumulate(np.where(free, n, idx)[:, ::-1], axis=1)[:, ::-1]
    return np.where(free, np.minimum(next_blocked, next_segment) - idx, 0)


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
        flat, cols, packed, n = pack_rows(word_start)
        table = cls(*(np.zeros((special.shape[0], n), dt) for dt in (np.int64, np.int64, bool, bool, np.int64)), n=n)
        table.pos.reshape(-1)[packed] = cols
        table.length.reshape(-1)[packed] = word_len.reshape(-1)[flat]
        table.seg_start.reshape(-1)[packed] = (cols == 0) | special.reshape(-1)[flat - (cols > 0)]
        table.next_segment = next_index(table.seg_start)
        return table

    def free_runs(self, rows: np.ndarray) -> np.ndarray:
        """(rows, words): consecutive free words from each word on, within its segment. A free word is
        real, unmasked and not next to a masked word of its segment, so spans never touch."""
        taken, seg_start = self.masked[rows], self.seg_start[rows]
        blocked = taken | (self.length[rows] == 0)
        blocked[:, 1:] |= taken[:, :-1] & ~seg_start[:, 1:]
        blocked[:, :-1] |= taken[:, 1:] & ~seg_start[:, 1:]
        return _run_lengths(~blocked, self.next_segment[rows])


def select_spans(masker, special: np.ndarray, words, budget: np.ndarray, rng: np.random.Generator):
    """(selected, per-token extras: the SBO positions and the span's 80/10/10 `decision`)."""
    word_start, word_len = words
    batch, seq = special.shape
    table = _WordTable.build(special, word_start, word_len)
    config = masker.config
    cap = np.inf if config.max_predictions is None else config.max_predictions
    tokens_per_word = (~special).sum(1) / np.maximum(word_start.sum(1), 1)  # (batch,)
    count = np.zeros(batch, np.int64)
    rows = np.flatnonzero(budget > 0)  # unfinished rows
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (row, first word, words kept) per round
    offsets = np.arange(config.max_span_words)
    while rows.size:  # one span per unfinished row per round; late rounds see only the rows left
        run = table.free_runs(rows)  # (rows, words)
        longest = run.max(axis=1, initial=0)
        rows, run, longest = rows[longest > 0], run[longest > 0], longest[longest > 0]
        if rows.size == 0:
            break
        # NOTE: a length longer than every free run is clipped to the longest one (rare at 15%;
        # the measured mean span stays within 0.04 words of 3.80 at seq 128).
        length = np.minimum(masker.span_lengths(rng, rows.size), longest)
        keys = rng.random(run.shape)
        keys[run < length[:, None]] = -1.0
        first = keys.argmax(axis=1)  # uniform over the starts where the whole span fits
        span_words = np.minimum(first[:, None] + offsets, table.n - 1)  # (rows, max_span_words)
        inside = offsets < length[:, None]
        cum = np.cumsum(np.where(inside, table.length[rows[:, None], span_words], 0), axis=1)
        # Stop before a span with probability so that the expected final count is the budget,
        # whatever the span's length (cutting the last span at the budget, as the reference does,
        # shortens the mean span to 3.2 words at seq 128): with D tokens of room and X the tokens
        # of a span (capped by max_predictions), go on with probability D / (D + E[(X - D)+]).
        room = budget[rows] - count[rows]
        span_tokens = np.minimum(masker.span_words * tokens_per_word[rows, None], (cap - count[rows])[:, None])
        overshoot = np.maximum(span_tokens - room[:, None], 0.0) @ masker.span_pmf  # (rows,)
        # the first span always goes, so every non-empty sequence gets predictions (BERT's max(1, .));
        # it only raises the count of sequences whose budget is below one span (about +0.4%)
        go = (rng.random(rows.size) * (room + overshoot) < room) | (count[rows] == 0)
        # a span that would pass max_predictions is cut at whole words
        keep = inside & go[:, None] & (count[rows, None] + cum <= cap)
        kept = keep.sum(axis=1)
        count[rows] += np.where(kept > 0, np.take_along_axis(cum, np.maximum(kept - 1, 0)[:, None], 1)[:, 0], 0)
        table.masked[np.repeat(rows, kept), span_words[keep]] = True
        found.append((rows[kept > 0], first[kept > 0], kept[kept > 0]))
        rows = rows[(kept == length) & (count[rows] < budget[rows])]
    empty = (np.zeros(0, np.int64),) * 3
    span_row, first_word, n_kept = (np.concatenate(x) for x in zip(*found)) if found else empty
    start = table.pos[span_row, first_word]
    last = first_word + n_kept - 1
    end = table.pos[span_row, last] + table.length[span_row, last]  # exclusive; a span is contiguous
    return _expand_spans((batch, seq), span_row, start, end, rng)


def _expand_spans(shape, span_row, start, end, rng) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Token-level (batch, seq) arrays from spans [start, end) of rows `span_row`."""
    ntok = end - start
    tok_row = np.repeat(span_row, ntok)
    rel = np.arange(ntok.sum()) - np.repeat(np.cumsum(ntok) - ntok, ntok)
    tok_pos = np.repeat(start, ntok) + rel
    selected = np.zeros(shape, bool)
    selected[tok_row, tok_pos] = True
    span = {name: np.zeros(shape, np.int64) for name in SBO_POSITIONS}
    span["sbo_left"][tok_row, tok_pos] = np.repeat(start - 1, ntok)
    span["sbo_right"][tok_row, tok_pos] = np.repeat(end, ntok)
    span["sbo_rel_pos"][tok_row, tok_pos] = rel
    span["decision"] = np.zeros(shape)
    span["decision"][tok_row, tok_pos] = np.repeat(rng.random(span_row.size), ntok)  # 80/10/10 per span
    return selected, span


def sbo_targets(masker, out: dict[str, np.ndarray], span: dict[str, np.ndarray], flat: np.ndarray,
                packed: np.ndarray) -> None:
    """Add SBO's targets to the masked batch `out`, in the prediction slots of its MLM labels (`flat`: the selected
    tokens, `packed`: their slots)."""
    labels = out["mlm_labels"]  # (batch, P)
    limit = masker.config.sbo_max_positions_per_span
    for name in SBO_POSITIONS:
        out[name] = np.zeros(labels.shape, np.int64)
        out[name].reshape(-1)[packed] = span[name].reshape(-1)[flat]
    out["sbo_labels"] = np.where(out["sbo_rel_pos"] < limit, labels, IGNORE_INDEX)
    np.minimum(out["sbo_rel_pos"], limit - 1, out=out["sbo_rel_pos"])
