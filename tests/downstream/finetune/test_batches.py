"""Fine-tuning's batches (downstream/finetune/loop.py, issue 47): one gather per tensor instead of a gather and a
contiguous copy, no copy of the final weights on a CPU, both leaving every score and loss exactly as they were;
--group-by-length's batches (every row once an epoch, fewer padded positions, the plain order untouched)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("sklearn")

from downstream.finetune import loop  # noqa: E402
from downstream.finetune.command import finetune_main  # noqa: E402
from downstream.finetune.loop import _batch, epoch_batches  # noqa: E402

from .finetune_assets import classify_rows, span_rows, tag_rows, tiny_export, write_jsonl  # noqa: E402


def _reference_batch(tensors, rows, lengths=None):
    """The gather before issue 47: rows, then the cut, then a contiguous copy of it."""
    length = int(tensors["attention_mask"][rows].sum(1).max())
    return {k: v[rows][:, :length].contiguous() if v.dim() == 2 else v[rows] for k, v in tensors.items()}


def _mixed(n: int = 40, width: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, width + 1, n)
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    ids = rng.integers(5, 100, (n, width)) * mask
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
            "labels": torch.from_numpy(np.where(mask == 1, rng.integers(0, 3, (n, width)), -100)),
            "row_label": torch.from_numpy(rng.integers(0, 2, n))}


def test_one_gather_gives_the_old_batches_contiguous():
    tensors = _mixed()
    lengths = tensors["attention_mask"].sum(1)
    for rows in (torch.tensor([3, 0, 17]), torch.tensor([5]), torch.arange(40)):
        old = _reference_batch(tensors, rows)
        for new in (_batch(tensors, rows), _batch(tensors, rows, lengths)):
            assert set(new) == set(old)
            for key in old:
                assert torch.equal(new[key], old[key]) and new[key].is_contiguous(), key
            new["labels"].view(-1)  # what transformers' token-classification loss does


def test_length_grouped_batches_hold_every_row_once_and_pad_less():
    rng = np.random.default_rng(3)
    lengths = rng.integers(8, 129, 1000)
    permutation = rng.permutation(1000)
    plain = epoch_batches(permutation, lengths, 32, None)
    assert [b.tolist() for b in plain] == [permutation[s:s + 32].tolist() for s in range(0, 1000, 32)]  # as before
    grouped = epoch_batches(permutation, lengths, 32, np.random.default_rng(7))
    assert len(grouped) == len(plain) == 32 and [len(b) for b in grouped] == [len(b) for b in plain]  # the short one last
    assert sorted(np.concatenate(grouped).tolist()) == list(range(1000))
    padded = {name: sum(len(b) * int(lengths[b].max()) for b in batches) for name, batches in (("plain", plain), ("grouped", grouped))}
    assert padded["grouped"] < 0.7 * padded["plain"]  # uniform 8..128: plain batches pad to ~125 each
    again = epoch_batches(permutation, lengths, 32, np.random.default_rng(7))
    assert [b.tolist() for b in again] == [b.tolist() for b in grouped]  # a function of the seed
    firsts = [int(lengths[b].max()) for b in grouped[:-1]]
    assert firsts != sorted(firsts, reverse=True)  # the batches are shuffled, not served longest first


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    return tiny_export(str(tmp_path_factory.mktemp("finetune-batches")))


def _results(out) -> dict:
    with open(os.path.join(out, "results.json")) as f:
        return json.load(f)


def _scores(results: dict) -> list:
    """Every run's validation and test points and its per-epoch history (losses included)."""
    return [(r["validation"], r.get("test"), r["history"]) for arm in results.values() if isinstance(arm, dict)
            for r in arm.get("runs", [])]


@pytest.mark.parametrize("task, rows", [("tag", tag_rows), ("classify", lambda: classify_rows(repeat=2))])
def test_scores_and_losses_are_exactly_the_old_loops(hf, tmp_path, monkeypatch, task, rows):
    """The same job with the old gather and the old final host copy, and with the new ones: results.json's scores,
    per-epoch losses and predictions identical (the tag task: per-token labels cut in every batch)."""
    data = write_jsonl(tmp_path / "d.jsonl", rows())

    def run(out: str) -> tuple[dict, str]:
        assert finetune_main([hf, "--task", task, "--train", data, "--validation", data, "--test", data, "--output", out,
                              "--seeds", "2", "--epochs", "2", "--lr", "1e-3", "--batch-size", "4"]) == 0
        with open(os.path.join(out, "predictions.jsonl")) as f:
            return _results(out), f.read()

    new = run(str(tmp_path / "new"))
    with monkeypatch.context() as m:
        m.setattr(loop, "_batch", _reference_batch)
        m.setattr(loop, "_final_state", loop._host_copy)
        old = run(str(tmp_path / "old"))
    assert _scores(new[0]) and _scores(new[0]) == _scores(old[0])
    assert new[1] == old[1]


