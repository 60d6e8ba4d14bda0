"""Canonical partitions: the rows (and masks) of every global step are the same on any world size that divides
the partition count, a data position saved on one world size resumes exactly on another, and what cannot fit
is refused in one line. In-process, no DeepSpeed: ShardStreams built as ranks 0..W-1 of W would build them."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from schemas import ContractError, Manifest
from tests.helpers import masker_for
from trainer.data import ShardStream, loader
from trainer.data.partitions import default_partitions, plan

GLOBAL, PARTITIONS, SEED = 16, 4, 9


@pytest.fixture(scope="module")
def manifest(prepped) -> Manifest:
    return Manifest.read(os.path.join(prepped, "pairs"))


def streams(manifest, world, micro, **options):
    return [ShardStream(manifest, split="train", batch_size=micro, masker=masker_for(manifest), seed=SEED, rank=r, world_size=world,
                        global_batch=GLOBAL, partitions=PARTITIONS, **options) for r in range(world)]


def masked_rows(batch) -> list[tuple]:
    """Each row as the model sees it: its masked ids and its MLM targets (so equal rows mean equal masks too)."""
    out = []
    for ids, att, pos, lab in zip(batch["input_ids"], batch["attention_mask"], batch["mlm_positions"], batch["mlm_labels"]):
        keep = lab != -100
        out.append((tuple(ids[att.bool()].tolist()), tuple(pos[keep].tolist()), tuple(lab[keep].tolist())))
    return out


def steps_of(ranks, first_step=0, last_step=None, workers=0) -> list[Counter]:
    """Per global step from `first_step`, the multiset of masked rows over all ranks and micro batches."""
    out: dict[int, Counter] = {}
    for stream in ranks:
        accum = stream.grad_accum
        stop = stream.steps_per_epoch if last_step is None else last_step
        stream.epochs = 1
        for batch in loader(stream, workers):
            _, i = batch["position"].tolist()
            step = i // accum
            if step >= stop:
                break
            assert batch["input_ids"].shape[0] == stream.batch_size
            out.setdefault(step, Counter()).update(masked_rows(batch))
    return [out[k] for k in sorted(out) if k >= first_step]


@pytest.mark.parametrize("options", [{}, {"length_buckets": 3, "shuffle_window": 1}])
def test_every_world_size_dividing_the_partitions_draws_the_same_steps(manifest, options):
    reference = steps_of(streams(manifest, 1, GLOBAL, **options))
    assert len(reference) == streams(manifest, 1, GLOBAL)[0].steps_per_epoch > 3
    assert all(sum(step.values()) == GLOBAL for step in reference)
    # 2 ranks of 2 partitions (micro 4: 2 micro batches per step, each cut from two partitions' chunks);
    # 4 ranks of one partition (micro 2: a chunk of 4 rows cut in two); 1 rank, micro 16 / 3 -> 4
    for world, micro, workers in ((2, 4, 2), (4, 2, 0), (1, 5, 1)):
        got = steps_of(streams(manifest, world, micro, **options), workers=workers)
        assert got == reference, (world, micro)


def test_a_position_saved_on_two_ranks_resumes_on_one_and_on_four(manifest):
    reference = steps_of(streams(manifest, 1, GLOBAL))
    cut = 3
    two = streams(manifest, 2, 4)
    before = steps_of(two, last_step=cut)
    state = two[0].state_dict(0, cut * two[0].grad_accum)  # saved at the step boundary after step cut - 1
    assert state["next_step"] == cut and state["next_micro"] == 0
    one = streams(manifest, 1, 16)
    one[0].load_state_dict(state)
    middle = steps_of(one, last_step=cut + 2)
    four = streams(manifest, 4, 2)
    for stream in four:
        stream.load_state_dict(one[0].state_dict(0, (cut + 2) * one[0].grad_accum))
    after = steps_of(four)
    assert before + middle + after == reference
    seen = sum(reference, Counter())
    assert sum(seen.values()) == manifest.splits["train"] + two[0].padding  # every row once, plus the pad rows


def test_what_does_not_fit_is_refused_in_one_line(manifest):
    with pytest.raises(ValueError, match="3 ranks cannot share the run's 4 data partitions evenly; .*\\(1, 2, 4\\)"):
        streams(manifest, 3, 4)
    with pytest.raises(ValueError, match="--global-batch-size 16 is not a multiple of --partitions 5"):
        plan(16, 5, 1, 16)
    state = streams(manifest, 2, 4)[0].state_dict(0, 2)
    with pytest.raises(ContractError, match="inside a step of 2 micro batches, this run takes 1"):
        streams(manifest, 1, 16)[0].load_state_dict({**state, "next_micro": 1})
    other = ShardStream(manifest, split="train", batch_size=8, masker=masker_for(manifest), seed=SEED, global_batch=GLOBAL, partitions=8)
    with pytest.raises(ContractError, match="checkpoint has partitions=4, this run has 8"):
        other.load_state_dict(state)
    with pytest.raises(ContractError, match="data state version 2, this trainer reads 3"):
        other.load_state_dict({**state, "version": 2})


def test_plan_derives_micro_batches_and_default_partitions():
    # the most partitions up to 64 that divide the global batch, that W divides, with chunks of >= 16 pairs ...
    assert default_partitions(2048, 8) == 64 and default_partitions(256, 8) == 16 and default_partitions(96, 3) == 6
    assert default_partitions(48, 1) == 3
    assert default_partitions(16, 2) == 2 and default_partitions(24, 4) == 4  # ... or the fewest that fit
    b = plan(256, 64, 8, 12)  # 32 rows a rank: micro batch 8 (the largest divisor <= 12), 4 steps accumulated
    assert (b.micro_batch, b.grad_accum, b.chunk, list(b.rank_partitions(1))) == (8, 4, 4, list(range(8, 16)))
    with pytest.raises(ValueError, match="no partition count fits a global batch of 10 on 4 ranks"):
        default_partitions(10, 4)
