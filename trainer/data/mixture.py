"""MixtureStream: several pair sources (whole prep runs, or one named input of a run) → one batch stream.

In:  a MixtureConfig (components, each a pairs/ URL with an optional source name and weight; or a temperature
     alpha), the split, this process's (rank, world_size), batch size, seed and the Masker, as ShardStream.
Out: an IterableDataset of ready masked micro batches in ShardStream's format, each tagged with a `position`
     tensor [epoch of the component it came from, micro batch i = j x grad_accum + m of mixture step j];
     `state_dict(epoch, next_batch)`, `load_state_dict()` and `describe()` (the mixture as the run records it).

How a step is chosen. Mixture step j (one optimizer step: the global batch, over all ranks and micro batches)
draws from ONE component c_j, the same on every rank: c_j comes from a uniform draw of the generator seeded
(seed, chunk j // 4096), so it depends on (seed, j) alone. Component c's own step index at step j is
n = #{i < j : c_i = c}, its (epoch, k) is divmod(n, its steps_per_epoch), and its micro batches of step k are
exactly what a ShardStream of that component would yield there (each component keeps its canonical
partitions, padding and exactly-once-per-epoch over ranks, and moves on to its next epoch when one ends,
forever). Being a function of j, this needs no sequential state: worker w of K builds the micro batches
i ≡ w (mod K) after the start, so the batch order is the same for any worker count, and a resume only needs j,
on any world size the partitions allow (the drawn counts are kept in the state as a record and a check).
Per-rank choices would mix components inside one global batch but let ranks drift to different component
epochs, which breaks exactly-once across ranks; so the choice is global.

Probabilities: explicit weights (normalised), or temperature sampling p_i ∝ n_i^alpha over the components'
rows n_i (multilingual BERT uses alpha = 0.7, XLM 0.5; 1 is proportional, 0 uniform). All components share a
batch size, so p_i is also the share of rows.

A component that names a source reads only that input's rows (trainer/data/source_stream.py).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from schemas import ContractError, Manifest
from trainer.data.choice import ChoiceSequence
from trainer.data.mixture_config import MixtureConfig, temperature_probabilities
from trainer.data.source_stream import SourceStream
from trainer.data.stream import LAYOUT_KEYS, Cursor, ShardStream

STATE_VERSION = 3
"""3: one component per optimizer step, components in canonical partitions (2: per micro batch, per-rank layout)."""
_SEED_TAG = 0x636F6D70  # keeps the component seeds apart from every other seeded draw


class MixtureStream(IterableDataset):
    """Masked batches for one rank from several components, forever (or until `steps`); see the module docstring."""

    def __init__(self, config: MixtureConfig, *, split: str, seed: int, steps: int | None = None, **stream: Any):
        """`stream`: ShardStream's own arguments (batch_size, masker, rank, world_size, the layout's), the same
        for every component; each component gets its own seed (component_seed)."""
        self.config, self.split, self.seed, self.steps = config, split, seed, steps
        self.world_size = stream.get("world_size", 1)
        manifests: dict[str, Manifest] = {}
        self.components: list[ShardStream] = []
        for i, spec in enumerate(config.components):
            if spec.data not in manifests:
                manifests[spec.data] = Manifest.read(spec.data)
            manifest = manifests[spec.data]
            kwargs = dict(split=split, seed=component_seed(seed, i), **stream)
            self.components.append(SourceStream(manifest, source=spec.source, **kwargs) if spec.source else ShardStream(manifest, **kwargs))
        first = self.components[0].manifest
        for spec, c in zip(config.components, self.components):
            if (c.manifest.vocab["sha256"], c.manifest.special_tokens) != (first.vocab["sha256"], first.special_tokens):
                raise ContractError(f"mixture component {spec.label!r} ({c.manifest.url}) has another vocabulary than "
                                    f"{config.components[0].label!r} ({first.url}); prep it with --vocab pointing at the same vocab/")
        self.rows = [c.rows for c in self.components]
        if config.alpha is None:
            weights = np.array([spec.weight for spec in config.components], dtype=np.float64)
            probabilities = weights / weights.sum()
        else:
            probabilities = temperature_probabilities(self.rows, config.alpha)
        self.choice = ChoiceSequence(probabilities, seed)
        self.max_seq_len = max(c.manifest.max_seq_len for c in self.components)
        self.grad_accum = self.components[0].grad_accum  # every component has the same batching
        self.start = (0, 0)  # (unused, next mixture step): the shape of ShardStream.start

    # -- what the run records -------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """The mixture as the run's config records it (JSON-ready): components, probabilities, alpha, seed."""
        comps = []
        for spec, c, p in zip(self.config.components, self.components, self.choice.probabilities.tolist()):
            comps.append({
                "name": spec.label, "data": c.manifest.url, "source": spec.source, "manifest": c.manifest.fingerprint,
                "rows": c.rows, "weight": spec.weight, "probability": p, "seed": c.seed,
                "steps_per_epoch": c.steps_per_epoch, "padding": c.padding,
                "mixture_steps_per_epoch": c.steps_per_epoch / p,  # expected mixture steps per pass over this component
            })
        first = self.components[0]
        return {"kind": "mixture", "seed": self.seed, "alpha": self.config.alpha, "split": self.split, "global_batch": first.global_batch,
                "partitions": first.partitions, "world_size": self.world_size, "batch_size": first.batch_size,
                "grad_accum": first.grad_accum, "choice_chunk": self.choice.chunk, "shuffle_window": first.shuffle_window,
                "length_buckets": first.length_buckets, "components": comps}

    @property
    def fingerprint(self) -> str:
        """sha256 over what decides the batch sequence (not the URLs: the same data moved is the same mixture)."""
        d = self.describe()
        key = [d["seed"], d["split"], d["global_batch"], d["partitions"], d["choice_chunk"], d["shuffle_window"], d["length_buckets"],
               [(c["name"], c["manifest"], c["source"], c["probability"]) for c in d["components"]]]
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()

    def locate(self, step: int) -> tuple[int, int, int]:
        """(component, its epoch, its step k in that epoch) of mixture step `step`."""
        c, n = self.choice.locate(step)
        return (c, *divmod(n, self.components[c].steps_per_epoch))

    # -- resumable position ---------------------------------------------------------------------------
    def state_dict(self, epoch: int, next_batch: int) -> dict[str, Any]:
        """The position after the micro batch tagged [epoch, next_batch - 1]; `epoch` is implied and unused."""
        d, positions = self.describe(), []
        step, micro = divmod(next_batch, self.grad_accum)
        for c, n in zip(d["components"], self.choice.drawn_before(step).tolist()):
            component_epoch, k = divmod(n, c["steps_per_epoch"])
            positions.append({"name": c["name"], "drawn": n, "epoch": component_epoch, "next_step": k})
        return {
            "version": STATE_VERSION,
            "kind": "mixture",
            "step": step,
            "micro": micro,  # 0 at every step boundary (where the trainer saves)
            # ShardStream.load_state_dict compares this key first, so a single-dataset run refuses the state by name
            "manifest": f"mixture {self.fingerprint}",
            "mixture": d,
            "components": positions,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at the mixture step after the last one trained on; refuse a state from another mixture."""
        if state.get("kind") != "mixture":
            raise _refusal("the checkpoint streamed one dataset (no mixture), this run streams a mixture")
        if state.get("version") != STATE_VERSION:
            raise ContractError(f"mixture data state version {state.get('version')!r}, this trainer reads {STATE_VERSION}")
        theirs, ours = state["mixture"], self.describe()
        for key in ("split", "choice_chunk", *LAYOUT_KEYS[2:]):  # the components' manifests are compared below
            if theirs[key] != ours[key]:
                raise _refusal(f"checkpoint has mixture {key}={theirs[key]!r}, this run has {ours[key]!r}")
        names = [c["name"] for c in theirs["components"]], [c["name"] for c in ours["components"]]
        if names[0] != names[1]:
            raise _refusal(f"checkpoint mixes {names[0]}, this run mixes {names[1]}")
        for a, b in zip(theirs["components"], ours["components"]):
            for key in ("manifest", "source"):
                if a[key] != b[key]:
                    raise _refusal(f"component {a['name']!r} has {key} {a[key]!r} in the checkpoint, {b[key]!r} here")
            # exact on one machine; a last-bit difference of pow() elsewhere must not refuse the run
            if not math.isclose(a["probability"], b["probability"], rel_tol=1e-9):
                raise _refusal(f"component {a['name']!r} has probability {a['probability']:.6g} in the checkpoint, "
                               f"{b['probability']:.6g} in this run (weights or alpha changed)")
        # continue with the checkpoint's own numbers, so the choices are bit-identical
        self.choice = ChoiceSequence([c["probability"] for c in theirs["components"]], self.seed, self.choice.chunk)
        drawn = self.choice.drawn_before(state["step"]).tolist()
        if drawn != [c["drawn"] for c in state["components"]]:
            raise ContractError(f"mixture data state is inconsistent: step {state['step']} gives {drawn} batches per component, "
                                f"the checkpoint recorded {[c['drawn'] for c in state['components']]}")
        if state["micro"] and state["mixture"]["grad_accum"] != self.grad_accum:
            raise _refusal(f"it is inside a step of {state['mixture']['grad_accum']} micro batches, this run takes {self.grad_accum}")
        self.start = (0, state["step"] * self.grad_accum + state["micro"])

    # -- iteration ---------------------------------------------------------------------------------------
    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        cursors: dict[int, Cursor] = {}  # per component: its reader (own read-ahead thread) and layout memos
        i = self.start[1] + worker
        try:
            while self.steps is None or i < self.steps * self.grad_accum:
                step, m = divmod(i, self.grad_accum)
                c, epoch, k = self.locate(step)
                if c not in cursors:
                    cursors[c] = Cursor(self.components[c].open_reader())
                batch = self.components[c].batch_at(cursors[c], epoch, k * self.grad_accum + m)
                batch["position"] = torch.tensor([epoch, i])
                yield batch
                i += workers
        finally:
            for cursor in cursors.values():
                cursor.close()


def _refusal(why: str) -> ContractError:
    return ContractError(f"cannot resume the data position: {why}")


def component_seed(seed: int, index: int) -> int:
    """The ShardStream seed of component `index`: distinct per component, so equal layouts never repeat masks."""
    return int(np.random.SeedSequence([seed, _SEED_TAG, index]).generate_state(1)[0])
