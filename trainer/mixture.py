"""MixtureStream: several pair sources (whole prep runs, or one named input of a run) → one batch stream.

In:  a MixtureConfig (components, each a pairs/ URL with an optional source name and weight; or a temperature
     alpha), the split, this process's (rank, world_size), batch size, seed and the Masker, as ShardStream.
Out: an IterableDataset of ready masked batches in ShardStream's format, each tagged with a `position`
     tensor [epoch of the component it came from, mixture step j]; `state_dict(epoch, next_batch)`,
     `load_state_dict()` and `describe()` (the mixture as recorded in the run's config).

How a step is chosen. Mixture step j (one micro batch per rank) draws from ONE component c_j, the same on
every rank: c_j comes from a uniform draw of the generator seeded (seed, chunk j // 4096), so it depends on
(seed, j) alone. Component c's own batch index at step j is n = #{i < j : c_i = c}, its (epoch, k) is
divmod(n, its batches_per_epoch), and its k-th batch is exactly what a ShardStream of that component would
yield there (each component keeps its layout, padding and exactly-once-per-epoch over ranks, and moves on
to its next epoch when one ends, forever). Being a function of j, this needs no sequential state: worker w
of K builds the steps j ≡ w (mod K) after the start, so the batch order is the same for any worker count and
a resume only needs j (the drawn counts are kept in the state as a record and a check). Per-rank choices
would mix components inside one global batch but let ranks drift to different component epochs, which
breaks exactly-once across ranks; so the choice is global.

Probabilities: explicit weights (normalised), or temperature sampling p_i ∝ n_i^alpha over the components'
rows n_i (multilingual BERT uses alpha = 0.7, XLM 0.5; 1 is proportional, 0 uniform). All components share a
batch size, so p_i is also the share of rows.

Source filter. Prep shuffles rows of all named inputs into the same shards and records only rows per source
per *shard*, so a "rows of source X" component first scans the `source` column of the split (only that
column is read; shards holding X alone or no X are skipped) to count X's rows per record batch. Its layout
is ShardStream's over those counts, and each block is cut down to X's rows when read, so X's rows are read
exactly once per component epoch with full batches; the cost is reading the other sources' rows of the same
blocks, and the scan at start-up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import posixpath
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch.utils.data import IterableDataset, get_worker_info

from schemas import ContractError, Manifest
from trainer.data import Block, Cursor, ShardStream
from trainer.masking import Masker
from trainer.shard_reader import ShardReader, open_shard

STATE_VERSION = 2
"""2: components use ShardStream's layout 2 (shards in a seeded order, blocks shuffled within a window)."""
CHOICE_CHUNK = 4096
"""Mixture steps drawn per seeded generator; part of the sequence's definition (changing it changes choices)."""
_CHOICE_TAG, _SEED_TAG = 0x6D6978, 0x636F6D70  # keep the choice draws and the component seeds apart


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComponentSpec:
    data: str
    """The pairs/ directory (or its manifest.json) of a prep run; any fsspec URL."""
    source: str | None = None
    """Only the rows of this named input (prep's --input NAME=...); None: every row of the run."""
    weight: float | None = None
    """Relative weight (normalised over the components); None when the mixture uses temperature alpha."""
    name: str = ""
    """Label in logs and the run config; default: the source, else the run directory's name."""

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError("a mixture component needs `data` (a pairs/ URL)")
        if self.weight is not None and not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"component {self.data!r}: weight must be a positive number, got {self.weight}")

    @property
    def label(self) -> str:
        if self.name or self.source:
            return self.name or str(self.source)
        path = self.data.rstrip("/").removesuffix("/manifest.json")
        base = posixpath.basename(path)
        return posixpath.basename(posixpath.dirname(path)) if base == "pairs" else base

    @classmethod
    def parse(cls, text: str) -> ComponentSpec:
        """`[NAME=]URL[,source=S][,weight=W]`, e.g. `wiki=gs://b/wiki/pairs,weight=3` (a flag's value)."""
        head, *options = text.split(",")
        name, sep, url = head.partition("=")
        if not sep or "/" in name or ":" in name:
            name, url = "", head
        fields: dict[str, Any] = {"data": url, "name": name}
        for option in options:
            key, _, value = option.partition("=")
            if key not in ("source", "weight") or not value:
                raise ValueError(f"{text!r}: unknown option {option!r} (expected source=NAME or weight=NUMBER)")
            fields[key] = float(value) if key == "weight" else value
        return cls(**fields)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MixtureConfig:
    components: tuple[ComponentSpec, ...]
    """The sources streamed together; their vocabularies must be the same file."""
    alpha: float | None = None
    """Temperature: p_i ∝ rows_i ** alpha (0.7 in multilingual BERT). None: every component gives a weight."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", tuple(self.components))
        if not self.components:
            raise ValueError("a mixture needs at least one component")
        weighted = [c.weight is not None for c in self.components]
        if self.alpha is None and not all(weighted):
            raise ValueError("give every component a weight, or set alpha for temperature sampling")
        if self.alpha is not None and any(weighted):
            raise ValueError("weights and alpha exclude each other: alpha derives the weights from the row counts")
        if self.alpha is not None and not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha must be >= 0 (1 proportional, 0 uniform), got {self.alpha}")
        labels = [c.label for c in self.components]
        if len(set(labels)) != len(labels):
            raise ValueError(f"component labels must be unique, got {labels}; set `name` on the components")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> MixtureConfig:
        valid, spec_valid = {f.name for f in dataclasses.fields(cls)}, {f.name for f in dataclasses.fields(ComponentSpec)}
        if unknown := set(values) - valid:
            raise ValueError(f"unknown mixture keys {sorted(unknown)}; valid: {sorted(valid)}")
        for c in values.get("components", ()):
            if unknown := set(c) - spec_valid:
                raise ValueError(f"unknown component keys {sorted(unknown)}; valid: {sorted(spec_valid)}")
        return cls(components=tuple(ComponentSpec(**c) for c in values.get("components", ())), alpha=values.get("alpha"))


def temperature_probabilities(rows: Sequence[int], alpha: float) -> np.ndarray:
    """p_i = n_i^alpha / Σ_j n_j^alpha (XLM's exponentially smoothed sampling); (components,) float64."""
    n = np.asarray(rows, dtype=np.float64)
    if n.ndim != 1 or not len(n) or (n <= 0).any():
        raise ValueError(f"temperature sampling needs positive row counts, got {list(rows)}")
    q = n**alpha
    return q / q.sum()


class ChoiceSequence:
    """Which component each mixture step draws from, as a pure function of (seed, step)."""

    def __init__(self, probabilities: Sequence[float], seed: int, chunk: int = CHOICE_CHUNK):
        p = np.asarray(probabilities, dtype=np.float64)
        if p.ndim != 1 or not len(p) or (p <= 0).any() or abs(p.sum() - 1) > 1e-9:
            raise ValueError(f"probabilities must be positive and sum to 1, got {p.tolist()}")
        self.probabilities, self.seed, self.chunk = p, seed, chunk
        self._cdf = np.cumsum(p)
        self._prefix = [np.zeros(len(p), dtype=np.int64)]  # _prefix[i]: batches drawn per component before chunk i
        self._last: tuple[int, np.ndarray] = (-1, np.empty(0, dtype=np.int64))

    def chunk_choices(self, i: int) -> np.ndarray:
        """(chunk,) component of each step in [i * chunk, (i + 1) * chunk)."""
        if self._last[0] != i:
            u = np.random.default_rng([self.seed, _CHOICE_TAG, i]).random(self.chunk)
            picks = np.minimum(np.searchsorted(self._cdf, u, side="right"), len(self._cdf) - 1)
            self._last = (i, picks)
        return self._last[1]

    def choices(self, start: int, stop: int) -> np.ndarray:
        """(stop - start,) the component of each step in [start, stop)."""
        first, end = start // self.chunk, -(-stop // self.chunk)
        parts = [self.chunk_choices(i)[max(start - i * self.chunk, 0) : stop - i * self.chunk] for i in range(first, end)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def drawn_before(self, step: int) -> np.ndarray:
        """(components,) batches each component has given before `step`. O(step / chunk) the first time."""
        i, r = divmod(step, self.chunk)
        while len(self._prefix) <= i:
            n = len(self._prefix) - 1
            self._prefix.append(self._prefix[n] + np.bincount(self.chunk_choices(n), minlength=len(self._cdf)))
        return self._prefix[i] + np.bincount(self.chunk_choices(i)[:r], minlength=len(self._cdf))

    def locate(self, step: int) -> tuple[int, int]:
        """(component, that component's batch index) of a mixture step."""
        c = int(self.chunk_choices(step // self.chunk)[step % self.chunk])
        return c, int(self.drawn_before(step)[c])


def source_block_rows(manifest: Manifest, split: str, source: str, blocks: Sequence[Block], cache_dir: str | None = None) -> list[int]:
    """Rows of `source` in each block of the split (reads only the `source` column, and only of mixed shards)."""
    counts, shards = [], manifest.split_shards(split)
    by_shard: dict[int, list[Block]] = {}
    for b in blocks:
        by_shard.setdefault(b.shard, []).append(b)
    for s, shard_blocks in by_shard.items():
        info, found = shards[s], []
        want = info.source_rows.get(source, 0)
        if want in (0, info.rows):  # no row of X, or nothing but X: the manifest already says
            found = [b.rows if want else 0 for b in shard_blocks]
        else:
            with open_shard(manifest.resolve(info.path), cache_dir) as f:
                schema = pa.ipc.open_file(f).schema
                options = pa.ipc.IpcReadOptions(included_fields=[schema.get_field_index("source")])
                reader = pa.ipc.open_file(f, options=options)
                for b in shard_blocks:
                    found.append(pc.sum(pc.equal(reader.get_batch(b.index).column(0), source)).as_py() or 0)
        if sum(found) != want:
            raise ContractError(f"{manifest.resolve(info.path)}: {sum(found)} rows of source {source!r}, the manifest says {want}")
        counts += found
    return counts


class _SourceReader:
    """A ShardReader whose record batches come back cut down to one source's rows (the last few kept: batches share blocks)."""

    def __init__(self, inner: ShardReader, source: str, full: dict[tuple[int, int], Block]):
        self.inner, self.source, self.full, self.decoded_capacity = inner, source, full, inner.decoded_capacity
        self.recent: OrderedDict[tuple[int, int], pa.RecordBatch] = OrderedDict()

    def hold(self, shards: Sequence[int]) -> None:
        self.inner.hold(shards)

    def batch(self, shard: int, index: int, rows: int) -> pa.RecordBatch:
        key = (shard, index)
        if key not in self.recent:
            self.inner.decoded_capacity = self.decoded_capacity
            whole = self.inner.batch(shard, index, self.full[key].rows)
            keep = np.flatnonzero(pc.equal(whole.column("source"), self.source).to_numpy(zero_copy_only=False))
            if len(keep) != rows:
                raise ContractError(f"record batch {key}: {len(keep)} rows of source {self.source!r}, the scan counted {rows}")
            self.recent[key] = whole.take(pa.array(keep))
            while len(self.recent) > self.decoded_capacity:
                self.recent.popitem(last=False)
        return self.recent[key]

    def close(self) -> None:
        self.inner.close()


class SourceStream(ShardStream):
    """ShardStream's layout over the rows of one named input of a prep run (see the module docstring)."""

    def __init__(self, manifest: Manifest, *, source: str, **kwargs: Any):
        super().__init__(manifest, **kwargs)
        self.source = source
        self.full_blocks = {(b.shard, b.index): b for b in self.blocks}
        counts = source_block_rows(manifest, self.split, source, self.blocks, self.cache_dir)
        self.blocks = [Block(b.shard, b.index, n) for b, n in zip(self.blocks, counts) if n]
        self.rows = sum(counts)
        if not self.rows:
            raise ContractError(f"{manifest.url}: no {self.split} rows of source {source!r} (sources: {manifest.sources})")
        self.batches_per_epoch = math.ceil(self.rows / (self.world_size * self.batch_size))
        self.padding = self.batches_per_epoch * self.world_size * self.batch_size - self.rows

    def open_reader(self) -> _SourceReader:
        return _SourceReader(super().open_reader(), self.source, self.full_blocks)

    def __iter__(self):
        raise TypeError("a SourceStream is read through MixtureStream (a one-component mixture will do)")


class MixtureStream(IterableDataset):
    """Masked batches for one rank from several components, forever (or until `steps`); see the module docstring."""

    def __init__(
        self,
        config: MixtureConfig,
        *,
        split: str,
        batch_size: int,
        masker: Masker,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        verify_checksums: bool = True,
        steps: int | None = None,
        **layout: Any,  # ShardStream's cache_dir, shuffle_window, length_buckets, ..., for every component
    ):
        self.config, self.split, self.batch_size, self.seed = config, split, batch_size, seed
        self.rank, self.world_size, self.steps = rank, world_size, steps
        manifests: dict[str, Manifest] = {}
        self.components: list[ShardStream] = []
        for i, spec in enumerate(config.components):
            if spec.data not in manifests:
                manifests[spec.data] = Manifest.read(spec.data)
            manifest = manifests[spec.data]
            kwargs = dict(split=split, batch_size=batch_size, masker=masker, seed=component_seed(seed, i),
                          rank=rank, world_size=world_size, verify_checksums=verify_checksums, **layout)
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
        self.start = (0, 0)  # (unused, next mixture step): the shape of ShardStream.start

    # -- what the run records -------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """The mixture as the run's config records it (JSON-ready): components, probabilities, alpha, seed."""
        comps = []
        for spec, c, p in zip(self.config.components, self.components, self.choice.probabilities.tolist()):
            comps.append({
                "name": spec.label, "data": c.manifest.url, "source": spec.source, "manifest": c.manifest.fingerprint,
                "rows": c.rows, "weight": spec.weight, "probability": p, "seed": c.seed,
                "batches_per_epoch": c.batches_per_epoch, "padding": c.padding,
                "steps_per_epoch": c.batches_per_epoch / p,  # expected mixture steps per pass over this component
            })
        first = self.components[0]
        return {"kind": "mixture", "seed": self.seed, "alpha": self.config.alpha, "split": self.split, "batch_size": self.batch_size,
                "world_size": self.world_size, "choice_chunk": self.choice.chunk, "shuffle_window": first.shuffle_window,
                "length_buckets": first.length_buckets, "components": comps}

    @property
    def fingerprint(self) -> str:
        """sha256 over what decides the batch sequence (not the URLs: the same data moved is the same mixture)."""
        d = self.describe()
        key = [d["seed"], d["split"], d["batch_size"], d["world_size"], d["choice_chunk"], d["shuffle_window"], d["length_buckets"],
               [(c["name"], c["manifest"], c["source"], c["probability"]) for c in d["components"]]]
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()

    def locate(self, step: int) -> tuple[int, int, int]:
        """(component, its epoch, its batch k in that epoch) of mixture step `step`."""
        c, n = self.choice.locate(step)
        return (c, *divmod(n, self.components[c].batches_per_epoch))

    # -- resumable position ---------------------------------------------------------------------------
    def state_dict(self, epoch: int, next_batch: int) -> dict[str, Any]:
        """The position after the batch tagged [epoch, next_batch - 1]; `epoch` is implied by the step and unused."""
        d, positions = self.describe(), []
        for c, n in zip(d["components"], self.choice.drawn_before(next_batch).tolist()):
            component_epoch, k = divmod(n, c["batches_per_epoch"])
            positions.append({"name": c["name"], "drawn": n, "epoch": component_epoch, "next_batch": k})
        return {
            "version": STATE_VERSION,
            "kind": "mixture",
            "step": next_batch,
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
        for key in ("seed", "split", "batch_size", "world_size", "choice_chunk", "shuffle_window", "length_buckets"):
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
        self.start = (0, state["step"])

    # -- iteration ---------------------------------------------------------------------------------------
    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        cursors: dict[int, Cursor] = {}  # per component: its reader (own read-ahead thread) and layout memos
        step = self.start[1] + worker
        try:
            while self.steps is None or step < self.steps:
                c, epoch, k = self.locate(step)
                if c not in cursors:
                    cursors[c] = Cursor(self.components[c].open_reader())
                batch = self.components[c].batch_at(cursors[c], epoch, k)
                batch["position"] = torch.tensor([epoch, step])
                yield batch
                step += workers
        finally:
            for cursor in cursors.values():
                cursor.close()


def _refusal(why: str) -> ContractError:
    return ContractError(f"cannot resume the data position: {why}")


def component_seed(seed: int, index: int) -> int:
    """The ShardStream seed of component `index`: distinct per component, so equal layouts never repeat masks."""
    return int(np.random.SeedSequence([seed, _SEED_TAG, index]).generate_state(1)[0])
