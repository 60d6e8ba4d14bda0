"""Collation: rows of a pair shard → one padded batch, as its row format says (schemas/pairs.py; `ROW_COLLATORS`).

    nsp_pairs    segments A and B → `[CLS] A [SEP] B [SEP] [PAD]...`, token types 0 then 1, the NSP label
    packed_rows  one segment of whole sentences → `[CLS] tokens [SEP] [PAD]...` (`<s> ... </s> <pad>` with RoBERTa's
                 vocabulary), token types 0; a document separator inside the row is special (never masked); a row
                 that records where its documents start (pair format 4's `doc_starts`) also gets `documents`, each
                 token's document number in its row, and `position_ids` starting again at each document, so every
                 document is attended, and placed, as it would be alone (trainer/model/attention.py)
    tlm_pairs    a translation pair → `[CLS] A [SEP] B [SEP] [PAD]...` with `position_ids` starting again at B's first
                 token (XLM's TLM); both sides are masked

With `languages` (the model's, a family whose token types are languages: XLM's), a token's type is its language's
index there: a translation pair's side's, a packed row's `source` (prep --identify-languages names each row's
language so); a language the model does not have is a ValueError naming it.

In:  the segments as slices of flat id arrays (values + starts + lengths, which is how an Arrow list column stores
     them, so ShardStream hands over its record batches' buffers without a Python object per row:
     `gather_segments`), or as one array per pair (`collate_pairs`, for callers holding lists); the special ids by
     their role (the manifest's: [CLS]/[SEP]/[PAD] for WordPiece, <s>/</s>/<pad> for BPE and Unigram).
Out: numpy arrays, all (batch, seq) but the label (batch,): int64 `input_ids`, `token_type_ids` (and `position_ids`
     for tlm_pairs),
     `attention_mask`, `next_sentence_label` (1 when B is a random next, transformers' convention; 0 for packed
     rows, which BERT without NSP trains on at NSP weight 0), and bool `special_mask` (True at the special tokens
     and padding), which the Masker consumes. seq is the longest row of the batch (dynamic padding), rounded up to
     `pad_to_multiple_of`.

Every position is filled by whole-batch numpy indexing: no loop over pairs (`python bench/run.py loader`
measures it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa


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


def collate_single(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, *, cls_id: int, sep_id: int, pad_id: int,
                   max_seq_len: int, pad_to_multiple_of: int = 1, separator_id: int | None = None) -> dict[str, np.ndarray]:
    """Row i is values[starts[i] : starts[i] + lengths[i]], collated as `[CLS] row [SEP]` (see the module docstring).
    A row longer than `max_seq_len` with its two special tokens is an error: prep packed it to max_seq_len - 2."""
    length = np.asarray(lengths, np.int64)
    batch = len(length)
    if batch == 0:
        raise ValueError("need a non-empty batch")
    total = length + 2
    longest = int(total.max())
    if longest > max_seq_len:
        row = int(total.argmax())
        raise ValueError(f"row {row} of the batch has {longest} tokens with its two special tokens, max_seq_len is {max_seq_len}")
    seq = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    col = np.arange(seq)
    attention = col < total[:, None]  # (batch, seq)
    inside = (col > 0) & (col < (total - 1)[:, None])
    input_ids = np.full((batch, seq), pad_id, dtype=np.int64)
    input_ids[inside] = np.asarray(values)[(np.asarray(starts, np.int64)[:, None] - 1 + col)[inside]]
    input_ids[:, 0] = cls_id
    input_ids[np.arange(batch), total - 1] = sep_id
    special = ~inside
    if separator_id is not None:
        special |= input_ids == separator_id  # where two documents meet: never masked
    return {
        "input_ids": input_ids,
        "token_type_ids": np.zeros((batch, seq), dtype=np.int64),
        "attention_mask": attention.astype(np.int64),
        "special_mask": special,
        "next_sentence_label": np.zeros(batch, dtype=np.int64),
    }


def gather_segments(parts: list[tuple[pa.RecordBatch, np.ndarray]], column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, starts, lengths) of a list column over the given rows of record batches, for the collators.

    One batch: its own id buffer (zero-copy). Several: the rows taken from each (a copy of the batch's ids
    only, not of whole blocks: a length-bucketed batch gathers from a dozen blocks)."""
    if len(parts) == 1:
        batch, rows = parts[0]
        array = batch.column(column)
        offsets = array.offsets.to_numpy()
        return array.values.to_numpy(), offsets[rows].astype(np.int64), (offsets[rows + 1] - offsets[rows]).astype(np.int64)
    taken = pa.concat_arrays([batch.column(column).take(pa.array(rows)) for batch, rows in parts])
    offsets = taken.offsets.to_numpy().astype(np.int64)
    return taken.values.to_numpy(), offsets[:-1], np.diff(offsets)


