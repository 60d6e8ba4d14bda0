"""ShardStream: every pair once per epoch across ranks × workers, equal batch counts, exact resume."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest
import torch

from schemas import ContractError, Manifest
from trainer.data import ShardStream, loader
from trainer.masking import Masker, MaskingConfig
from trainer.vocab_files import read_vocab_tokens


def masker_for(manifest: Manifest) -> Masker:
    tokens = read_vocab_tokens(manifest)
    specials = [i for i, t in enumerate(tokens) if t.startswith("[") and t.endswith("]")]
    return Masker(MaskingConfig(), vocab_size=len(tokens), special_ids=specials, mask_id=manifest.special_tokens["[MASK]"])


def pair_keys(batch: dict) -> list[tuple]:
    """An identity for each row of a batch: its unmasked ids are not in the batch, so use labels + positions."""
    ids = batch["input_ids"].clone()
    labels = batch["mlm_labels"]
    positions = batch["mlm_positions"]
    for row in range(ids.shape[0]):
        keep = labels[row] != -100
        ids[row, positions[row][keep]] = labels[row][keep]
    return [tuple(r[m.bool()].tolist()) for r, m in zip(ids, batch["attention_mask"])]


def all_rows(manifest: Manifest) -> Counter:
    import fsspec

    rows = Counter()
    s = manifest.special_tokens
    for shard in manifest.split_shards("train"):
        with fsspec.open(manifest.resolve(shard.path), "rb") as f:
            table = pa.ipc.open_file(pa.BufferReader(f.read())).read_all()
        for a, b in zip(table.column("tokens_a").to_pylist(), table.column("tokens_b").to_pylist()):
            rows[tuple([s["[CLS]"], *a, s["[SEP]"], *b, s["[SEP]"]])] += 1
    return rows


@pytest.fixture(scope="module")
def manifest(prepped) -> Manifest:
    return Manifest.read(os.path.join(prepped, "pairs"))


def epoch_batches(manifest, rank, world, workers, batch_size=16, seed=3):
    stream = ShardStream(manifest, split="train", batch_size=batch_size, masker=masker_for(manifest), seed=seed, rank=rank, world_size=world, epochs=1)
    return stream, list(loader(stream, workers))


def test_two_ranks_two_workers_read_every_pair_once(manifest):
    expected = all_rows(manifest)
    seen, counts = Counter(), []
    for rank in range(2):
        stream, batches = epoch_batches(manifest, rank, 2, 2)
        counts.append(len(batches))
        assert [tuple(b["position"].tolist()) for b in batches] == [(0, k) for k in range(stream.batches_per_epoch)]
        for b in batches:
            seen.update(pair_keys(b))
    assert counts[0] == counts[1]
    padding = sum(seen.values()) - sum(expected.values())
    assert padding == stream.padding < 2 * 16
    assert set(seen) == set(expected)  # every pair, nothing else
    assert sum(max(0, seen[k] - expected[k]) for k in seen) == padding  # only the pad rows repeat


def test_order_does_not_depend_on_worker_count(manifest):
    _, one = epoch_batches(manifest, 0, 1, 0)
    _, three = epoch_batches(manifest, 0, 1, 3)
    assert len(one) == len(three)
    for a, b in zip(one, three):
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["mlm_labels"], b["mlm_labels"])


def test_next_epoch_masks_afresh(manifest):
    stream = ShardStream(manifest, split="train", batch_size=16, masker=masker_for(manifest), seed=3, epochs=2)
    batches = list(loader(stream, 0))
    n = stream.batches_per_epoch
    first = Counter(map(tuple, (b["mlm_positions"].flatten().tolist() for b in batches[:n])))
    second = Counter(map(tuple, (b["mlm_positions"].flatten().tolist() for b in batches[n:])))
    assert first != second
    assert set(pair_keys_all(batches[:n])) == set(pair_keys_all(batches[n:]))  # same pairs (the pad rows differ)


def pair_keys_all(batches):
    return [k for b in batches for k in pair_keys(b)]


@pytest.mark.parametrize("workers_before, workers_after", [(0, 0), (2, 1), (1, 3)])
def test_resume_continues_with_the_next_batch(manifest, workers_before, workers_after):
    masker = masker_for(manifest)
    full = ShardStream(manifest, split="train", batch_size=8, masker=masker, seed=5, epochs=2)
    reference = list(loader(full, 0))
    cut = full.batches_per_epoch + 3  # stop inside the second epoch
    first = ShardStream(manifest, split="train", batch_size=8, masker=masker, seed=5, epochs=2)
    it = iter(loader(first, workers_before))
    consumed = [next(it) for _ in range(cut)]
    epoch, k = consumed[-1]["position"].tolist()
    state = first.state_dict(epoch, k + 1)
    resumed = ShardStream(manifest, split="train", batch_size=8, masker=masker, seed=5, epochs=2)
    resumed.load_state_dict(state)
    rest = list(loader(resumed, workers_after))
    assert len(consumed) + len(rest) == len(reference)
    for a, b in zip(consumed + rest, reference):
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["position"], b["position"])


def test_state_from_another_layout_is_refused(manifest):
    stream = ShardStream(manifest, split="train", batch_size=8, masker=masker_for(manifest), seed=5)
    state = stream.state_dict(0, 3)
    other = ShardStream(manifest, split="train", batch_size=8, masker=masker_for(manifest), seed=5, rank=0, world_size=2)
    with pytest.raises(ContractError, match="world_size=1.*this run has 2"):
        other.load_state_dict(state)
    with pytest.raises(ContractError, match="version"):
        stream.load_state_dict({**state, "version": 99})


def test_corrupt_shard_is_detected(manifest, tmp_path):
    import shutil

    pairs = tmp_path / "pairs"
    shutil.copytree(os.path.dirname(manifest.url), pairs)
    shutil.copytree(os.path.join(os.path.dirname(os.path.dirname(manifest.url)), "vocab"), tmp_path / "vocab")
    victim = pairs / manifest.split_shards("train")[0].path
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    copy = Manifest.read(str(pairs))
    stream = ShardStream(copy, split="train", batch_size=8, masker=masker_for(copy), seed=1, epochs=1)
    with pytest.raises(ContractError, match="sha256 mismatch"):
        list(loader(stream, 0))


def test_a_split_smaller_than_one_global_batch_still_fills_every_rank(manifest):
    rows = manifest.splits["validation"]
    batch = rows  # world 3 x batch rows: the split covers a third of one global batch
    seen = []
    for rank in range(3):
        stream = ShardStream(manifest, split="validation", batch_size=batch, masker=masker_for(manifest), seed=0, rank=rank, world_size=3, epochs=1)
        batches = list(loader(stream, 0))
        assert len(batches) == 1 and batches[0]["input_ids"].shape[0] == batch
        seen += pair_keys(batches[0])
    assert len(set(seen)) == rows and stream.padding == 2 * rows
