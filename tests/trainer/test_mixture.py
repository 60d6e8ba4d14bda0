"""MixtureStream: choice frequencies, temperature formula, determinism, source filters read once, exact resume."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
import torch

from schemas import ContractError, Manifest
from tests.helpers import masker_for, row_keys, run_cli, train_rows
from trainer.data import ShardStream, loader
from trainer.data.choice import CHOICE_CHUNK, ChoiceSequence
from trainer.data.mixture import MixtureStream, component_seed
from trainer.data.mixture_config import (
    ComponentSpec,
    MixtureConfig,
    temperature_probabilities,
)

BATCH = 8


# -- the choice sequence and the probabilities (no data) ----------------------------------------------------
def test_temperature_probabilities_follow_n_to_the_alpha():
    rows = [100, 400, 1600]
    assert np.allclose(temperature_probabilities(rows, 1.0), np.array(rows) / 2100)  # proportional
    assert np.allclose(temperature_probabilities(rows, 0.0), 1 / 3)  # uniform
    assert np.allclose(temperature_probabilities(rows, 0.5), np.array([10, 20, 40]) / 70)  # sqrt: 10, 20, 40
    p = temperature_probabilities(rows, 0.7)
    assert math.isclose(p[2] / p[0], 16**0.7) and math.isclose(p.sum(), 1.0)
    assert p[0] > rows[0] / 2100  # alpha < 1 lifts the small component above its share of rows
    with pytest.raises(ValueError, match="positive row counts"):
        temperature_probabilities([10, 0], 0.7)


def test_config_validation_and_flag_syntax():
    with pytest.raises(ValueError, match="give every component a weight"):
        MixtureConfig(components=(ComponentSpec(data="x/pairs", weight=1.0), ComponentSpec(data="y/pairs")))
    with pytest.raises(ValueError, match="exclude each other"):
        MixtureConfig(components=(ComponentSpec(data="x/pairs", weight=1.0),), alpha=0.7)
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        MixtureConfig(components=(ComponentSpec(data="x/pairs"),), alpha=-1)
    with pytest.raises(ValueError, match="unique"):
        MixtureConfig(components=(ComponentSpec(data="r/wiki/pairs"), ComponentSpec(data="s/wiki/pairs")), alpha=1)
    spec = ComponentSpec.parse("web=gs://bucket/run-1/pairs,source=cc,weight=2.5")
    assert (spec.name, spec.data, spec.source, spec.weight) == ("web", "gs://bucket/run-1/pairs", "cc", 2.5)
    assert ComponentSpec.parse("s3://b/k=v/wiki/pairs").label == "wiki"  # '=' inside a URL is not a name
    with pytest.raises(ValueError, match="unknown option"):
        ComponentSpec.parse("x/pairs,wieght=2")
    config = MixtureConfig(components=(spec, ComponentSpec(data="/d/books/pairs", weight=1.0)))
    assert MixtureConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="weight must be"):
        MixtureConfig.from_dict({**config.to_dict(), "alpha": None, "components": [{"data": "x", "weight": 0}]})
    with pytest.raises(ValueError, match="unknown keys.*temperature"):
        MixtureConfig.from_dict({**config.to_dict(), "temperature": 1})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_choice_frequencies_match_the_probabilities(seed):
    p = np.array([0.55, 0.3, 0.1, 0.05])
    n = 20_000  # five chunks; at 2,000 draws the bound below is +-0.044 for p = 0.55, too loose to see a 3-point bias
    freq = np.bincount(ChoiceSequence(p, seed).choices(0, n), minlength=len(p)) / n
    # 4 standard deviations of a binomial share (+-0.014 for p = 0.55): a correct sampler fails it with p < 1e-4
    bound = 4 * np.sqrt(p * (1 - p) / n)
    assert (np.abs(freq - p) <= bound).all(), (freq, p, bound)


def test_choice_sequence_is_a_function_of_seed_and_step():
    p = [0.5, 0.3, 0.2]
    full = ChoiceSequence(p, 7).choices(0, 3 * CHOICE_CHUNK + 200)  # (steps,)
    for j in (0, 1, CHOICE_CHUNK - 1, CHOICE_CHUNK, 2 * CHOICE_CHUNK + 5, 3 * CHOICE_CHUNK + 99):
        fresh = ChoiceSequence(p, 7)  # no state carried over from the steps before j
        c = int(full[j])
        assert fresh.locate(j) == (c, int((full[:j] == c).sum()))
        assert fresh.drawn_before(j).tolist() == np.bincount(full[:j], minlength=3).tolist()
        assert fresh.choices(j, j + 50).tolist() == full[j : j + 50].tolist()
    other = ChoiceSequence(p, 8).choices(0, len(full))
    assert (other == full).mean() < 0.5  # a different seed is a different sequence (chance agreement 0.38)


# -- real data: two tiny prep runs sharing one vocabulary -----------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    """Run `ab` (inputs a and b, vocabulary learned there) and run `c` (prepped with ab's vocabulary)."""
    from pipelines.documents.builtin_corpus import iter_documents

    root = tmp_path_factory.mktemp("mixture")
    docs = list(iter_documents(max_bytes=300_000))
    half = len(docs) // 2
    for name, part in (("a", docs[:half:2]), ("b", docs[1:half:2]), ("c", docs[half:])):
        with open(root / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(d) + "\n" for d in part)
    common = ["--validation-fraction", "0.1", "--rows-per-shard", "200", "--batch-rows", "32"]
    first = run_cli("prep", "--input", f"a={root}/a.jsonl", "--input", f"b={root}/b.jsonl", "--output", f"{root}/ab",
                    "--vocab-size", "600", *common)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_cli("prep", "--input", f"c={root}/c.jsonl", "--vocab", f"{root}/ab/vocab", "--output", f"{root}/c", *common)
    assert second.returncode == 0, second.stderr[-3000:]
    return {"ab": f"{root}/ab/pairs", "c": f"{root}/c/pairs"}


def mixture(runs, *, alpha=None, weights=None, seed=11, **kwargs) -> MixtureStream:
    specs = [ComponentSpec(data=runs["c"], name="c"), ComponentSpec(data=runs["ab"], source="a"), ComponentSpec(data=runs["ab"], source="b")]
    if weights:
        specs = [ComponentSpec(data=s.data, source=s.source, name=s.name, weight=w) for s, w in zip(specs, weights)]
    masker = masker_for(Manifest.read(runs["c"]))
    return MixtureStream(MixtureConfig(components=tuple(specs), alpha=alpha), split="train", batch_size=BATCH, masker=masker, seed=seed, **kwargs)


@pytest.mark.integration
def test_end_to_end_components_follow_their_own_streams(runs):
    stream = mixture(runs, weights=[3.0, 1.0, 0.5])
    # enough steps to take component c into its second epoch and through one epoch of component a
    need = np.array([stream.components[0].batches_per_epoch + 3, stream.components[1].batches_per_epoch, 0])
    stream.steps = steps = next(j for j in range(100, 10_000, 10) if (stream.choice.drawn_before(j) >= need).all())
    described = json.loads(json.dumps(stream.describe()))  # JSON-ready, as the run config stores it
    assert [c["name"] for c in described["components"]] == ["c", "a", "b"]
    assert np.allclose([c["probability"] for c in described["components"]], np.array([3.0, 1.0, 0.5]) / 4.5)
    assert described["components"][0]["rows"] == Manifest.read(runs["c"]).splits["train"]
    batches = list(loader(stream, 2))
    assert [b["position"][1].item() for b in batches] == list(range(steps))
    per = {0: [], 1: [], 2: []}
    for j, b in enumerate(batches):
        per[stream.locate(j)[0]].append(b)
    # component c (a whole prep run) gives exactly ShardStream's batches, masks included, into its second epoch
    reference = ShardStream(Manifest.read(runs["c"]), split="train", batch_size=BATCH, masker=masker_for(Manifest.read(runs["c"])),
                            seed=component_seed(11, 0), epochs=2)
    assert len(per[0]) > reference.batches_per_epoch, "the test should cross an epoch of component c"
    for got, want in zip(per[0], list(loader(reference, 0))):
        assert torch.equal(got["input_ids"], want["input_ids"]) and torch.equal(got["mlm_labels"], want["mlm_labels"])
        assert got["position"][0] == want["position"][0]
    # component a (one named input of run ab): its first epoch is every row of a once, plus its padding
    a_stream = stream.components[1]
    assert len(per[1]) >= a_stream.batches_per_epoch
    seen = Counter(k for b in per[1][: a_stream.batches_per_epoch] for k in row_keys(b))
    expected = train_rows(runs["ab"], "a")
    assert set(seen) == set(expected) and sum(seen.values()) - sum(expected.values()) == a_stream.padding
    assert all(set(row_keys(b)) <= set(train_rows(runs["ab"], "b")) for b in per[2])


def test_source_component_reads_each_row_once_across_ranks(runs):
    manifest = Manifest.read(runs["ab"])
    manifest_rows = sum(s.source_rows.get("b", 0) for s in manifest.split_shards("train"))
    config = MixtureConfig(components=(ComponentSpec(data=runs["ab"], source="b", weight=1.0),))
    seen, counts = Counter(), []
    for rank in range(2):
        stream = MixtureStream(config, split="train", batch_size=BATCH, masker=masker_for(manifest), seed=4, rank=rank, world_size=2)
        b_stream = stream.components[0]
        assert b_stream.rows == manifest_rows and b_stream.batches_per_epoch == math.ceil(manifest_rows / (2 * BATCH))
        stream.steps = b_stream.batches_per_epoch
        batches = list(loader(stream, 0))
        assert all(b["input_ids"].shape[0] == BATCH for b in batches)  # full batches although blocks mix sources
        counts.append(len(batches))
        seen.update(k for b in batches for k in row_keys(b))
    expected = train_rows(runs["ab"], "b")
    assert counts[0] == counts[1] and set(seen) == set(expected)  # nothing of source a, every row of b
    assert sum(seen.values()) - sum(expected.values()) == b_stream.padding < 2 * BATCH


@pytest.mark.parametrize("workers_before, workers_after", [(0, 2), (2, 1), (1, 3)])
def test_resume_gives_the_uninterrupted_sequence(runs, workers_before, workers_after):
    first = mixture(runs, alpha=0.0)
    cut = 23
    # run until a component has started its second epoch after the cut, and a few steps more
    steps = 5 + next(j for j in range(cut, 10_000) if first.locate(j)[1] >= 1 and first.locate(j)[2] == 0)
    first.steps = steps
    reference = list(loader(mixture(runs, alpha=0.0, steps=steps), 0))
    it = iter(loader(first, workers_before))
    consumed = [next(it) for _ in range(cut)]
    del it
    epoch, j = consumed[-1]["position"].tolist()
    state = json.loads(json.dumps(first.state_dict(epoch, j + 1)))  # plain values only
    chosen = Counter(first.locate(i)[0] for i in range(cut))
    assert [c["drawn"] for c in state["components"]] == [chosen[i] for i in range(3)]
    resumed = mixture(runs, alpha=0.0, steps=steps)
    resumed.load_state_dict(state)
    rest = list(loader(resumed, workers_after))
    assert len(consumed) + len(rest) == len(reference)
    for a, b in zip(consumed + rest, reference):
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["mlm_labels"], b["mlm_labels"])
        assert torch.equal(a["position"], b["position"])


