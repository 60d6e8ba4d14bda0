"""Row audit (--audit-rows): the identity of every pair a rank trains on, for checking exactly-once reading.

In:  masked micro batches as the trainer gets them (input_ids with the masks applied, mlm_positions and
     mlm_labels, attention_mask), with the optimizer step they belong to.
Out: RUN/rows-rank<r>.jsonl, appended: one line per micro batch, {"step", "micro", "rank", "world_size",
     "rows": [a 16-hex-digit blake2b digest of each pair's unmasked ids, [CLS] A [SEP] B [SEP]]}. The digests
     do not depend on the mask, so the lines of runs on different world sizes compare directly.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import torch

from trainer.heads import IGNORE_INDEX


def pair_digest(ids) -> str:
    """The digest of one pair's ids ([CLS] A [SEP] B [SEP]; any integer sequence or array)."""
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=8).hexdigest()


def row_digests(batch: dict[str, torch.Tensor]) -> list[str]:
    """The digest of each row's unmasked ids (the masked positions put back from the MLM labels), in the batch's
    row order (an unpadded batch's: longest first, trainer/data/batch_forms.py)."""
    ids = batch["input_ids"].numpy().copy()
    if "cu_seqlens" in batch:  # packed rows: (tokens,) ids, (N,) predictions at packed positions
        ids[batch["mlm_positions"].numpy()] = batch["mlm_labels"].numpy()
        cu = batch["cu_seqlens"].tolist()
        return [pair_digest(ids[a:b]) for a, b in zip(cu, cu[1:])]
    positions, labels = batch["mlm_positions"].numpy(), batch["mlm_labels"].numpy()
    rows, cols = np.nonzero(labels != IGNORE_INDEX)
    ids[rows, positions[rows, cols]] = labels[rows, cols]
    lengths = batch["attention_mask"].numpy().sum(axis=1)
    return [pair_digest(ids[r, :n]) for r, n in enumerate(lengths)]


class RowAudit:
    """Appends one JSON line per micro batch to RUN/rows-rank<r>.jsonl."""

    def __init__(self, run_dir: str, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.file = open(os.path.join(run_dir, f"rows-rank{rank}.jsonl"), "a")  # noqa: SIM115 (open for the run)

    def write(self, step: int, micro: int, batch: dict[str, torch.Tensor]) -> None:
        record = {"step": step, "micro": micro, "rank": self.rank, "world_size": self.world_size, "rows": row_digests(batch)}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> RowAudit:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
