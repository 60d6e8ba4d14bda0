"""Learn a byte-level BPE vocabulary (GPT-2's, RoBERTa's) from word counts.

In:  (word, count) pairs, each word one of `ByteLevelWords`' (pipelines/bpe/byte_level.py: already in the byte-level
     alphabet, 'Ġhello'), and a BpeConfig.
Out: the tokens (index = id: <s> <pad> </s> <unk>, the 256 byte symbols in byte order, one token per merge in merge
     order, <mask> last, as roberta-base lays them out) and the merges, in the order the encoder applies them.

Merging is pipelines/bpe/merges.py's loop: the most frequent adjacent pair first, ties to the pair whose token strings
are smallest in code point order (left token first), until `vocab_size` tokens or no pair seen `min_frequency` times.
The words come in sorted, so the result depends on the counts alone, not on the order workers delivered them in.
A merge whose token another merge made already ('a'+'bc', 'ab'+'c') keeps that token's id and adds the merge alone;
a pair whose join would spell a special token ('<s' + '>') is never merged (the encoder splits those off the text first).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from pipelines.bpe.byte_level import BYTE_CHARS
from pipelines.bpe.config import BpeConfig
from pipelines.bpe.merges import merge_pairs
from schemas.tokenizer_formats import BPE

LEADING = ("<s>", "<pad>", "</s>", "<unk>")
"""RoBERTa's first ids; <mask> is the last token."""


def learn_bpe(word_counts: Iterable[tuple[str, int]], config: BpeConfig) -> tuple[list[str], list[tuple[str, str]]]:
    """(tokens, merges) learned from `word_counts`; the same counts give the same lists."""
    counts: dict[str, int] = defaultdict(int)
    for word, count in word_counts:
        if word and count > 0:
            counts[word] += count
    vocab = [*LEADING, *BYTE_CHARS]
    index = {t: i for i, t in enumerate(vocab)}
    alien = sorted({ch for word in counts for ch in word} - set(BYTE_CHARS))
    if alien:
        raise ValueError(f"words must be in the byte-level alphabet (pipelines/bpe/byte_level.py), found {alien[:5]}")
    usable = sorted(w for w in counts if len(w) >= 2)
    words = [[index[ch] for ch in w] for w in usable]
    weights = [counts[w] for w in usable]
    mask_slot = 1  # <mask> comes after the merges, within vocab_size
    special = set(BPE.special_tokens)
    pairs = merge_pairs(words, weights, vocab, index, vocab_size=config.vocab_size - mask_slot,
                        min_frequency=config.min_frequency, join=lambda a, b: None if a + b in special else a + b)
    vocab.append("<mask>")
    return vocab, [(vocab[a], vocab[b]) for a, b in pairs]
