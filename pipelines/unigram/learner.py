"""Learn a Unigram language-model vocabulary (Kudo 2018) from word counts, as SentencePiece's trainer does.

In:  (word, count) pairs, each word one of `UnigramWords`' ('▁hello': pipelines/unigram/normalizer.py), the corpus's
     character counts (CountWords counts them over every word, also those --vocab-max-words prunes; None: from the
     words) and a UnigramConfig.
Out: the pieces with their log probabilities, index = id: <s> <pad> </s> <unk> (score 0.0), the learned pieces best
     first (ties by piece), <mask> last: XLM-R's layout.

The steps are SentencePiece's (unigram_model_trainer.cc), on words instead of sentences:
  1. required characters: the most frequent, until `character_coverage` of all characters counted (1.0: all), each
     one a piece, so every character of the corpus stays representable (XLM-R's tokenizer has no byte fallback);
  2. seeds: those characters and the best substrings by frequency x length (pipelines/unigram/seeds.py), scores
     their log share;
  3. EM: the E step sums, over every word's lattice, each piece's expected count weighted by the word's count
     (pipelines/unigram/lattice.py); the M step drops pieces expected less than 0.5 times and scores the others
     digamma(count) - digamma(total) (SentencePiece's Bayesian EM, a sparse prior);
  4. after every `sub_iterations` EM steps, pruning: a piece whose own Viterbi cut is split never wins and goes; for
     the others the loss of likelihood if its count moved to its second-best cut, weighted by the share of words
     using it, and the `shrinking_factor` share with the largest losses stays (pieces with no second-best cut stay);
     until 1.1 x vocab_size pieces remain, or none can go;
  5. the required characters (any the EM dropped comes back just below the lowest score, the rarer lower), then
     the best-scoring pieces up to vocab_size.
Words are sorted by (length, word) and the EM runs in float64 in one process, so the same counts give the same bytes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

from pipelines.unigram.config import UnigramConfig
from pipelines.unigram.lattice import Batch, PieceTable, expected_counts, viterbi
from pipelines.unigram.seeds import seed_pieces
from schemas.tokenizer_formats import UNIGRAM

LEADING = ("<s>", "<pad>", "</s>", "<unk>")
"""XLM-R's first ids (fairseq's dictionary); <mask> is the last token."""
BATCH_CHARS = 1 << 18
"""Characters of words per lattice batch: what bounds the E step's arrays (a few dozen bytes per edge)."""
_UNKNOWN_PENALTY = 10.0  # an uncovered character scores this much below the lowest piece (SentencePiece's kUnkPenalty)
_MIN_EXPECTED = 0.5  # the M step drops pieces expected fewer times (kExpectedFrequencyThreshold)
_REQUIRED_STEP = 1e-4  # between the scores of required characters the EM dropped (kMinScorePenaltyDelta)


def digamma(x: np.ndarray) -> np.ndarray:
    """SentencePiece's digamma: the recurrence up to 7, then the asymptotic series."""
    x = np.array(x, dtype=np.float64)
    result = np.zeros_like(x)
    for _ in range(7):
        small = x < 7
        result[small] -= 1.0 / x[small]
        x[small] += 1.0
    x -= 0.5
    xx2 = 1.0 / (x * x)
    xx4 = xx2 * xx2
    return result + np.log(x) + xx2 / 24.0 - 7.0 / 960.0 * xx4 + 31.0 / 8064.0 * xx4 * xx2 - 127.0 / 30720.0 * xx4 * xx4


def required_characters(char_counts: Mapping[str, int], coverage: float) -> list[tuple[str, int]]:
    """The most frequent characters (ties by character) until `coverage` of all counted characters."""
    ranked = sorted(((c, n) for c, n in char_counts.items() if n > 0 and c != " "), key=lambda cn: (-cn[1], cn[0]))
    total = sum(n for _, n in ranked)
    kept, covered = [], 0
    for char, count in ranked:
        if coverage < 1.0 and covered >= coverage * total:
            break
        kept.append((char, count))
        covered += count
    return kept