def _language_ids(parts, column: str, languages: dict[str, int]) -> np.ndarray:
    """(batch,) the index in `languages` of each row's `column` (a language code)."""
    codes = np.concatenate([batch.column(column).to_numpy(zero_copy_only=False)[rows] for batch, rows in parts])
    unknown = sorted(set(codes) - set(languages))
    if unknown:
        raise ValueError(f"rows in {', '.join(map(str, unknown[:5]))}, not a language of the model ({', '.join(languages)})")
    return np.array([languages[c] for c in codes], dtype=np.int64)


def _nsp_batch(parts, manifest, pad_to_multiple_of: int, languages: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    nsp = np.concatenate([batch.column("is_random_next").to_numpy(zero_copy_only=False)[rows] for batch, rows in parts])
    return collate_segments(*gather_segments(parts, "tokens_a"), *gather_segments(parts, "tokens_b"), nsp,
                            cls_id=manifest.special_id("cls_token"), sep_id=manifest.special_id("sep_token"),
                            pad_id=manifest.special_id("pad_token"), max_seq_len=manifest.max_seq_len,
                            pad_to_multiple_of=pad_to_multiple_of)


def documents_of(parts, seq: int) -> np.ndarray | None:
    """(batch, seq) each token's document number in its row ([CLS] and the first document's tokens 0, the separator
    with the document it ends), from the rows' `doc_starts`; None when no row records a boundary (pair format 2's
    rows record none: attention spans the row, as before). Every batch of format 4 rows has them, boundaries or not,
    so the chunks of one step carry the same arrays (trainer/data/partitions.py merges them)."""
    if not all("doc_starts" in batch.schema.names for batch, _ in parts):
        return None
    values, starts, lengths = gather_segments(parts, "doc_starts")
    total = int(lengths.sum())
    within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)  # index inside each row's list
    offsets = np.asarray(values, np.int64)[np.repeat(starts, lengths) + within]
    marks = np.zeros((len(lengths), seq + 1), dtype=np.int64)
    np.add.at(marks, (np.repeat(np.arange(len(lengths)), lengths), offsets + 1), 1)  # + 1: the row's [CLS] comes first
    return np.cumsum(marks, axis=1)[:, :seq]


def _packed_batch(parts, manifest, pad_to_multiple_of: int, languages: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    arrays = collate_single(*gather_segments(parts, "tokens"), cls_id=manifest.special_id("cls_token"),
                            sep_id=manifest.special_id("sep_token"), pad_id=manifest.special_id("pad_token"),
                            max_seq_len=manifest.max_seq_len, pad_to_multiple_of=pad_to_multiple_of,
                            separator_id=manifest.separator_id)
    if languages:
        arrays["token_type_ids"] = _language_ids(parts, "source", languages)[:, None] * arrays["attention_mask"]
    documents = documents_of(parts, arrays["input_ids"].shape[1])
    if documents is not None:
        col = np.arange(documents.shape[1])
        first = np.maximum.accumulate(np.where(np.diff(documents, axis=1, prepend=0) > 0, col, 0), axis=1)
        arrays["documents"] = documents
        arrays["position_ids"] = (col - first) * arrays["attention_mask"]  # each document's own count from 0
    return arrays


def _tlm_batch(parts, manifest, pad_to_multiple_of: int, languages: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    rows = sum(len(r) for _, r in parts)  # next_sentence_label 0: a translation is its pair's next
    arrays = collate_segments(*gather_segments(parts, "tokens_a"), *gather_segments(parts, "tokens_b"), np.zeros(rows, bool),
                              cls_id=manifest.special_id("cls_token"), sep_id=manifest.special_id("sep_token"),
                              pad_id=manifest.special_id("pad_token"), max_seq_len=manifest.max_seq_len,
                              pad_to_multiple_of=pad_to_multiple_of)
    second = arrays["token_type_ids"].astype(bool)  # (batch, seq): B's tokens and its [SEP]
    starts = (~second & arrays["attention_mask"].astype(bool)).sum(axis=1)  # (batch,) where B starts: len(A) + 2
    col = np.arange(second.shape[1])
    arrays["position_ids"] = np.where(second, col - starts[:, None], col) * arrays["attention_mask"]
    if languages:
        a, b = _language_ids(parts, "language_a", languages), _language_ids(parts, "language_b", languages)
        arrays["token_type_ids"] = np.where(second, b[:, None], a[:, None]) * arrays["attention_mask"]
    return arrays


ROW_COLLATORS: dict[str, Callable] = {"nsp_pairs": _nsp_batch, "packed_rows": _packed_batch, "tlm_pairs": _tlm_batch}
"""How the rows of each row format (schemas/pairs.py) become a batch: (record batches and their rows, the
manifest, pad_to_multiple_of, the model's languages by index or None) → the arrays of the module docstring."""
