"""Per-document attention in packed rows (issue 61): a row of pair format 4 records where its later documents start;
the collator numbers each token's document and starts the positions again at each; every network that trains on
packed rows then gives each document of a two-document row the logits the document gets alone (within 1e-5), in the
padded form (a block-diagonal mask) and the unpadded one (a cu_seqlens segment a document). A row of pair format 2
(no boundaries) collates as before."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
import torch

from schemas.pairs import PACKED_ROWS
from trainer.data.batch_forms import unpadded
from trainer.data.collate import ROW_COLLATORS
from trainer.heads import IGNORE_INDEX
from trainer.model import ModelConfig, build

CLS, SEP, PAD = 0, 2, 1
DOC_A, DOC_B = [11, 12, 13, 14, 15, 16, 17, 18, 19], [21, 22, 23, 24, 25, 26]
SPECIALS = {"cls_token": CLS, "sep_token": SEP, "pad_token": PAD}
MANIFEST = SimpleNamespace(special_id=SPECIALS.__getitem__, max_seq_len=64, separator_id=SEP)


def _rows(version: int = 4) -> pa.RecordBatch:
    """Row 0: document A, the separator, document B (the two documents); row 1: B alone, shorter."""
    row = [*DOC_A, SEP, *DOC_B]
    body = {"tokens": [row, DOC_B], "num_tokens": [len(row) + 2, len(DOC_B) + 2], "source": ["s", "s"], "doc_id": ["a", "b"]}
    if version == 4:
        body["doc_starts"] = [[len(DOC_A) + 1], []]
    return pa.table(body, schema=PACKED_ROWS.schema(100, version)).to_batches()[0]


def _collated(version: int = 4) -> dict[str, np.ndarray]:
    return ROW_COLLATORS[PACKED_ROWS.kind]([(_rows(version), np.arange(2))], MANIFEST, 1)


def test_the_collator_numbers_documents_and_restarts_their_positions():
    arrays = _collated()
    split = len(DOC_A) + 2  # [CLS] A [SEP]: document 0
    assert arrays["documents"][0].tolist() == [0] * split + [1] * (len(DOC_B) + 1)
    assert arrays["position_ids"][0].tolist() == list(range(split)) + list(range(len(DOC_B) + 1))
    assert arrays["documents"][1, : len(DOC_B) + 2].tolist() == [0] * (len(DOC_B) + 2)
    assert arrays["position_ids"][1].tolist() == list(range(len(DOC_B) + 2)) + [0] * (arrays["input_ids"].shape[1] - len(DOC_B) - 2)
    old = _collated(version=2)  # a shard from before boundaries were recorded: one attention span a row, as before
    assert "documents" not in old and "position_ids" not in old
    assert (old["input_ids"] == arrays["input_ids"]).all()


def _model(family: str):
    config = ModelConfig.preset("tiny", vocab_size=100, family=family, pad_token_id=PAD, num_layers=3, hidden_dropout=0.0,
                                attention_dropout=0.0, **({"local_window": 6} if family == "modernbert" else {}))
    model = build(config, seed=5).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    return model


def _alone(model, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids])
    with torch.no_grad():
        return model.dense_mlm_logits(model.encode(x, torch.zeros_like(x), None)[0])[0]


@pytest.mark.parametrize("family", ["bert", "roberta", "modernbert"])
def test_each_document_of_a_packed_row_gets_the_logits_it_gets_alone_in_both_batch_forms(family):
    model = _model(family)
    arrays = _collated()
    row = arrays["input_ids"][0].tolist()
    split = len(DOC_A) + 2
    first, second = row[:split], row[split : split + len(DOC_B) + 1]  # [CLS] A [SEP] | B [SEP]
    alone = torch.cat([_alone(model, first), _alone(model, second)])  # (17, vocab)
    t = {k: torch.from_numpy(v) for k, v in arrays.items() if k not in ("special_mask", "next_sentence_label")}
    real = t["attention_mask"][0].bool()
    with torch.no_grad():
        padded = model.dense_mlm_logits(model.encode(**t)[0])[0][real]
    arrays["mlm_positions"] = np.zeros((2, 1), np.int64)
    arrays["mlm_labels"] = np.full((2, 1), IGNORE_INDEX, np.int64)
    packed = unpadded(arrays, max_seq_len=64, predictions=None, pad_id=PAD)
    assert packed["cu_seqlens"].tolist() == [0, split, split + len(DOC_B) + 1, split + 2 * (len(DOC_B) + 1) + 1]
    p = {k: torch.from_numpy(np.ascontiguousarray(packed[k])) for k in ("input_ids", "token_type_ids", "cu_seqlens",
                                                                          "position_ids", "row_starts")}
    with torch.no_grad():
        tokens = model.dense_mlm_logits(model.encode(**p)[0])[: split + len(DOC_B) + 1]  # row 0 sorts first: the longest
    print(f"{family}: |padded - alone| {(padded - alone).abs().max():.2e}, |unpadded - alone| {(tokens - alone).abs().max():.2e}")
    assert (padded - alone).abs().max().item() <= 1e-5
    assert (tokens - alone).abs().max().item() <= 1e-5
    # without the boundaries (pair format 2), the first document's tokens see the second: the logits differ
    crossing = {k: torch.from_numpy(v) for k, v in _collated(2).items() if k not in ("special_mask", "next_sentence_label")}
    with torch.no_grad():
        whole = model.dense_mlm_logits(model.encode(**crossing)[0])[0][: split]
    assert (whole - alone[:split]).abs().max().item() > 1e-4
