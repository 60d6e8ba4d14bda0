"""What one kind of fine-tuning task owns, from a row of a user's file to a score: the `Task` interface.

In:  the rows `data.read_split` reads, a transformers fast tokenizer (the export's), the model's outputs.
Out: examples (`read`), the label map (`prepare`), the inputs of a transformers head (`encode` → `Features`),
     predictions in the data's own terms (`decode`), the gold, the metrics (metrics.py's functions, with
     "score" set to the selected one), the prediction records of predictions.jsonl, and the per-example
     statistics a bootstrap over examples resamples.

A kind is one subclass registered in `tasks/__init__.py`'s table; the command, the config, the data reader and
the loop ask the object, never the kind's name. A row problem is an exception of data.py: `Drop` (a counted drop: an empty
row), `BadRow` (an error, or a counted drop with --skip-bad-rows), `data.DataError` (always an error).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch

from downstream.finetune.data import DataError, Split


@dataclasses.dataclass
class Features:
    tensors: dict[str, torch.Tensor]
    """Model inputs and training targets, one row per example (per window for span)."""
    example_of_row: np.ndarray
    """(rows,) index of the example each row came from (windows of one question share it)."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What decoding needs: first-piece positions per word (tag), offsets and context masks (span)."""


@dataclasses.dataclass
class Evaluation:
    metrics: dict[str, float]
    """metrics.py's values (fractions) and "score", the selected one."""
    predictions: list
    calibration: dict | None = None
    """What was fitted on this split and must be reused on the next (span: the no-answer threshold)."""


@dataclasses.dataclass(frozen=True)
class Codes:
    """Per-example statistics that are one-hot: each example adds 1 to one of `size` cells (a confusion matrix),
    stored as its cell's index; summing a draw is counting (np.bincount), not adding (n, size) rows."""

    codes: np.ndarray
    size: int


Stats = tuple[np.ndarray | Codes, Callable[[np.ndarray], np.ndarray]]
"""(per-example statistics (n, k) or their `Codes`, a function of their sums over a resample (b, k) → the metric
(b,))."""


def draw_sums(stats: np.ndarray | Codes, draws: np.ndarray) -> np.ndarray:
    """(b, k) sums of the per-example statistics over each row of `draws` ((b, n) example indices)."""
    if isinstance(stats, Codes):
        b = len(draws)
        flat = (stats.codes[draws] + np.arange(b)[:, None] * stats.size).ravel()
        return np.bincount(flat, minlength=b * stats.size).reshape(b, stats.size).astype(np.float64)
    return stats[draws].sum(1)


def checked(stats: np.ndarray | Codes, finish, value: float) -> Stats | None:
    """The fast path only where it is the metric itself on the whole split (else the bootstrap recomputes it)."""
    n = len(stats.codes) if isinstance(stats, Codes) else len(stats)
    whole = draw_sums(stats, np.arange(n)[None, :])
    return (stats, finish) if np.isclose(finish(whole)[0], value, atol=1e-9) else None


