"""Standardisation of contextual vectors: statistics fitted on a reference file, saved beside the vectors, and
applied unchanged to new text.

In:  vectors (..., hidden) or per layer (..., layers, hidden), streamed in batches (`Moments`); a standardizer's name
     (STANDARDIZERS).
Out: `Stats` (the kind, per-dimension mean and standard deviation, and what they were fitted on), saved as a
     .npz of plain arrays (read back with allow_pickle=False: nothing in it can run code) and applied with
     `Stats.apply`; `Stats.check` refuses statistics of another model shape or other layers in one line.

The standardizers are rows of STANDARDIZERS: `none` leaves vectors as they are; `center` subtracts each dimension's mean (the
common direction that makes every cosine high, Ethayarajh 2019); `zscore` also divides by each dimension's standard
deviation, so the few "rogue" dimensions with huge variance stop dominating cosine (Timkey & van Schijndel 2021).
A dimension that is constant on the reference keeps its scale (divided by 1, not 0).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

FORMAT_VERSION = 1


class StatsError(ValueError):
    """Saved statistics that do not fit this model or these layers (one line naming the file)."""


@dataclasses.dataclass(frozen=True)
class Standardizer:
    name: str
    centre: bool
    scale: bool


STANDARDIZERS: dict[str, Standardizer] = {s.name: s for s in (
    Standardizer("none", False, False), Standardizer("center", True, False), Standardizer("zscore", True, True))}
"""Each --standardize choice by name (vectors.py lists the names for the flags)."""


class Moments:
    """Running sums of vectors in float64: the mean and standard deviation of every vector added, by dimension."""

    def __init__(self) -> None:
        self.count, self.total, self.squares = 0, None, None

    def add(self, vectors: np.ndarray) -> None:
        """`vectors`: (n, hidden) or (n, layers, hidden)."""
        v = np.asarray(vectors, np.float64)
        if not len(v):
            return
        if self.total is None:
            self.total, self.squares = np.zeros(v.shape[1:]), np.zeros(v.shape[1:])
        self.count += len(v)
        self.total += v.sum(0)
        self.squares += (v * v).sum(0)

    def stats(self, kind: str, meta: dict) -> Stats:
        if self.count < 2:
            raise StatsError(f"{meta.get('reference', 'the reference')}: {self.count} word vector(s); standardising "
                             "needs at least 2")
        mean = self.total / self.count
        std = np.sqrt(np.maximum(self.squares / self.count - mean * mean, 0.0))
        return Stats(kind, mean.astype(np.float32), std.astype(np.float32), {**meta, "words": self.count})


@dataclasses.dataclass
class Stats:
    kind: str
    mean: np.ndarray
    """(hidden,) for averaged layers, (layers, hidden) per layer."""
    std: np.ndarray
    meta: dict
    """model, num_layers, hidden_size, layers (the hidden states, see vectors.py), per_layer, reference, words."""

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """`vectors` (..., hidden) or (..., layers, hidden), as the statistics were fitted, standardised."""
        rule = STANDARDIZERS[self.kind]
        out = np.asarray(vectors, np.float32)
        if rule.centre:
            out = out - self.mean
        if rule.scale:
            out = out / np.where(self.std > 0, self.std, 1.0).astype(np.float32)
        return out

    def check(self, where: str, *, num_layers: int, hidden_size: int, layers: tuple[int, ...], per_layer: bool) -> None:
        """StatsError unless these statistics were fitted on vectors of this shape and these layers."""
        want = {"num_layers": num_layers, "hidden_size": hidden_size, "layers": list(layers), "per_layer": per_layer}
        for key, value in want.items():
            if self.meta.get(key) != value:
                raise StatsError(f"{where}: fitted with {key} {self.meta.get(key)}, this run has {value} "
                                 f"(statistics apply to vectors made the same way; fit new ones with --reference)")

    def save(self, path: str) -> None:
        meta = json.dumps({"format_version": FORMAT_VERSION, "kind": self.kind, **self.meta}, sort_keys=True)
        with open(path, "wb") as f:
            np.savez(f, mean=self.mean, std=self.std, meta=np.array(meta))

    @classmethod
    def load(cls, path: str) -> Stats:
        try:
            with np.load(path, allow_pickle=False) as data:
                mean, std, meta = data["mean"], data["std"], json.loads(str(data["meta"]))
        except FileNotFoundError:
            raise StatsError(f"--stats {path}: no such file") from None
        except (OSError, KeyError, ValueError) as e:
            raise StatsError(f"--stats {path}: not statistics saved by clozeforge ({type(e).__name__}: {e})") from None
        if meta.get("format_version") != FORMAT_VERSION or meta.get("kind") not in STANDARDIZERS or mean.shape != std.shape:
            raise StatsError(f"--stats {path}: format {meta.get('format_version')}, kind {meta.get('kind')!r}: not "
                             f"statistics this version reads (format {FORMAT_VERSION})")
        kind = meta.pop("kind")
        meta.pop("format_version")
        return cls(kind, mean.astype(np.float32), std.astype(np.float32), meta)


def beside(output: str) -> str:
    """Where embed saves the statistics of X.arrow / X.npy: X.standardize.npz."""
    stem = output.rsplit(".", 1)[0] if output.endswith((".arrow", ".npy")) else output
    return f"{stem}.standardize.npz"


def fit_or_load(encoder, config, layers: tuple[int, ...], *, per_layer: bool, batch_size: int = 32,
                log=print) -> Stats | None:
    """The statistics `config` (a vectors.WordVectors) asks for: None for `none`; loaded from --stats and checked
    against this model and these layers; or fitted on the words of --reference (every record counted, one line)."""
    if config.standardize == "none":
        return None
    shape = {"num_layers": encoder.num_layers, "hidden_size": encoder.hidden_size, "layers": tuple(layers),
             "per_layer": per_layer}
    if config.stats:
        stats = Stats.load(config.stats)
        if stats.kind != config.standardize:
            raise StatsError(f"--stats {config.stats}: {stats.kind} statistics, and --standardize is {config.standardize}")
        stats.check(f"--stats {config.stats}", **shape)
        return stats
    # the one reader of texts: a text file's lines or a table's `text`, every record counted
    from schemas.tables import read_texts

    texts, _, account = read_texts(config.reference, "utf-8")
    moments = Moments()
    for first in range(0, len(texts), 256):  # a bounded slice at a time: the sums, not the vectors, are kept
        for words in encoder.words(texts[first : first + 256], layers, per_layer=per_layer, batch_size=batch_size):
            moments.add(words.vectors)
    dropped = f", dropped {dict(account.dropped)}" if account.dropped else ""
    log(f"--reference {config.reference}: {account.read} records read, {len(texts)} texts{dropped}; "
        f"{config.standardize} statistics of {moments.count} words")
    return moments.stats(config.standardize, {"model": encoder.model_dir, **shape, "layers": list(layers),
                                              "reference": config.reference})
