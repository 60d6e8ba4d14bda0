"""The seed pieces of Unigram learning: the frequent substrings of the counted words, SentencePiece's way.

In:  the words (each '▁...', at most max_word_length characters) with their counts, and the most pieces to keep.
Out: (piece, score) pairs, score = weighted frequency x length, for substrings of 2..max_piece_length characters that
     occur in some word, are right-maximal (the longest string with their set of occurrences: at one occurrence the
     word ends there, or two occurrences continue differently, as the internal nodes of a suffix tree are, which is
     what SentencePiece's esaxx enumerates), and are seen at least twice; the best `size` by score, ties by piece.

Frequencies count each occurrence with its word's corpus count, as SentencePiece counts the raw corpus (tokenizers'
UnigramTrainer counts each distinct word once). The suffixes are sorted by their first max_piece_length + 1
characters (prefix doubling over numpy arrays: a few sorts of the whole text) and the substrings of each length read
off as runs of neighbours with a long enough common prefix, so memory follows the words' total length (bounded by
--vocab-max-words), not the corpus.
"""

from __future__ import annotations

import numpy as np


def _text(words: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes, word index, characters left in the word) per position; a word ends with a -1 separator."""
    lengths = np.fromiter((len(w) + 1 for w in words), dtype=np.int64, count=len(words))
    codes = np.frombuffer("".join(w + "\0" for w in words).encode("utf-32-le"), dtype=np.int32).astype(np.int64)
    codes[np.cumsum(lengths) - 1] = -1
    word = np.repeat(np.arange(len(words), dtype=np.int64), lengths)
    ends = np.repeat(np.cumsum(lengths) - 1, lengths)
    return codes, word, ends - np.arange(len(codes))


def _sorted_suffixes(codes: np.ndarray, left: np.ndarray, depth: int) -> np.ndarray:
    """Positions of the characters (not separators), ordered by the first `depth` characters of their suffix (a word's
    end sorts before any character)."""
    rank = codes + 1  # separators 0, characters >= 1
    h = 1
    while h < depth:
        following = np.zeros_like(rank)
        reach = left > h
        following[reach] = rank[np.flatnonzero(reach) + h]
        order = np.lexsort((following, rank))
        a, b = rank[order], following[order]
        changed = np.empty(len(order), dtype=bool)
        changed[0] = True
        changed[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
        dense = np.cumsum(changed) - 1  # the separators' group (0, 0) sorts first and gets 0
        rank = np.empty_like(rank)
        rank[order] = dense
        h *= 2
    order = np.argsort(rank, kind="stable")
    return order[codes[order] >= 0]


def seed_pieces(words: list[str], counts: np.ndarray, *, max_length: int, size: int) -> list[tuple[str, int]]:
    """The `size` best seed substrings (see the module docstring) with their scores, best first."""
    if not words:
        return []
    codes, word, left = _text(words)
    sa = _sorted_suffixes(codes, left, max_length + 1)
    weight = counts[word[sa]].astype(np.int64)
    # lcp[i]: characters suffixes sa[i-1] and sa[i] share, up to max_length + 1
    lcp = np.zeros(len(sa), dtype=np.int64)
    alive = np.ones(len(sa) - 1, dtype=bool)
    padded = np.concatenate([codes, np.full(max_length + 1, -1)])
    for k in range(max_length + 1):
        x, y = padded[sa[:-1] + k], padded[sa[1:] + k]
        alive &= (x == y) & (x >= 0)
        lcp[1:] += alive
    prefix = np.concatenate([[0], np.cumsum(weight)])
    found_score, found_start, found_length = [], [], []
    for length in range(2, max_length + 1):
        # runs of neighbours sharing `length` characters: the same substring; a run starts where the common prefix
        # with the suffix before is shorter (a suffix with fewer characters left is a run of its own, left out)
        starts = np.flatnonzero(lcp < length)
        ends = np.append(starts[1:], len(sa))
        inner = lcp.copy()
        inner[starts] = max_length + 2
        shared = np.minimum.reduceat(inner, starts)  # the least common prefix inside the run (none: max_length + 2)
        first = left[sa[starts]]
        single = ends - starts == 1
        # not right-maximal: every occurrence goes on with the same character
        extends = np.where(single, first > length, shared > length)
        keep = (first >= length) & ~extends
        freq = prefix[ends] - prefix[starts]
        keep &= freq >= 2
        found_score.append(freq[keep] * length)
        found_start.append(sa[starts[keep]])
        found_length.append(np.full(int(keep.sum()), length))
    score = np.concatenate(found_score)
    start = np.concatenate(found_start)
    length = np.concatenate(found_length)
    if len(score) > size:  # everything scoring at least the size-th best, then ties broken by the string
        threshold = np.partition(score, len(score) - size)[len(score) - size]
        chosen = np.flatnonzero(score >= threshold)
        score, start, length = score[chosen], start[chosen], length[chosen]
    chars = codes.astype(np.int64)
    pieces = [("".join(map(chr, chars[s:s + n])), int(f)) for s, n, f in zip(start.tolist(), length.tolist(), score.tolist())]
    pieces.sort(key=lambda p: (-p[1], p[0]))
    return pieces[:size]
