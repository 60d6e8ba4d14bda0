"""Word sense disambiguation by one nearest neighbour over sense embeddings (numpy only).

In:  contextual vectors of labelled instances (n, hidden), each with its lemma (None when the data names none:
     then every sense is a candidate) and its sense.
Out: `Inventory.fit` → one embedding per (lemma, sense): the mean vector of its instances (Loureiro & Jorge 2019's
     LMMS, Reif et al. 2019); `predict` → per instance the candidate sense nearest by cosine, the runner-up and
     the margin between their cosines; `held_out` and `leave_one_out` → a `Score`: 1-NN accuracy beside the
     most-frequent-sense baseline and random guessing, each with its standard error, and the paired gain over MFS.

The candidates of an instance are the senses fitted for its lemma. An instance whose lemma has one candidate is
not scored (nothing to choose), and is counted so. MFS picks the lemma's sense with the most training instances;
ties share the credit (1/ties when the gold sense is among them), so no arbitrary order decides it. Random is the
exact expectation, 1/candidates. Leave-one-out scores each training instance against embeddings fitted without it:
an instance that is its sense's only one cannot be predicted (its sense has no other instance) and is counted
apart, not scored. Standard errors: of the mean of per-instance scores (0/1, MFS's credit; random's Bernoulli
variance), and of the paired per-instance difference for the gain.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from downstream.stats import mean_and_se


def _unit(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


@dataclasses.dataclass
class Inventory:
    keys: list[tuple[str | None, str]]
    """(lemma, sense) of each embedding, sorted."""
    vectors: np.ndarray
    """(senses, hidden): the mean of each sense's instances."""
    counts: np.ndarray
    """Instances per sense."""

    @classmethod
    def fit(cls, vectors: np.ndarray, lemmas: list[str | None], senses: list[str]) -> Inventory:
        keys = sorted(set(zip(lemmas, senses)), key=lambda k: (k[0] or "", k[1]))
        index = {k: i for i, k in enumerate(keys)}
        rows = np.array([index[k] for k in zip(lemmas, senses)], np.int64)
        sums = np.zeros((len(keys), vectors.shape[-1]), np.float64)
        np.add.at(sums, rows, vectors)
        counts = np.bincount(rows, minlength=len(keys))
        return cls(keys, (sums / counts[:, None]).astype(np.float32), counts)

    def candidates(self) -> dict[str | None, list[int]]:
        found: dict[str | None, list[int]] = {}
        for i, (lemma, _) in enumerate(self.keys):
            found.setdefault(lemma, []).append(i)
        return found


@dataclasses.dataclass
class Prediction:
    sense: str
    cosine: float
    runner_up: str | None
    runner_up_cosine: float | None
    margin: float | None


def predict(inventory: Inventory, vectors: np.ndarray, lemmas: list[str | None]) -> list[Prediction]:
    """The nearest candidate sense of each instance; every lemma must have a fitted sense (instances.py checks)."""
    groups, out = inventory.candidates(), []
    unit, senses = _unit(vectors), _unit(inventory.vectors)
    for vector, lemma in zip(unit, lemmas):
        candidates = groups[lemma]
        cosines = senses[candidates] @ vector
        order = np.argsort(-cosines, kind="stable")
        best = candidates[order[0]]
        if len(candidates) == 1:
            out.append(Prediction(inventory.keys[best][1], float(cosines[order[0]]), None, None, None))
            continue
        second = candidates[order[1]]
        out.append(Prediction(inventory.keys[best][1], float(cosines[order[0]]), inventory.keys[second][1],
                              float(cosines[order[1]]), float(cosines[order[0]] - cosines[order[1]])))
    return out


