"""The lattices of Unigram learning, for a batch of words at once, in numpy: every way to cut each word into pieces.

In:  a batch of words (`Batch`: one flat array of code points, a -1 after each word) and the current pieces
     (`PieceTable`: looked up by a 64-bit polynomial hash per length, each match checked character by character).
Out: the edges of the batch's lattices (start position, length, piece id; -1 for a character no piece covers, as
     SentencePiece's lattice inserts an unknown node there), then per batch:
       `expected_counts`: each piece's expected count, the marginal of each edge (forward-backward in log space)
                          weighted by its word's corpus count, and the batch's log likelihood;
       `viterbi`:         the best cut of each word, as (word, piece) pairs.

A node is a position in the flat text: a word's nodes run from its first character to the -1 after it. The forward
pass fills nodes in layers of equal distance from the word's start, so one numpy call per layer serves every word of
the batch (a batch holds words of similar lengths: the learner sorts them by length); a layer's edges that end on the
same node are one segment of a log-sum-exp (a max for Viterbi, ties to the longest piece).
"""

from __future__ import annotations

import numpy as np

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd, 64-bit: the polynomial hash's base (wraps modulo 2**64)
_MIX = np.uint64(0xD6E8FEB86659FD93)  # odd: spreads a hash's low bits into the top bits that pick a slot
_EMPTY = -2


def _hash_step(h: np.ndarray, codes: np.ndarray) -> np.ndarray:
    return h * _MULTIPLIER + (codes.astype(np.uint64) + np.uint64(1))


class _HashMap:
    """uint64 keys → int64 values, open addressing with linear probing, every operation on whole arrays (a lookup
    costs a probe or two per key, where a binary search into the sorted keys cost ~20 scattered reads)."""

    def __init__(self, keys: np.ndarray, values: np.ndarray):
        bits = max(4, int(len(keys) * 2).bit_length())
        self.mask, self.shift = (1 << bits) - 1, np.uint64(64 - bits)
        self.keys = np.zeros(1 << bits, dtype=np.uint64)
        self.values = np.full(1 << bits, _EMPTY, dtype=np.int64)
        slot = self._slot(keys)
        pending = np.arange(len(keys))
        while len(pending):
            free = self.values[slot[pending]] == _EMPTY
            taken, first = np.unique(slot[pending[free]], return_index=True)  # one key per free slot this round
            placed = pending[free][first]
            self.keys[taken], self.values[taken] = keys[placed], values[placed]
            done = np.zeros(len(keys), dtype=bool)
            done[placed] = True
            pending = pending[~done[pending]]
            slot[pending] = (slot[pending] + 1) & self.mask

    def _slot(self, keys: np.ndarray) -> np.ndarray:
        return ((keys * _MIX) >> self.shift).astype(np.int64)

    def get(self, keys: np.ndarray) -> np.ndarray:
        """The value of each key, -2 where there is none."""
        out = np.full(len(keys), _EMPTY, dtype=np.int64)
        slot = self._slot(keys)
        todo = np.arange(len(keys))
        while len(todo):
            at = slot[todo]
            values = self.values[at]
            hit = (values != _EMPTY) & (self.keys[at] == keys[todo])
            out[todo[hit]] = values[hit]
            todo = todo[~hit & (values != _EMPTY)]
            slot[todo] = (slot[todo] + 1) & self.mask
        return out


class PieceTable:
    """The pieces by length, and every prefix of a piece: a text position whose first k characters start no piece is
    not looked up at k + 1 (most positions stop after a few characters)."""

    def __init__(self, pieces: list[str], max_length: int):
        groups: dict[int, list[int]] = {}
        for i, piece in enumerate(pieces):
            if len(piece) <= max_length:
                groups.setdefault(len(piece), []).append(i)
        prefixes: dict[int, list[np.ndarray]] = {}
        full: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.pieces: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for length, ids in sorted(groups.items()):
            text = "".join(pieces[i] for i in ids)
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.int32).astype(np.int64).reshape(len(ids), length)
            h = np.zeros(len(ids), dtype=np.uint64)
            for k in range(length):
                h = _hash_step(h, codes[:, k])
                prefixes.setdefault(k + 1, []).append(h)
            if len(np.unique(h)) < len(h):  # two pieces of one length with one hash: ~1e-8 at a million pieces
                raise RuntimeError("two pieces share a 64-bit hash; change _MULTIPLIER")
            full[length] = (h, np.arange(len(ids)))
            self.pieces[length] = (np.asarray(ids, dtype=np.int64), codes)
        # per length: every prefix hash → the row of the piece it is whole (-1: only a prefix)
        self.lookup: dict[int, _HashMap] = {}
        for k, hs in prefixes.items():
            keys = np.unique(np.concatenate(hs))
            rows = np.full(len(keys), -1, dtype=np.int64)
            if k in full:
                rows[np.searchsorted(keys, full[k][0])] = full[k][1]
            self.lookup[k] = _HashMap(keys, rows)
        self.max_length = max(self.pieces, default=0)