def _batches(words: list[str], counts: np.ndarray) -> list[Batch]:
    out, begin, size = [], 0, 0
    for i, word in enumerate(words):
        size += len(word) + 1
        if size >= BATCH_CHARS:
            out.append(Batch(words[begin:i + 1], counts[begin:i + 1]))
            begin, size = i + 1, 0
    if begin < len(words):
        out.append(Batch(words[begin:], counts[begin:]))
    return out


class _Model:
    """The pieces being learned, their scores and lookup table."""

    def __init__(self, pieces: list[str], scores: np.ndarray, max_length: int):
        self.pieces, self.scores, self.max_length = pieces, np.asarray(scores, dtype=np.float64), max_length
        self.table = PieceTable(pieces, max_length)
        self.unknown = float(self.scores.min()) - _UNKNOWN_PENALTY

    def edges(self, batch: Batch):
        return batch.edges(self.table, self.max_length)


def _em_step(model: _Model, batches: list[Batch]) -> _Model:
    expected = np.zeros(len(model.pieces))
    for batch in batches:
        counts, _ = expected_counts(batch, model.edges(batch), model.scores, model.unknown, len(model.pieces))
        expected += counts
    keep = np.flatnonzero(expected >= _MIN_EXPECTED)
    kept = expected[keep]
    return _Model([model.pieces[i] for i in keep], digamma(kept) - digamma(kept.sum()), model.max_length)


