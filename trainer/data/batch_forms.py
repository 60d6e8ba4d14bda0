"""The shape a masked micro batch reaches the model in: `train --batch-form`, one row a form (`FORMS`).

In:  a masked micro batch as collate + masking + merge_chunks make it: (batch, seq) `input_ids`, `token_type_ids`,
     `attention_mask` with each row's tokens first and seq its longest row; (batch, P) per-prediction tensors of the
     heads (trainer/heads.py: MLM's `mlm_positions`, `mlm_labels`, and SpanBERT's `sbo_*`), each head's fill in unused
     slots, P the most predictions of a row; `next_sentence_label` (batch,).
Out: the same rows and masks in the form's shape:

    padded    as it comes: padded to its longest row (dynamic padding), P its most predictions
    static    every batch (batch, max_seq_len) and (batch, predictions): one shape for the whole run, what CUDA graphs
              (torch.compile mode="reduce-overhead") need; `predictions` also caps the masker (NVIDIA's BERT: 20 at 128)
    unpadded  rows packed: the real tokens of every row concatenated, (tokens,) `input_ids`, `token_type_ids` and
              `position_ids` (a token's place in its row, or the batch's own: TLM's, per-document rows'), `cu_seqlens` (batch + 1,)
              int32 where each row starts, no `attention_mask`; the predictions (N,) real ones only, their positions
              counted in the packed tokens. Rows with `documents` (packed rows that record them) get one cu_seqlens
              segment per document instead, and `row_starts` (batch,), where each row starts (what the pooler reads)

Unpadded rows are sorted longest first (stable), their NSP labels with them, so rows of one length are neighbours
(trainer/model/attention.py attends each such run in one call); a micro batch's loss is a mean over its rows and
predictions, so their order changes nothing but the order of a sum.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from trainer.config import BATCH_FORMS
from trainer.heads import IGNORE_INDEX, prediction_targets

_SEQ_FILL = {"attention_mask": 0, "token_type_ids": 0, "position_ids": 0, "documents": 0}


def default_predictions(mask_prob: float, max_seq_len: int) -> int:
    """Prediction slots a static row holds: mask_prob x max_seq_len rounded up to a multiple of 4, NVIDIA's BERT's
    max_predictions_per_seq (20 at 128 and 80 at 512 for 15%); BERT's budget rule never selects more there."""
    return max(4, -(-math.ceil(mask_prob * max_seq_len) // 4) * 4)


def padded(arrays: dict[str, np.ndarray], *, max_seq_len: int, predictions: int | None, pad_id: int) -> dict[str, np.ndarray]:
    return arrays


def static(arrays: dict[str, np.ndarray], *, max_seq_len: int, predictions: int | None, pad_id: int) -> dict[str, np.ndarray]:
    """Every (batch, seq) array to max_seq_len and every (batch, P) array to `predictions` columns."""
    out, targets = {}, prediction_targets()
    for key, value in arrays.items():
        if value.ndim != 2:
            out[key] = value
            continue
        width, fill = (predictions, targets[key].fill) if key in targets else (max_seq_len, _SEQ_FILL.get(key, pad_id))
        if value.shape[1] > width:
            raise ValueError(f"a static batch holds {width} columns of {key}, this one has {value.shape[1]}")
        grown = np.full((value.shape[0], width), fill, dtype=value.dtype)
        grown[:, : value.shape[1]] = value
        out[key] = grown
    return out


def unpadded(arrays: dict[str, np.ndarray], *, max_seq_len: int, predictions: int | None, pad_id: int) -> dict[str, np.ndarray]:
    """The rows packed (see the module docstring)."""
    lengths = arrays["attention_mask"].sum(axis=1)  # (batch,)
    order = np.argsort(-lengths, kind="stable")
    real = arrays["attention_mask"][order].astype(bool)  # (batch, seq), each row's tokens first
    cu = np.zeros(len(order) + 1, dtype=np.int32)
    np.cumsum(lengths[order], out=cu[1:])
    out = {"cu_seqlens": cu, "input_ids": arrays["input_ids"][order][real], "token_type_ids": arrays["token_type_ids"][order][real],
           "position_ids": (arrays["position_ids"][order] if "position_ids" in arrays  # TLM's, restarting at B
                            else np.broadcast_to(np.arange(real.shape[1]), real.shape))[real]}
    row_starts = cu[:-1].astype(np.int64)
    if "documents" in arrays:  # a segment per document: where the (row, document) pair changes along the tokens
        rows_of = np.repeat(np.arange(len(order)), lengths[order])
        documents = arrays["documents"][order][real]
        new = np.ones(len(documents), dtype=bool)
        new[1:] = (rows_of[1:] != rows_of[:-1]) | (documents[1:] != documents[:-1])
        out["cu_seqlens"] = np.append(np.flatnonzero(new), len(documents)).astype(np.int32)
        out["row_starts"] = row_starts
    labelled = arrays["mlm_labels"][order] != IGNORE_INDEX  # (batch, P)
    rows, _ = np.nonzero(labelled)
    start = row_starts[rows]  # (N,) where each prediction's row starts in the packed tokens
    for key, target in prediction_targets().items():
        if key in arrays:
            values = arrays[key][order][labelled]
            out[key] = start + values if target.position else values
    for key, value in arrays.items():
        if key not in out and key not in ("attention_mask", "documents"):
            out[key] = value[order]  # (batch,): the NSP labels
    return out


@dataclasses.dataclass(frozen=True)
class BatchForm:
    name: str
    shape: Callable[..., dict[str, np.ndarray]]
    """(the masked micro batch; max_seq_len, predictions, pad_id) -> the batch in this form."""
    fixed_predictions: bool
    """Its rows hold a fixed number of prediction slots, which caps the masker (MaskingConfig.max_predictions)."""
    packed: bool
    """Its rows are packed (cu_seqlens), not padded."""


FORMS: dict[str, BatchForm] = {f.name: f for f in (
    BatchForm("padded", padded, fixed_predictions=False, packed=False),
    BatchForm("unpadded", unpadded, fixed_predictions=False, packed=True),
    BatchForm("static", static, fixed_predictions=True, packed=False),
)}
"""Every form by its --batch-form name (trainer/config.py's BATCH_FORMS, the flag's choices, in the same order)."""
if tuple(FORMS) != BATCH_FORMS:
    raise ImportError(f"trainer/config.py's BATCH_FORMS {BATCH_FORMS} are not the forms {tuple(FORMS)}")


_TOKEN_KEYS = ("input_ids", "token_type_ids", "position_ids")


def rows_of(batch) -> int:
    """The rows of a host batch in any form."""
    if "cu_seqlens" in batch:
        return len(batch["row_starts"]) if "row_starts" in batch else len(batch["cu_seqlens"]) - 1
    return len(batch["input_ids"])


def first_rows(host, keep: int) -> Callable[[dict], dict]:
    """A cut of a batch to its first `keep` rows (batch-size warmup, trainer/builders.py batch_share), worked out on the
    host batch (numpy) and applicable to it and to its device copy alike, so nothing waits for the device. An unpadded
    batch's rows are contiguous in its tokens and its predictions are in row order: each cut is a prefix."""
    if "cu_seqlens" not in host:
        return lambda batch: {k: v[:keep] for k, v in batch.items()}
    starts = host["row_starts"] if "row_starts" in host else host["cu_seqlens"][:-1]
    tokens = int(host["cu_seqlens"][-1]) if keep >= len(starts) else int(starts[keep])
    segments = int(np.searchsorted(host["cu_seqlens"], tokens)) + 1
    predictions = int((host["mlm_positions"] < tokens).sum())
    targets = prediction_targets()

    def cut(batch: dict) -> dict:
        return {k: v[:segments] if k == "cu_seqlens" else v[:tokens] if k in _TOKEN_KEYS else
                v[:predictions] if k in targets else v[:keep] for k, v in batch.items()}

    return cut


def real_tokens(batch) -> int:
    """The real (non-padding) tokens of a host batch in any form (numpy arrays or CPU tensors)."""
    if "cu_seqlens" in batch:
        return int(batch["cu_seqlens"][-1])
    return int(batch["attention_mask"].sum())