@dataclasses.dataclass
class Score:
    instances: int
    """Instances scored."""
    accuracy: float
    accuracy_se: float
    mfs: float
    mfs_se: float
    random: float
    random_se: float
    gain_over_mfs: float
    gain_over_mfs_se: float
    not_scored: dict[str, int]
    """Instances left out of the score, by reason (one_sense; only_instance, for leave-one-out)."""
    scored: list[int] = dataclasses.field(default_factory=list)
    """The positions (in the instances given) of the scored ones, in order."""
    hits: list[float] = dataclasses.field(default_factory=list)
    """1-NN's 1 or 0 per scored instance: what a paired comparison of two models on the same instances needs."""

    def record(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()
                if k not in ("scored", "hits")}


def _score(nn: list[float], mfs: list[float], chance: list[float], not_scored: dict[str, int], scored: list[int]) -> Score:
    nn_a, mfs_a, p = np.array(nn), np.array(mfs), np.array(chance)
    accuracy, accuracy_se = mean_and_se(nn_a)
    mfs_mean, mfs_se = mean_and_se(mfs_a)
    gain, gain_se = mean_and_se(nn_a - mfs_a)
    n = len(p)
    random_se = float(np.sqrt((p * (1 - p)).sum()) / n) if n else float("nan")
    return Score(n, accuracy, accuracy_se, mfs_mean, mfs_se, float(p.mean()) if n else float("nan"), random_se,
                 gain, gain_se, {k: v for k, v in sorted(not_scored.items()) if v}, scored, nn)


def _mfs_credit(counts: np.ndarray, gold: int) -> float:
    """1/ties when `gold` (an index into counts) is among the most frequent, else 0."""
    top = np.flatnonzero(counts == counts.max())
    return 1.0 / len(top) if gold in top else 0.0


def held_out(inventory: Inventory, vectors: np.ndarray, lemmas: list[str | None], senses: list[str]) -> tuple[Score, list[Prediction]]:
    """Score held-out instances whose (lemma, sense) the inventory has (instances.py drops the others, counted)."""
    groups, index = inventory.candidates(), {k: i for i, k in enumerate(inventory.keys)}
    predictions = predict(inventory, vectors, lemmas)
    nn, mfs, chance, not_scored, scored = [], [], [], {"one_sense": 0}, []
    for i, (prediction, lemma, sense) in enumerate(zip(predictions, lemmas, senses)):
        candidates = groups[lemma]
        if len(candidates) < 2:
            not_scored["one_sense"] += 1
            continue
        scored.append(i)
        nn.append(float(prediction.sense == sense))
        mfs.append(_mfs_credit(inventory.counts[candidates], candidates.index(index[(lemma, sense)])))
        chance.append(1.0 / len(candidates))
    return _score(nn, mfs, chance, not_scored, scored), predictions


def leave_one_out(vectors: np.ndarray, lemmas: list[str | None], senses: list[str]) -> Score:
    """Score every instance against the sense embeddings fitted on all the others (see the module docstring)."""
    inventory = Inventory.fit(vectors, lemmas, senses)
    index = {k: i for i, k in enumerate(inventory.keys)}
    sums = inventory.vectors.astype(np.float64) * inventory.counts[:, None]
    groups = inventory.candidates()
    nn, mfs, chance, not_scored, scored = [], [], [], {"one_sense": 0, "only_instance": 0}, []
    for i, (vector, lemma, sense) in enumerate(zip(vectors.astype(np.float64), lemmas, senses)):
        own, candidates = index[(lemma, sense)], groups[lemma]
        if inventory.counts[own] == 1:
            not_scored["only_instance"] += 1
            continue
        if len(candidates) < 2:
            not_scored["one_sense"] += 1
            continue
        scored.append(i)
        means = inventory.vectors[candidates].astype(np.float64)
        at = candidates.index(own)
        means[at] = (sums[own] - vector) / (inventory.counts[own] - 1)  # its sense without it
        cosines = _unit(means) @ _unit(vector)
        nn.append(float(int(np.argmax(cosines)) == at))
        counts = inventory.counts[candidates].copy()
        counts[at] -= 1
        mfs.append(_mfs_credit(counts, at))
        chance.append(1.0 / len(candidates))
    return _score(nn, mfs, chance, not_scored, scored)
