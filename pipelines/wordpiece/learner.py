"""Learn a WordPiece vocabulary from word counts.

In:  (word, count) pairs, where a word is one of `basic_words(text)` (normalized, no whitespace, no
     punctuation inside), and a VocabConfig.
Out: the vocabulary as a list of tokens, index = id: special tokens, the alphabet, its '##' continuation
     forms, then one token per merge, in merge order.

The algorithm is the one `tokenizers`' WordPieceTrainer runs inside (a BPE whose non-initial symbols carry
the '##' prefix): start from characters, repeatedly merge the adjacent pair with the highest corpus count
into a new token, until the vocabulary is full or no pair is seen `min_frequency` times (the loop is
pipelines/bpe/merges.py's, which byte-level BPE shares). Differences:
  * determinism: ties go to the lexicographically smaller pair of token strings (tokenizers breaks ties by
    ids whose order depends on hash-map iteration), so the same counts give the same bytes whatever the
    order they arrive in;
  * words holding a character outside the kept alphabet, or longer than max_input_chars_per_word, are left
    out of the pair counts (tokenizers drops just that character and counts pairs across the gap, and
    counts long words in full); the encoder maps such words to [UNK] whatever the merges, so their pairs
    would only spend merges on pieces no encoded word uses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from pipelines.bpe.merges import merge_pairs
from pipelines.wordpiece.config import VocabConfig, special_token_layout
from schemas.vocab import CONTINUATION


def _alphabet(counts: dict[str, int], limit: int) -> list[str]:
    char_counts: dict[str, int] = defaultdict(int)
    for word, count in counts.items():
        for ch in word:
            char_counts[ch] += count
    kept = sorted(char_counts, key=lambda ch: (-char_counts[ch], ch))[:limit]
    return sorted(kept)


def _chars(token: str) -> int:
    """A token's length in characters, without the '##' prefix."""
    return len(token) - (len(CONTINUATION) if token.startswith(CONTINUATION) else 0)


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
    words = [[index[w[0]]] + [index[CONTINUATION + ch] for ch in w[1:]] for w in usable if len(w) >= 2]
    weights = [counts[w] for w in usable if len(w) >= 2]
    max_chars = config.max_token_chars

    def join(a: str, b: str) -> str | None:
        if max_chars is not None and _chars(a) + _chars(b) > max_chars:
            return None
        return a + b[len(CONTINUATION):]

    merge_pairs(words, weights, vocab, index, vocab_size=config.vocab_size, min_frequency=config.min_frequency, join=join)
    return vocab
