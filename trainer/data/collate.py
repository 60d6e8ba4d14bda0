"""Collation: NSP pairs (segments A and B of word-piece ids) → one padded batch, `[CLS] A [SEP] B [SEP] [PAD]...`.

In:  the segments as slices of flat id arrays (`collate_segments`: values + starts + lengths, which is how an
     Arrow list column stores them, so ShardStream hands over its record batches' buffers without a Python
     object per pair), or as one array per pair (`collate_pairs`, for callers holding lists).
Out: numpy arrays, all (batch, seq) but the label (batch,): int64 `input_ids`, `token_type_ids`,
     `attention_mask`, `next_sentence_label` (1 when B is a random next, transformers' convention), and bool
     `special_mask` (True at [CLS]/[SEP]/[PAD]), which the Masker consumes. seq is the longest pair of the
     batch (dynamic padding), rounded up to `pad_to_multiple_of`.

Every position is filled by whole-batch numpy indexing: no loop over pairs (`python bench/run.py loader`
measures it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def collate_segments(
    a_values: np.ndarray,
    a_starts: np.ndarray,
    a_lengths: np.ndarray,
    b_values: np.ndarray,
    b_starts: np.ndarray,
    b_lengths: np.ndarray,
    is_random_next: Sequence[bool] | np.ndarray,
    *,
    cls_id: int,
    sep_id: int,
    pad_id: int,
    max_seq_len: int,
    pad_to_multiple_of: int = 1,
) -> dict[str, np.ndarray]:
    """Pair i is A = a_values[a_starts[i] : a_starts[i] + a_lengths[i]] and B likewise (see the module docstring).

    A pair longer than `max_seq_len` with its three special tokens is an error, not a truncation: prep already
    truncated every pair to max_seq_len - 3 tokens, so a longer one means the wrong shards."""
    len_a, len_b = np.asarray(a_lengths, np.int64), np.asarray(b_lengths, np.int64)
    batch = len(len_a)
    if batch == 0 or len(len_b) != batch or len(is_random_next) != batch:
        raise ValueError(f"need a non-empty batch of equal lengths, got {batch}, {len(len_b)}, {len(is_random_next)}")
    lengths = len_a + len_b + 3
    longest = int(lengths.max())
    if longest > max_seq_len:
        row = int(lengths.argmax())
        raise ValueError(f"pair {row} of the batch has {longest} tokens with [CLS]/[SEP], max_seq_len is {max_seq_len}")
    seq = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    col = np.arange(seq)
    sep_a = (len_a + 1)[:, None]  # (batch, 1): the [SEP] after A; B starts right after it
    attention = col < lengths[:, None]  # (batch, seq)
    in_a = (col > 0) & (col < sep_a)
    in_b = (col > sep_a) & (col < (lengths - 1)[:, None])
    input_ids = np.full((batch, seq), pad_id, dtype=np.int64)
    input_ids[in_a] = np.asarray(a_values)[(np.asarray(a_starts, np.int64)[:, None] - 1 + col)[in_a]]
    input_ids[in_b] = np.asarray(b_values)[(np.asarray(b_starts, np.int64)[:, None] - sep_a - 1 + col)[in_b]]
    rows = np.arange(batch)
    input_ids[:, 0] = cls_id
    input_ids[rows, len_a + 1] = sep_id
    input_ids[rows, lengths - 1] = sep_id
    return {
        "input_ids": input_ids,
        "token_type_ids": ((col > sep_a) & attention).astype(np.int64),
        "attention_mask": attention.astype(np.int64),
        "special_mask": ~(in_a | in_b),
        "next_sentence_label": np.asarray(is_random_next, dtype=bool).astype(np.int64),
    }


def collate_pairs(pairs_a: Sequence[np.ndarray], pairs_b: Sequence[np.ndarray], is_random_next: Sequence[bool] | np.ndarray,
                  **options: int) -> dict[str, np.ndarray]:
    """`collate_segments` for pairs given as one id array (or list) per segment; `options` are its keyword
    arguments (cls_id, sep_id, pad_id, max_seq_len, pad_to_multiple_of)."""
    if len(pairs_a) == 0 or len(pairs_b) != len(pairs_a):
        raise ValueError(f"need a non-empty batch of equal lengths, got {len(pairs_a)}, {len(pairs_b)}, {len(is_random_next)}")
    flat = []
    for pairs in (pairs_a, pairs_b):
        lengths = np.fromiter((len(p) for p in pairs), dtype=np.int64, count=len(pairs))
        values = np.concatenate([np.asarray(p, dtype=np.int64) for p in pairs]) if lengths.sum() else np.zeros(1, np.int64)
        flat += [values, np.cumsum(lengths) - lengths, lengths]
    return collate_segments(*flat, is_random_next, **options)
