"""BERT's NSP instance construction, as a pure function over one document and a pool of partners.

In:  a tokenized document (sentences of word-piece ids), the other documents of its random bucket (the
     pool that random-next segments are drawn from), the target length and a seeded numpy Generator.
Out: Pair records (tokens_a, tokens_b, is_random_next) and the counts of what happened in this pass
     (with dupe_factor > 1 a document makes several passes; counts of the document itself, such as
     `single_sentence_docs`, are BucketPairs' in stages/make_nsp_pairs.py).

This follows create_instances_from_document in google-research/bert's create_pretraining_data.py:
fill a chunk of whole sentences up to a target length, cut it at a random sentence boundary into A,
and let B be the true continuation or, half the time, a random span of another document; sentences not
used when B is random are put back; the pair is truncated from a random side to max_seq_len - 3.

Where we deliberately differ from the reference:
  * The label stays an unbiased coin. The reference forces random-next whenever the chunk holds a single
    sentence, which pushes the random-next share above 50% (and makes every one-sentence document a
    negative). Here a one-sentence chunk with a true-next label borrows the next sentence of its document,
    and a lone last sentence (a one-sentence document included) makes no pair: it is counted as
    `unpaired_sentence` and still serves as random-next material for other documents.
  * The short target (probability `short_seq_prob`) is drawn per instance, not once per document, so
    the short-instance share is what the flag says.
  * A random-next segment never comes from the same document: it is drawn from the bucket's other
    documents. With no other document in the bucket the chunk falls back to true-next (counted as
    `no_random_partner`), never to a same-document "random" segment.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from itertools import chain

import numpy as np

Sentence = Sequence[int]


@dataclasses.dataclass(frozen=True)
class Pair:
    tokens_a: list[int]
    tokens_b: list[int]
    is_random_next: bool
    short_target: bool

    @property
    def num_tokens(self) -> int:
        return len(self.tokens_a) + len(self.tokens_b) + 3  # [CLS] A [SEP] B [SEP]


def truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: np.random.Generator) -> None:
    """Trim the longer segment, from its front or back at random, until both fit (in place).

    One token at a time as BERT's truncate_seq_pair does (the same coin per token, so the same result), but
    the steps are worked out from the lengths and cut with two slices per segment instead of a `del
    longer[0]` per token: the longer side loses a token at each step (B on a tie), so the steps are a run on
    one side until the two are level, then alternate."""
    excess = len(a) + len(b) - max_tokens
    if excess <= 0:
        return
    coins = (rng.random(excess) < 0.5).tolist()  # True: from the front
    la, lb = len(a), len(b)
    if la > lb:
        run = min(excess, la - lb)  # steps 0..run-1 trim A, then B, A, B, ...
        a_coins = coins[:run] + coins[run + 1 :: 2]
    else:
        run = min(excess, lb - la + 1)  # steps 0..run-1 trim B, then A, B, A, ...
        a_coins = coins[run::2]
    a_front = sum(a_coins)
    b_front = sum(coins) - a_front
    a_back, b_back = len(a_coins) - a_front, excess - len(a_coins) - b_front
    del a[la - a_back :]
    del a[:a_front]
    del b[lb - b_back :]
    del b[:b_front]


def _target_length(max_tokens: int, short_seq_prob: float, rng: np.random.Generator) -> tuple[int, bool]:
    if rng.random() < short_seq_prob:
        return int(rng.integers(2, max_tokens + 1)), True
    return max_tokens, False


def make_pairs(
    document: Sequence[Sentence],
    partners: Sequence[Sequence[Sentence]],
    *,
    max_seq_len: int,
    short_seq_prob: float,
    rng: np.random.Generator,
    all_sentences_non_empty: bool = False,
) -> tuple[list[Pair], Counter]:
    """All NSP pairs of `document`; random-next B segments come from `partners` (other documents).
    `all_sentences_non_empty`: the caller guarantees it of `document` and `partners` (TokenizedDoc's are), so
    that they are not checked sentence by sentence for every pair."""
    max_tokens = max_seq_len - 3
    stats: Counter = Counter()
    pairs: list[Pair] = []
    sentences = document if all_sentences_non_empty else [s for s in document if len(s)]
    pick = _pick if all_sentences_non_empty else _pick_non_empty
    target, short = _target_length(max_tokens, short_seq_prob, rng)
    # NOTE: the chunk is sentences[start : i + 1], kept as two indices, and the lengths are read once: the
    # loop runs once per sentence, so a list append and three len() calls there were a fifth of this function
    lengths = list(map(len, sentences))
    last = len(sentences) - 1
    start, length, i = 0, 0, 0
    while i <= last:
        length += lengths[i]
        if i == last or length >= target:
            size = i + 1 - start
            if size == 1 and i == last:
                # A lone last sentence has no true continuation; emitting it only as a random-next pair
                # (as the reference does) would tie the label to "short A at a document's end".
                stats["unpaired_sentence"] += 1
                break
            random_next = bool(rng.random() < 0.5)
            if random_next and not partners:
                stats["no_random_partner"] += 1
                random_next = False
            if not random_next and size == 1:  # borrow the next sentence so A has a true continuation
                i += 1
                size = 2
            a_end = start + (int(rng.integers(1, size)) if size >= 2 else 1)
            tokens_a = list(chain.from_iterable(sentences[start:a_end]))
            if random_next:
                tokens_b = _random_segment(partners, max(1, target - len(tokens_a)), rng, pick)
                i = a_end - 1  # put the unused sentences back
            else:
                tokens_b = list(chain.from_iterable(sentences[a_end : i + 1]))
            truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            pairs.append(Pair(tokens_a, tokens_b, random_next, short))
            stats["random_next" if random_next else "true_next"] += 1
            stats["short_target"] += short
            start, length = i + 1, 0
            target, short = _target_length(max_tokens, short_seq_prob, rng)
        i += 1
    return pairs, stats


def _random_segment(partners: Sequence[Sequence[Sentence]], target: int, rng: np.random.Generator, pick) -> list[int]:
    other = pick(partners, rng)
    while not other:  # partners are pre-filtered to non-empty documents; this guards a caller that did not
        other = pick(partners, rng)
    segment: list[int] = []
    for k in range(int(rng.integers(len(other))), len(other)):
        segment.extend(other[k])
        if len(segment) >= target:
            break
    return segment


def _pick(partners: Sequence[Sequence[Sentence]], rng: np.random.Generator) -> Sequence[Sentence]:
    return partners[int(rng.integers(len(partners)))]


def _pick_non_empty(partners: Sequence[Sequence[Sentence]], rng: np.random.Generator) -> Sequence[Sentence]:
    document = partners[int(rng.integers(len(partners)))]
    return document if all(map(len, document)) else [s for s in document if len(s)]