def test_group_by_length_learns_the_separable_task_and_is_seeded(hf, tmp_path):
    data = write_jsonl(tmp_path / "c.jsonl", classify_rows(repeat=3))
    outs = []
    for name in ("a", "b"):
        out = str(tmp_path / name)
        assert finetune_main([hf, "--task", "classify", "--train", data, "--validation", data, "--output", out, "--seeds", "1",
                              "--epochs", "12", "--lr", "3e-3", "--batch-size", "8", "--group-by-length"]) == 0
        outs.append(_results(out))
    assert outs[0]["pretrained"]["mean"] > 50  # chance is 33, as test_finetune.py's plain loop
    assert _scores(outs[0]) == _scores(outs[1])


# -- a batch computed in pieces of similar length (issue 62) ----------------------------------------------------------

def _padded(pieces, lengths, overhead: int) -> int:
    return sum(overhead + len(p) * int(lengths[p].max()) for p in pieces)


def test_length_pieces_hold_the_batch_and_cut_it_where_it_pays():
    import itertools

    rng = np.random.default_rng(5)
    lengths = rng.integers(8, 129, 200)
    rows = rng.permutation(200)[:32]
    for overhead in (0, 64, 280, 10**9):
        pieces = loop.length_pieces(rows, lengths, overhead)
        assert sorted(np.concatenate(pieces).tolist()) == sorted(rows.tolist())  # every row once
        flat = np.concatenate(pieces)
        assert (np.diff(lengths[flat]) <= 0).all()  # longest first, so each piece is cut to its first row
    assert len(loop.length_pieces(rows, lengths, 10**9)) == 1  # costly pieces: the batch whole
    assert all(len(set(lengths[p].tolist())) == 1 for p in loop.length_pieces(rows, lengths, 0))  # free: no padding
    whole = _padded([rows], lengths, 280)
    assert _padded(loop.length_pieces(rows, lengths, 280), lengths, 280) < 0.85 * whole
    # the cheapest cut: against every cut of 9 sorted rows
    small = rows[:9]
    ordered = small[np.argsort(-lengths[small], kind="stable")]
    for overhead in (0, 20, 200, 2000):
        best = min(_padded(np.split(ordered, list(cuts)), lengths, overhead)
                   for k in range(9) for cuts in itertools.combinations(range(1, 9), k))
        assert _padded(loop.length_pieces(small, lengths, overhead), lengths, overhead) == best


@pytest.mark.parametrize("task, rows", [("classify", lambda: classify_rows(repeat=2)), ("tag", tag_rows), ("span", span_rows)])
def test_a_batch_in_pieces_takes_the_batch_step(hf, tmp_path, monkeypatch, task, rows):
    """Without dropout, a batch computed in pieces (every distinct length its own piece) and whole give the same
    losses and scores, to float rounding: the pieces' losses are weighted by what the head averages over (rows;
    labelled word pieces for tag), so their gradients sum to the batch's. Span batches stay whole: transformers'
    question-answering loss counts padded positions in its softmax."""
    data = write_jsonl(tmp_path / "d.jsonl", rows())

    def run(name: str, *extra: str) -> dict:
        out = str(tmp_path / name)
        assert finetune_main([hf, "--task", task, "--train", data, "--validation", data, "--output", out, "--seeds", "1",
                              "--epochs", "3", "--lr", "3e-3", "--batch-size", "4", "--dropout", "0", *extra]) == 0
        return _results(out)

    whole = run("whole", "--no-length-pieces")
    cuts = []
    real = loop.length_pieces
    monkeypatch.setattr(loop, "length_pieces", lambda rows, lengths, overhead: cuts.append(real(rows, lengths, 0)) or cuts[-1])
    pieces = run("pieces")
    if task == "span":
        assert cuts == [] and pieces["pretrained"]["runs"][0]["history"] == whole["pretrained"]["runs"][0]["history"]
        return
    assert max(len(c) for c in cuts) > 1  # the batches were computed in pieces
    (a,), (b,) = ([r["history"] for r in arm["runs"]] for arm in (whole["pretrained"], pieces["pretrained"]))
    assert [e["loss"] for e in a] == pytest.approx([e["loss"] for e in b], rel=1e-4)
    assert [e["score"] for e in a] == pytest.approx([e["score"] for e in b], abs=1e-6)