def _alternatives(model: _Model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(removable, owner, alternative): pieces whose own best cut is split; and for each piece whose best cut is itself
    (longer than one character), the pieces of its second-best cut (-1 for a character no piece covers: the unknown
    piece, as SentencePiece's lattice has it)."""
    n = len(model.pieces)
    whole = Batch(model.pieces, np.ones(n))
    word, piece = viterbi(whole, model.edges(whole), model.scores, model.unknown)
    removable = np.bincount(word, minlength=n) >= 2
    lengths = np.fromiter(map(len, model.pieces), dtype=np.int64, count=n)
    asked = np.flatnonzero(~removable & (lengths >= 2))
    if not len(asked):
        return removable, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    second = Batch([model.pieces[i] for i in asked], np.ones(len(asked)))
    start, length, ids = model.edges(second)
    partial = length < second.ends[second.word[start]] - second.starts[second.word[start]]  # not the piece itself
    word, piece = viterbi(second, (start[partial], length[partial], ids[partial]), model.scores, model.unknown)
    return removable, asked[word], piece


def _prune(model: _Model, batches: list[Batch], desired: int, shrinking: float) -> _Model:
    n = len(model.pieces)
    removable, owner, alternative = _alternatives(model)
    # the unknown piece is number n here: what an uncovered character's count goes to
    freq, users, total_count = np.zeros(n + 1), np.zeros(n + 1), 0.0
    alternative = np.where(alternative < 0, n, alternative)
    for batch in batches:
        word, piece = viterbi(batch, model.edges(batch), model.scores, model.unknown)
        piece = np.where(piece < 0, n, piece)
        freq += np.bincount(piece, weights=batch.counts[word], minlength=n + 1)
        pairs = np.unique(word * (n + 1) + piece)  # each word counted once per piece it uses
        users += np.bincount(pairs % (n + 1), weights=batch.counts[pairs // (n + 1)], minlength=n + 1)
        total_count += float(batch.counts.sum())
    total = freq.sum()
    freq, users = freq[:n], users[:n]
    alt_count = np.bincount(owner, minlength=n)
    has_alternatives = alt_count > 0
    alive = (freq > 0) & ~removable
    with np.errstate(divide="ignore", invalid="ignore"):  # pieces with no count or no alternative: not used below
        logsum_alt = np.log(total + freq * (alt_count - 1))
        alt_freq = np.append(freq, total - freq.sum())[alternative]
        alt_logprob = np.bincount(owner, weights=np.log(alt_freq + freq[owner]), minlength=n) - alt_count * logsum_alt
        loss = users / max(total_count, 1.0) * (np.log(freq) - np.log(total) - alt_logprob)
    kept = [i for i in range(n) if alive[i] and not has_alternatives[i]]
    candidates = sorted((i for i in range(n) if alive[i] and has_alternatives[i]), key=lambda i: (-loss[i], i))
    size = max(desired, int(shrinking * n))
    order = kept + candidates[:max(0, size - len(kept))]
    return _Model([model.pieces[i] for i in order], model.scores[order], model.max_length)


def learn_unigram(word_counts: Iterable[tuple[str, int]], char_counts: Mapping[str, int] | None,
                  config: UnigramConfig) -> list[tuple[str, float]]:
    """The vocabulary (piece, score), index = id, learned from the counts; the same counts give the same list."""
    counts: dict[str, int] = defaultdict(int)
    for word, count in word_counts:
        if word and count > 0:
            counts[word] += count
    if char_counts is None:
        char_counts = defaultdict(int)
        for word, count in counts.items():
            for char in word:
                char_counts[char] += count
    special = set(UNIGRAM.special_tokens)
    required = [(c, n) for c, n in required_characters(char_counts, config.character_coverage) if c not in special]
    room = config.vocab_size - len(UNIGRAM.special_tokens)
    if len(required) > room:
        raise ValueError(f"--vocab-size {config.vocab_size} leaves room for {room} pieces, fewer than the {len(required)} "
                         f"characters --character-coverage {config.character_coverage} keeps: raise --vocab-size or lower "
                         "--character-coverage")
    kept_chars = {c for c, _ in required}
    words = sorted((w for w in counts if len(w) <= config.max_word_length), key=lambda w: (len(w), w))
    weights = np.array([counts[w] for w in words], dtype=np.float64)
    seeds = seed_pieces(words, weights.astype(np.int64), max_length=config.max_piece_length,
                        size=max(0, config.seed_size - len(required)))
    seeds = [(p, s) for p, s in seeds if kept_chars.issuperset(p) and p not in special]
    pieces = [c for c, _ in required] + [p for p, _ in seeds]
    raw = np.array([n for _, n in required] + [s for _, s in seeds], dtype=np.float64)
    model = _Model(pieces, np.log(raw) - np.log(raw.sum()), config.max_piece_length) if pieces else None
    batches = _batches(words, weights)
    desired = int(config.vocab_size * 1.1)
    while model is not None and batches:
        for _ in range(config.sub_iterations):
            model = _em_step(model, batches)
        if len(model.pieces) <= desired:
            break
        pruned = _prune(model, batches, desired, config.shrinking_factor)
        if len(pruned.pieces) == len(model.pieces):  # what remains has no second-best cut (the characters, mostly)
            break
        model = pruned
    return _finalize(model, required, room)


def _finalize(model: _Model | None, required: list[tuple[str, int]], room: int) -> list[tuple[str, float]]:
    learned = dict(zip(model.pieces, model.scores.tolist())) if model is not None else {}
    floor = min(learned.values(), default=0.0)
    final: dict[str, float] = {}
    dropped = 0
    for char, _ in required:  # most frequent first
        if char in learned:
            final[char] = learned[char]
        else:
            dropped += 1
            final[char] = floor - dropped * _REQUIRED_STEP
    for piece, score in sorted(learned.items(), key=lambda ps: (-ps[1], ps[0])):
        if len(final) >= room:
            break
        final.setdefault(piece, score)
    ranked = sorted(final.items(), key=lambda ps: (-ps[1], ps[0]))
    return [(t, 0.0) for t in LEADING] + ranked + [("<mask>", 0.0)]
