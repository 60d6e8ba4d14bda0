"""The merge loop of every BPE learner here: byte-level BPE's (pipelines/bpe/learner.py) and WordPiece's (a BPE whose
non-initial symbols carry '##': pipelines/wordpiece/learner.py).

In:  words as lists of symbol ids with their corpus counts, the vocabulary so far (tokens, index = id), and how two
     tokens join (`join`: the merged token's string, or None when that pair may not merge).
Out: the merges in the order they were made, the vocabulary grown by one token per merge (a merge that makes a token
     already there reuses it).

Each step merges the adjacent pair with the highest corpus count; ties go to the pair whose token strings are
smallest, left one first, in code point order, so the same counts give the same merges whatever order they came in
(tokenizers breaks ties by ids whose order follows hash-map iteration). It stops when the vocabulary is full or no pair
is seen `min_frequency` times. A pair -> words index and a max-heap of pair counts with lazy deletion make a merge
touch only the words that hold the pair.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable


def merge_pairs(words: list[list[int]], weights: list[int], vocab: list[str], index: dict[str, int], *, vocab_size: int,
                min_frequency: int, join: Callable[[str, str], str | None]) -> list[tuple[int, int]]:
    """Merge pairs of `words` (changed in place) until `vocab` (grown in place) holds `vocab_size` tokens."""
    pair_counts: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)
    for i, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += weights[i]
            where[pair].add(i)

    merges: list[tuple[int, int]] = []
    heap = [(-c, vocab[a], vocab[b], (a, b)) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        negative, _, _, pair = heapq.heappop(heap)
        current = pair_counts.get(pair, 0)
        if current <= 0:
            continue
        if current != -negative:  # stale: re-queue at the true count (a pair whose count grew has a fresh entry too)
            heapq.heappush(heap, (-current, vocab[pair[0]], vocab[pair[1]], pair))
            continue
        if current < min_frequency:
            break
        a, b = pair
        token = join(vocab[a], vocab[b])
        if token is None:
            continue
        if token not in index:
            index[token] = len(vocab)
            vocab.append(token)
        merged = index[token]
        merges.append(pair)
        touched: set[tuple[int, int]] = set()
        for i in where.pop(pair, ()):
            touched.update(_merge_word(words, weights, i, a, b, merged, pair_counts, where))
        pair_counts.pop(pair, None)
        for new_pair in touched:
            count = pair_counts.get(new_pair, 0)
            if count > 0:
                heapq.heappush(heap, (-count, vocab[new_pair[0]], vocab[new_pair[1]], new_pair))
    return merges


def _merge_word(words, weights, i, a, b, merged, pair_counts, where) -> list[tuple[int, int]]:
    """Replace every (a, b) in word i by `merged`, left to right; update the pair counts and index.

    Only the neighbours of each merged occurrence change: (left, a) and (b, right) go, (left, merged) and
    (merged, right) come. When two occurrences touch ("a b a b"), the (b, a) between them is the right
    neighbour of the first and the left of the second; it is handled once, by the second.
    Returns the pairs that now hold `merged` (the only pairs whose count can have grown).
    """
    old = words[i]
    n = len(old)
    starts = []
    j = 0
    try:
        while True:
            j = old.index(a, j)  # C-speed scan; most words hold `a` once
            if j + 1 < n and old[j + 1] == b:
                starts.append(j)
                j += 2
            else:
                j += 1
    except ValueError:
        pass
    if not starts:  # the index is lazy: the pair may have left this word in an earlier merge
        return []
    weight = weights[i]
    new: list[int] = []
    grown = []
    done = 0
    for k, j in enumerate(starts):
        new.extend(old[done:j])
        if j:
            pair_counts[old[j - 1], a] -= weight
            left = (new[-1] if new else old[j - 1], merged)
            pair_counts[left] += weight
            grown.append(left)
        if j + 2 < n and (k + 1 == len(starts) or starts[k + 1] != j + 2):
            pair_counts[b, old[j + 2]] -= weight
            right = (merged, old[j + 2])
            pair_counts[right] += weight
            grown.append(right)
        new.append(merged)
        done = j + 2
    new.extend(old[done:])
    words[i] = new
    for pair in grown:
        where[pair].add(i)
    return grown
