"""The benchmark batches of bench/train.py and bench/_contended.py: BERT pairs cut from a token stream, masked once,
with transformers' dense labels beside ours, and our model's loss on them.

In:  a token stream (ids), a count, a seeded generator. Out: `make_batches` → the batches; `ours_loss` → our model's
     MLM + NSP loss on one; the setup both benches share (SEQ_LEN, BATCH, VOCAB, THREADS, the special tokens).
"""

from __future__ import annotations

import numpy as np
import torch

from schemas.vocab import SPECIAL_TOKENS as VOCAB_SPECIALS
from trainer.data.collate import collate_pairs
from trainer.masking import Masker, MaskingConfig
from trainer.model import IGNORE_INDEX, BertForPretraining

SEQ_LEN, BATCH, VOCAB, THREADS = 128, 32, 8192, 2
MAX_PREDICTIONS = 20  # BERT's max_predictions_per_seq at seq 128
SHORT_SEQ_PROB = 0.1  # BERT's share of pairs with a shorter target length
SPECIAL_TOKENS = list(VOCAB_SPECIALS)  # ids 0..4, as the trained tokenizer lays them out

Batch = dict[str, torch.Tensor]


def _pair_lengths(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Token counts of segments A and B as BERT's instance builder makes them: target max_seq_len - 3, or with
    probability SHORT_SEQ_PROB a uniform shorter one; the A/B split uniform inside the target."""
    total = np.where(rng.random(count) < SHORT_SEQ_PROB, rng.integers(2, SEQ_LEN - 2, count), SEQ_LEN - 3)
    len_a = rng.integers(1, total)
    return len_a, total - len_a


def make_batches(stream: np.ndarray, count: int, rng: np.random.Generator, *, batch_size: int = BATCH,
                 vocab_size: int = VOCAB) -> list[Batch]:
    """`count` masked batches of `batch_size` pairs cut from `stream`: B follows A (label 0) or starts at a random
    offset (label 1, half the pairs). Each holds our inputs and transformers' dense `labels` (batch, seq) for the
    same masked tokens."""
    masker = Masker(MaskingConfig(strategy="bert", max_predictions=MAX_PREDICTIONS), vocab_size=vocab_size,
                    special_ids=range(len(SPECIAL_TOKENS)), mask_id=SPECIAL_TOKENS.index("[MASK]"))
    out = []
    for _ in range(count):
        len_a, len_b = _pair_lengths(rng, batch_size)
        random_next = rng.random(batch_size) < 0.5
        starts = rng.integers(0, stream.size - SEQ_LEN, batch_size)
        b_starts = np.where(random_next, rng.integers(0, stream.size - SEQ_LEN, batch_size), starts + len_a)
        arrays = collate_pairs([stream[s:s + n] for s, n in zip(starts, len_a)],
                               [stream[s:s + n] for s, n in zip(b_starts, len_b)], random_next,
                               cls_id=SPECIAL_TOKENS.index("[CLS]"), sep_id=SPECIAL_TOKENS.index("[SEP]"),
                               pad_id=SPECIAL_TOKENS.index("[PAD]"), max_seq_len=SEQ_LEN)
        arrays.update(masker(arrays["input_ids"], arrays.pop("special_mask"), rng))
        batch = {k: torch.from_numpy(v) for k, v in arrays.items()}
        labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)  # (batch, seq)
        real = batch["mlm_labels"] != IGNORE_INDEX  # (batch, P)
        rows = torch.arange(batch_size)[:, None].expand_as(real)
        labels[rows[real], batch["mlm_positions"][real]] = batch["mlm_labels"][real]
        batch["labels"] = labels
        out.append(batch)
    return out


def _encoder_inputs(b: Batch) -> Batch:
    return {k: b[k] for k in ("input_ids", "token_type_ids", "attention_mask")}


def ours_loss(model: BertForPretraining, b: Batch) -> torch.Tensor:
    return model(**_encoder_inputs(b), mlm_positions=b["mlm_positions"], mlm_labels=b["mlm_labels"],
                 next_sentence_label=b["next_sentence_label"])["loss"]
