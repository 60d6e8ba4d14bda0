"""The word bound of the vocabulary learner: which words' counts reach the one worker that learns.

In:  a histogram of word counts ({count: how many distinct words have it}) and `max_words`.
Out: a WordBound: the smallest count a word needs to be kept (`min_count`), and how many distinct words
     there were, are kept and are pruned. Every word counted at least `min_count` times is kept, every
     other word is pruned, so at most `max_words` words are kept and the choice depends only on the counts
     (not on which worker saw what, nor on ties among equally rare words: a count either makes it or not).

NOTE: the learner is a sequential loop over every distinct word it is given (pipelines/wordpiece/learner.py),
so its memory follows that number; web text has hundreds of millions of distinct strings (ids, hashes,
URLs, typos), each seen a handful of times. The words pruned here are the rarest, whose pair counts are too
small to win a merge on any corpus where the bound bites: below the bound the vocabulary is unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class WordBound:
    min_count: int
    """Words seen fewer times than this are pruned (1: none is)."""
    distinct: int
    kept: int
    pruned: int

    def to_dict(self) -> dict[str, int]:
        return {"words_distinct": self.distinct, "words_kept": self.kept, "words_pruned": self.pruned,
                "words_min_count": self.min_count}


def word_bound(histogram: Mapping[int, int], max_words: int) -> WordBound:
    """The highest-count words, at most `max_words` of them, with every word of a kept count kept."""
    if max_words < 1:
        raise ValueError(f"max_words must be >= 1, got {max_words}")
    distinct = sum(histogram.values())
    kept, min_count = 0, None
    for count in sorted(histogram, reverse=True):
        if kept + histogram[count] > max_words:
            break
        kept += histogram[count]
        min_count = count
    if min_count is None:  # even the most frequent count has more than max_words words: keep none of them
        min_count = max(histogram, default=0) + 1
    if kept == distinct:
        min_count = 1
    return WordBound(min_count=min_count, distinct=distinct, kept=kept, pruned=distinct - kept)