class Task:
    """One kind of task. Class attributes say what it is; an instance holds a job's columns and label map."""

    name: ClassVar[str]
    pipeline: ClassVar[str]
    """The transformers.pipeline task that loads the saved model/."""
    model_class_name: ClassVar[str]
    """The transformers AutoModelFor... class of its head."""
    per_token: ClassVar[bool] = False
    """Its outputs are per token (a batch cut to its longest row is padded back before concatenating)."""
    output_names: ClassVar[tuple[str, ...]] = ("logits",)
    padding_free_loss: ClassVar[bool] = True
    """Its head's loss on a row does not depend on how far the row is padded, so a batch may be computed in pieces
    of similar length (loop.py, `length_pieces`) and take the same step."""
    column_fields: ClassVar[tuple[str, ...]]
    """The fields of `Columns` (tasks/__init__.py) that name its columns."""

    def __init__(self, columns, *, metric: str | None = None, regression: bool = False, **_options) -> None:
        if regression:
            raise DataError(f"--regression applies to classify and pair, not to --task {self.name}")
        self.columns, self.requested_metric, self.metric = columns, metric, metric or ""

    @classmethod
    def from_config(cls, config) -> Task:
        return cls(config.columns, metric=config.metric, regression=config.regression)

    # -- reading -------------------------------------------------------------------------------------------------
    def required(self) -> list[tuple[str, str]]:
        """[(column name, its flag)] every row must have."""
        return [(getattr(self.columns, f), "--" + f.replace("_", "-")) for f in self.column_fields]

    def read(self, row: dict, where: str) -> dict:
        """One example from one row (read_split adds its "line"), or Drop / BadRow / DataError."""
        raise NotImplementedError

    def prepare(self, train: Split, others: list[Split]) -> None:
        """Fit the label map on the training split, check the other splits against it, and settle the metric."""
        names = self.metric_names()
        self.metric = self.requested_metric or self.default_metric()
        if self.metric not in names:
            raise DataError(f"--metric {self.metric}: not a metric of --task {self.name}{self.variant()} "
                            f"(one of: {', '.join(names)})")

    # -- the model -----------------------------------------------------------------------------------------------
    def head_config(self) -> dict[str, Any]:
        """Config overrides that size the head: num_labels, label names (saved with the model), problem type."""
        return {}

    def model_class(self):
        import transformers

        return getattr(transformers, self.model_class_name)

    def encode(self, examples: list[dict], tokenizer, *, max_len: int) -> Features:
        raise NotImplementedError

    def outputs(self, model_output) -> list[torch.Tensor]:
        return [getattr(model_output, name) for name in self.output_names]

    def loss_units(self, batch: dict[str, torch.Tensor]) -> int:
        """What its head's loss is a mean over in `batch`: its rows (transformers' sequence, regression and span
        heads). A batch computed in pieces (loop.py, `length_pieces`) weights each piece's loss by its share."""
        return len(batch["input_ids"])

    # -- predictions and scores ----------------------------------------------------------------------------------
    def decode(self, outputs: list[torch.Tensor], features: Features, examples: list[dict]) -> list:
        """Predictions per example from the outputs on every row of `features`."""
        raise NotImplementedError

    def gold(self, examples: list[dict]) -> list:
        raise NotImplementedError

    def metrics(self, gold: list, predicted: list) -> dict[str, float]:
        """metrics.py's dict for this kind (`score` sets its "score" to the selected metric)."""
        raise NotImplementedError

    def default_metric(self) -> str:
        raise NotImplementedError

    lower_is_better: ClassVar[tuple[str, ...]] = ()
    """Metrics it reports that cannot select (MSE): selection takes the highest."""

    def metric_names(self) -> list[str]:
        """The metrics it can select by: what metrics.py returns for it, higher better."""
        gold, predicted = self.sample()
        return [k for k in self.metrics(gold, predicted) if k not in ("score", *self.lower_is_better)]

    def sample(self) -> tuple[list, list]:
        """A tiny (gold, predicted) pair: what metric names the metric functions return."""
        raise NotImplementedError

    def score(self, gold: list, predicted: list) -> dict[str, float]:
        values = self.metrics(gold, predicted)
        return {**values, "score": values[self.metric]}

    def evaluate(self, outputs: list[torch.Tensor], features: Features, examples: list[dict],
                 calibration: dict | None = None) -> Evaluation:
        """Decode and score one split. `calibration` (span) comes from validation; None fits it on this split."""
        predicted = self.decode(outputs, features, examples)
        return Evaluation(self.score(self.gold(examples), predicted), predicted)

    def stats(self, gold: list, predicted: list) -> Stats | None:
        """Per-example statistics of the selected metric when it is a function of their sums (a mean, a micro
        F1): the bootstrap then resamples sums instead of recomputing the metric. None: recompute it."""
        return None

    def records(self, examples: list[dict], predicted: list) -> list[dict]:
        """One JSON record per example of the test split: its line, the prediction, the gold."""
        raise NotImplementedError

    def labels_record(self):
        """What results.json says about the labels."""
        return None

    def variant(self) -> str:
        """How an error message names this task beyond its kind (" (regression)")."""
        return ""


def mean_stats(values) -> Stats:
    """A metric that is the mean of one value per example."""
    column = np.asarray(values, np.float64)[:, None]
    return column, lambda sums: sums[:, 0] / len(column)