def test_a_state_from_another_mixture_is_refused(runs):
    stream = mixture(runs, alpha=0.7)
    state = stream.state_dict(0, 30)
    with pytest.raises(ContractError, match="component 'c' has probability .* in the checkpoint"):
        mixture(runs, alpha=0.5).load_state_dict(state)
    with pytest.raises(ContractError, match="mixture seed=11, this run has 12"):
        mixture(runs, alpha=0.7, seed=12).load_state_dict(state)
    with pytest.raises(ContractError, match=f"mixture global_batch={BATCH}, this run has {2 * BATCH}"):
        mixture(runs, alpha=0.7, world_size=2).load_state_dict(state)  # W ranks of BATCH rows: another global batch
    with pytest.raises(ContractError, match="mixture shuffle_window=4, this run has 2"):
        mixture(runs, alpha=0.7, shuffle_window=2).load_state_dict(state)
    with pytest.raises(ContractError, match="version"):
        stream.load_state_dict({**state, "version": 99})
    tampered = {**state, "components": [{**c, "drawn": c["drawn"] + 1} for c in state["components"]]}
    with pytest.raises(ContractError, match="inconsistent"):
        stream.load_state_dict(tampered)
    manifest = Manifest.read(runs["c"])
    single = ShardStream(manifest, split="train", batch_size=BATCH, masker=masker_for(manifest), seed=11)
    with pytest.raises(ContractError, match="one dataset"):
        stream.load_state_dict(single.state_dict(0, 3))
    with pytest.raises(ContractError, match="manifest='mixture "):
        single.load_state_dict(state)  # and a single-dataset run names the mixture it was given


def test_components_with_another_vocabulary_are_refused(runs, tmp_path):
    body = json.loads(Manifest.read(runs["c"]).to_json())
    body["vocab"]["sha256"] = "0" * 64
    (tmp_path / "manifest.json").write_text(json.dumps(body))  # the check runs before any shard is opened
    config = MixtureConfig(components=(ComponentSpec(data=runs["ab"], name="ab"), ComponentSpec(data=str(tmp_path), name="other")), alpha=1.0)
    with pytest.raises(ContractError, match="'other' .* has another vocabulary than 'ab'"):
        MixtureStream(config, split="train", batch_size=BATCH, masker=masker_for(Manifest.read(runs["ab"])), seed=0)
