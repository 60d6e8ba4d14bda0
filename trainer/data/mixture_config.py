"""MixtureConfig: the components of a mixture (a pairs/ URL, an optional source name and weight each), or a
temperature alpha, as `--mix` flags give them; and p_i ∝ n_i^alpha for temperature sampling.

In:  `--mix [NAME=]URL[,source=S][,weight=W]` values (ComponentSpec.parse), or a dict from a run's config.
Out: a frozen, validated MixtureConfig that trainer/data/mixture.py streams.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
from collections.abc import Sequence
from typing import Any

import numpy as np

from schemas.config import Config


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
class MixtureConfig(Config):
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



def temperature_probabilities(rows: Sequence[int], alpha: float) -> np.ndarray:
    """p_i = n_i^alpha / Σ_j n_j^alpha (XLM's exponentially smoothed sampling); (components,) float64."""
    n = np.asarray(rows, dtype=np.float64)
    if n.ndim != 1 or not len(n) or (n <= 0).any():
        raise ValueError(f"temperature sampling needs positive row counts, got {list(rows)}")
    q = n**alpha
    return q / q.sum()


