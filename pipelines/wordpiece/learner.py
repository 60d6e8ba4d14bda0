"""Learn a WordPiece vocabulary from word counts.

In:  (word, count) pairs, where a word is one of `basic_words(text)` (normalized, no whitespace, no
     punctuation inside), and a VocabConfig.
Out: the vocabulary as a list of tokens, index = id: special tokens, the alphabet, its '##' continuation
     forms, then one token per merge, in merge order.

The algorithm is the one `tokenizers`' WordPieceTrainer runs inside (a BPE whose non-initial symbols carry
the '##' prefix): start from characters, repeatedly merge the adjacent pair with the highest corpus count
into a new token, until the vocabulary is full or no pair is seen `min_frequency` times. Differences:
  * determinism: ties go to the lexicographically smaller pair of token strings (tokenizers breaks ties by
    ids whose order depends on hash-map iteration), so the same counts give the same bytes whatever the
    order they arrive in;
  * words holding a character outside the kept alphabet, or longer than max_input_chars_per_word, are left
    out of the pair counts (tokenizers drops just that character and counts pairs across the gap, and
    counts long words in full); the encoder maps such words to [UNK] whatever the merges, so their pairs
    would only spend merges on pieces no encoded word uses.
It keeps a pair -> words index and a max-heap of pair counts with lazy deletion, so a merge touches only the
words that hold the pair.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable

from pipelines.wordpiece.config import VocabConfig, special_token_layout
from schemas.vocab import CONTINUATION


def _alphabet(counts: dict[str, int], limit: int) -> list[str]:
    char_counts: dict[str, int] = defaultdict(int)
    for word, count in counts.items():
        for ch in word:
            char_counts[ch] += count
    kept = sorted(char_counts, key=lambda ch: (-char_counts[ch], ch))[:limit]
    return sorted(kept)


def learn_wordpiece(word_counts: Iterable[tuple[str, int]], config: VocabConfig) -> list[str]:
    """The WordPiece vocabulary (index = id) learned from `word_counts`; the same counts give the same list."""
    counts: dict[str, int] = defaultdict(int)
    for word, count in word_counts:
        if word and count > 0:
            counts[word] += count

    vocab = special_token_layout(config.num_unused)
    index = {token: i for i, token in enumerate(vocab)}

    def add(token: str) -> int:
        if token not in index:
            index[token] = len(vocab)
            vocab.append(token)
        return index[token]

    alphabet = _alphabet(counts, config.limit_alphabet)
    for ch in alphabet:
        add(ch)
    known = set(alphabet)
    later = set()  # characters seen after the first position of some word: they get a '##c' form
    for word in counts:
        later.update(word[1:])
    for ch in sorted(later & known):
        add(CONTINUATION + ch)
    usable = sorted(w for w in counts if len(w) <= config.max_input_chars_per_word and known.issuperset(w))

    # words[i]: symbol ids of usable word i (only those with a pair to merge); weights[i]: its corpus count.
    words: list[list[int]] = []
    weights: list[int] = []
    pair_counts: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)
    for word in usable:
        if len(word) < 2:
            continue
        symbols = [index[word[0]]] + [index[CONTINUATION + ch] for ch in word[1:]]
        i, count = len(words), counts[word]
        words.append(symbols)
        weights.append(count)
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += count
            where[pair].add(i)

    # Token lengths in characters, without the '##' prefix, for max_token_chars.
    length = {i: len(t) - (2 if t.startswith(CONTINUATION) else 0) for i, t in enumerate(vocab)}
    max_chars = config.max_token_chars
    heap = [(-c, vocab[a], vocab[b], (a, b)) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    while len(vocab) < config.vocab_size and heap:
        negative, _, _, pair = heapq.heappop(heap)
        current = pair_counts.get(pair, 0)
        if current <= 0:
            continue
        if current != -negative:  # stale: re-queue at the true count (a pair whose count grew has a fresh entry too)
            heapq.heappush(heap, (-current, vocab[pair[0]], vocab[pair[1]], pair))
            continue
        if current < config.min_frequency:
            break
        a, b = pair
        if max_chars is not None and length[a] + length[b] > max_chars:
            continue
        merged = add(vocab[a] + vocab[b][len(CONTINUATION):])
        length[merged] = length[a] + length[b]
        touched: set[tuple[int, int]] = set()
        for i in where.pop(pair, ()):
            touched.update(_merge_word(words, weights, i, a, b, merged, pair_counts, where))
        pair_counts.pop(pair, None)
        for new_pair in touched:
            count = pair_counts.get(new_pair, 0)
            if count > 0:
                heapq.heappush(heap, (-count, vocab[new_pair[0]], vocab[new_pair[1]], new_pair))
    return vocab


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