class Batch:
    """Words in one flat array: codes (a -1 after each word), and per position its word's start and end."""

    def __init__(self, words: list[str], counts: np.ndarray):
        lengths = np.fromiter((len(w) + 1 for w in words), dtype=np.int64, count=len(words))
        self.counts = np.asarray(counts, dtype=np.float64)
        flat = "".join(w + "\0" for w in words)
        self.codes = np.frombuffer(flat.encode("utf-32-le"), dtype=np.int32).astype(np.int64)
        ends = np.cumsum(lengths) - 1
        self.codes[ends] = -1
        self.starts, self.ends = ends - lengths + 1, ends
        self.word = np.repeat(np.arange(len(words), dtype=np.int64), lengths)
        self.left = self.ends[self.word] - np.arange(len(self.codes))  # characters from a position to its word's end

    def edges(self, table: PieceTable, max_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, length, piece id) of every piece occurrence, plus a length-1 edge of id -1 where no piece of one
        character starts; sorted by start, then length."""
        pos = np.flatnonzero(self.codes >= 0)
        h = np.zeros(len(pos), dtype=np.uint64)
        starts, lengths, ids = [], [], []
        covered = np.zeros(len(self.codes), dtype=bool)
        for length in range(1, min(max_length, table.max_length) + 1):
            keep = self.left[pos] >= length
            pos, h = pos[keep], h[keep]
            h = _hash_step(h, self.codes[pos + length - 1])
            lookup = table.lookup.get(length)
            if lookup is None or not len(pos):
                break
            row = lookup.get(h)
            alive = row != _EMPTY  # the first `length` characters start some piece (or share its hash)
            pos, h, row = pos[alive], h[alive], row[alive]
            match = np.flatnonzero(row >= 0)
            if not len(match):
                continue
            piece_ids, piece_codes = table.pieces[length]
            at, j = pos[match], row[match]
            same = (self.codes[at[:, None] + np.arange(length)] == piece_codes[j]).all(axis=1)
            at, j = at[same], j[same]
            starts.append(at)
            lengths.append(np.full(len(at), length, dtype=np.int64))
            ids.append(piece_ids[j])
            if length == 1:
                covered[at] = True
        unknown = np.flatnonzero((self.codes >= 0) & ~covered)
        starts.append(unknown)
        lengths.append(np.ones(len(unknown), dtype=np.int64))
        ids.append(np.full(len(unknown), -1, dtype=np.int64))
        start, length, piece = np.concatenate(starts), np.concatenate(lengths), np.concatenate(ids)
        order = np.lexsort((length, start))
        return start[order], length[order], piece[order]


def _layers(key: np.ndarray) -> list[slice]:
    """Slices of equal `key` in a sorted array."""
    cuts = np.flatnonzero(np.diff(key)) + 1
    bounds = [0, *cuts.tolist(), len(key)]
    return [slice(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _segments(node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first index, length) of each run of equal nodes in a sorted layer."""
    first = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    return first, np.diff(np.r_[first, len(node)])


def _logsumexp(values: np.ndarray, first: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    top = np.maximum.reduceat(values, first)
    return top + np.log(np.add.reduceat(np.exp(values - np.repeat(top, sizes)), first))


def _forward(batch: Batch, start, length, score, *, best: bool):
    """Log-sum (or max) of paths into every node; with `best`, the edge each node's best path arrives by."""
    end = start + length
    depth = end - batch.starts[batch.word[start]]
    order = np.lexsort((start, end, depth))
    alpha = np.full(len(batch.codes), -np.inf)
    alpha[batch.starts] = 0.0
    back = np.full(len(batch.codes), -1, dtype=np.int64) if best else None
    for layer in _layers(depth[order]):
        idx = order[layer]
        node = end[idx]
        values = alpha[start[idx]] + score[idx]
        first, sizes = _segments(node)
        if best:
            top = np.maximum.reduceat(values, first)
            hit = np.flatnonzero(values == np.repeat(top, sizes))
            segment = np.repeat(np.arange(len(first)), sizes)[hit]
            winners = hit[np.unique(segment, return_index=True)[1]]  # the first: smallest start, the longest piece
            alpha[node[first]] = top
            back[node[first]] = idx[winners]
        else:
            alpha[node[first]] = _logsumexp(values, first, sizes)
    return alpha, back


def _backward(batch: Batch, start, length, score) -> np.ndarray:
    end = start + length
    depth = batch.ends[batch.word[start]] - start  # from the word's end: a layer's ends are all filled before it
    order = np.lexsort((end, start, depth))
    beta = np.full(len(batch.codes), -np.inf)
    beta[batch.ends] = 0.0
    for layer in _layers(depth[order]):
        idx = order[layer]
        node = start[idx]
        first, sizes = _segments(node)
        beta[node[first]] = _logsumexp(score[idx] + beta[end[idx]], first, sizes)
    return beta


def expected_counts(batch: Batch, edges, scores: np.ndarray, unknown_score: float, pieces: int) -> tuple[np.ndarray, float]:
    """(expected count of each piece, log likelihood of the batch), each word weighted by its corpus count."""
    start, length, piece = edges
    score = np.where(piece >= 0, scores[np.maximum(piece, 0)], unknown_score)
    alpha, _ = _forward(batch, start, length, score, best=False)
    beta = _backward(batch, start, length, score)
    total = alpha[batch.ends]  # log of each word's summed path probability
    word = batch.word[start]
    marginal = np.exp(alpha[start] + score + beta[start + length] - total[word])
    known = piece >= 0
    counts = np.bincount(piece[known], weights=(batch.counts[word] * marginal)[known], minlength=pieces)
    return counts, float(np.dot(batch.counts, total))


def viterbi(batch: Batch, edges, scores: np.ndarray, unknown_score: float) -> tuple[np.ndarray, np.ndarray]:
    """(word index, piece id) of every piece on each word's best path (-1: an unknown character), last piece first."""
    start, length, piece = edges
    score = np.where(piece >= 0, scores[np.maximum(piece, 0)], unknown_score)
    _, back = _forward(batch, start, length, score, best=True)
    words, pieces = [], []
    cursor = batch.ends.copy()
    active = np.flatnonzero(cursor > batch.starts)
    while len(active):
        edge = back[cursor[active]]
        words.append(active)
        pieces.append(piece[edge])
        cursor[active] = start[edge]
        active = active[cursor[active] > batch.starts[active]]
    if not words:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(words), np.concatenate(pieces)
