"""classify and pair: one label per text (or text pair), predicted from [CLS]; classes or a regression target.

    classify  [CLS] text [SEP]                  AutoModelForSequenceClassification, head on [CLS]
    pair      [CLS] text [SEP] text_pair [SEP]  the same head; token type ids mark the two texts

BERT's special tokens shown: the export's tokenizer writes its family's (RoBERTa and XLM-R: <s> text </s></s>
text_pair </s>, with no token types; their head reads <s>, the first token, as BERT's reads [CLS]).

The label column decides the target by its type, never by its values: floats (a JSON 1.0, a CSV "4.5", a
Parquet double column) are a regression (one output, MSE loss, Pearson), integers and strings are classes
(accuracy), and --regression makes integer labels a regression too. So a 1.0-5.0 rating is a regression
even though every value is whole, and 0/1 labels are two classes.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import torch

from downstream.finetune import metrics as metrics_mod
from downstream.finetune.data import DataError, Drop, LabelMap, Split
from downstream.finetune.tasks.base import (
    Codes,
    Features,
    Stats,
    Task,
    checked,
    mean_stats,
)
from schemas.config import Config, flag

_INTEGER = re.compile(r"^\s*[+-]?\d+\s*$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SequenceColumns(Config):
    text_column: str = flag("text", metavar="NAME")
    """Column of the (first) text."""
    text_pair_column: str = flag("text_pair", metavar="NAME")
    """Column of the second text (--task pair)."""
    label_column: str = flag("label", metavar="NAME")
    """Column of the label: strings or integers are classes, floats (or any number with --regression) a
    regression target."""


def number(value) -> float | None:
    """The value as a finite float, or None (a string, a bool, NaN)."""
    if isinstance(value, bool):
        return None
    try:
        n = float(value)
    except (TypeError, ValueError):
        return None
    return n if math.isfinite(n) else None


def is_float_typed(value) -> bool:
    """A float as written: a JSON/Parquet float, or text that reads as a number but not as an integer."""
    if isinstance(value, float):
        return True
    return isinstance(value, str) and number(value) is not None and not _INTEGER.match(value)


class Classes:
    """Class ids from a sorted label map; scored by metrics.classification."""

    lower_is_better: tuple[str, ...] = ()
    default_metric = "accuracy"

    def __init__(self, labels: LabelMap, positive: int | None = None) -> None:
        self.labels = labels
        self.positive = positive
        """The id of the class whose binary F1 is reported ("f1": MRPC, QQP), or None."""

    @classmethod
    def fit(cls, train: Split, column: str) -> Classes:
        """Integer classes stay numbers (also when a CSV gives them as text: ordered 2 < 10, not "10" < "2").
        Refuses a label column with more distinct values than half its rows: fewer than two rows a class cannot
        teach a classifier, and it is usually an id or a free-text column named by mistake."""
        values = [e["label"] for e in train.examples]
        numbers = [number(v) for v in values]
        if None not in numbers:
            values = [int(n) for n in numbers]
        for e, v in zip(train.examples, values):
            e["label"] = v
        labels = LabelMap.of(values)
        if len(labels) < 2:
            raise DataError(f"{train.url}: column {column!r} has a single label ({labels.labels[0]!r}); nothing to classify")
        if len(labels) > len(values) / 2:
            raise DataError(f"{train.url}: column {column!r} has {len(labels)} distinct labels in {len(values)} rows "
                            "(more labels than half the rows: an id or free-text column?)")
        return cls(labels)

    def check(self, split: Split, column: str) -> None:
        """Every label of a validation/test split is one the training split taught."""
        labels = self.labels
        for e in split.examples:
            value, n = e["label"], number(e["label"])
            if isinstance(labels.labels[0], int) and n is not None and n.is_integer():
                value = e["label"] = int(n)
            if value not in labels.ids:
                raise DataError(f"{split.url}:{e['line']}: column {column!r}: label {value!r} never appears in the "
                                f"training split ({len(labels)} labels: {', '.join(map(str, labels.labels[:8]))}"
                                f"{' ...' if len(labels) > 8 else ''})")

    def head_config(self) -> dict:
        names = [str(x) for x in self.labels.labels]
        return {"num_labels": len(names), "id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)},
                "problem_type": "single_label_classification"}

    def tensor(self, examples: list[dict]) -> torch.Tensor:
        return torch.tensor([self.labels.ids[e["label"]] for e in examples])

    def decode(self, logits: torch.Tensor) -> list:
        return logits.argmax(-1).tolist()

    def gold(self, examples: list[dict]) -> list:
        return [self.labels.ids[e["label"]] for e in examples]

    def metrics(self, gold, predicted) -> dict[str, float]:
        # 0/1 labels: 1 is the positive class (scikit-learn's pos_label), whose binary F1 GLUE reports (MRPC, QQP);
        # a suite or a caller may name another (`positive`)
        positive = self.positive if self.positive is not None else (
            self.labels.ids[1] if self.labels.labels == [0, 1] else None)
        return metrics_mod.classification(gold, predicted, positive=positive)

    def sample(self) -> tuple[list, list]:
        return [0, 1], [0, 1]

    def value(self, predicted):
        return self.labels.labels[predicted]

    def stats(self, metric: str, gold, predicted) -> Stats | None:
        """Accuracy: one 0/1 per example. Macro-F1 and MCC: functions of the confusion matrix, each example one
        (gold, predicted) cell of it."""
        if metric == "accuracy":
            return mean_stats(np.asarray(gold) == np.asarray(predicted))
        k = len(self.labels)
        if metric not in ("macro_f1", "mcc"):
            return None
        cells = Codes(np.asarray(gold) * k + np.asarray(predicted), k * k)

        def finish(sums: np.ndarray) -> np.ndarray:
            confusion = sums.reshape(-1, k, k)  # (b, gold, predicted)
            tp = np.diagonal(confusion, axis1=1, axis2=2)
            true, pred = confusion.sum(2), confusion.sum(1)
            with np.errstate(divide="ignore", invalid="ignore"):
                if metric == "macro_f1":  # sklearn's: over the classes present in gold or predictions
                    present = (true + pred) > 0
                    f1 = np.nan_to_num(2 * tp / (true + pred))
                    return (f1 * present).sum(1) / np.maximum(present.sum(1), 1)
                n, correct = confusion.sum((1, 2)), tp.sum(1)  # sklearn's multiclass MCC
                num = correct * n - (true * pred).sum(1)
                den = np.sqrt((n ** 2 - (pred ** 2).sum(1)) * (n ** 2 - (true ** 2).sum(1)))
                return np.nan_to_num(num / den)

        return checked(cells, finish, self.metrics(gold, predicted)[metric])

    def record(self):
        return [str(x) for x in self.labels.labels]


class Regression:
    """One float output (MSE loss); scored by metrics.regression (Pearson, Spearman)."""

    lower_is_better = ("mse",)
    default_metric = "pearson"

    @classmethod
    def fit(cls, train: Split, column: str) -> Regression:
        regression = cls()
        regression.check(train, column)
        return regression

    def check(self, split: Split, column: str) -> None:
        for e in split.examples:
            n = number(e["label"])
            if n is None:
                raise DataError(f"{split.url}:{e['line']}: column {column!r}: {e['label']!r} is not a number "
                                "(the labels are a regression target)")
            e["label"] = n

    def head_config(self) -> dict:
        return {"num_labels": 1, "problem_type": "regression"}

    def tensor(self, examples: list[dict]) -> torch.Tensor:
        return torch.tensor([e["label"] for e in examples], dtype=torch.float32)

    def decode(self, logits: torch.Tensor) -> list:
        return logits[:, 0].tolist()

    def gold(self, examples: list[dict]) -> list:
        return [e["label"] for e in examples]

    def metrics(self, gold, predicted) -> dict[str, float]:
        return metrics_mod.regression(gold, predicted)

    def sample(self) -> tuple[list, list]:
        return [0.0, 1.0, 2.0], [0.0, 1.0, 2.0]

    def value(self, predicted):
        return predicted

    def stats(self, metric: str, gold, predicted) -> Stats | None:
        """Pearson from five sums (x, y, x², y², xy; centred first, which it ignores); Spearman ranks each draw anew."""
        if metric != "pearson":
            return None
        x, y = np.asarray(gold, np.float64), np.asarray(predicted, np.float64)
        x, y = x - x.mean(), y - y.mean()
        columns = np.stack([x, y, x * x, y * y, x * y], axis=1)

        def finish(sums: np.ndarray) -> np.ndarray:
            n = len(columns)
            sx, sy, sxx, syy, sxy = sums.T
            den = np.sqrt(np.clip(n * sxx - sx ** 2, 0, None) * np.clip(n * syy - sy ** 2, 0, None))
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(den > 1e-12 * n * n, (n * sxy - sx * sy) / den, 0.0)

        return checked(columns, finish, self.metrics(gold, predicted)["pearson"])

    def record(self):
        return "regression"


class Classify(Task):
    name = "classify"
    pipeline = "text-classification"
    model_class_name = "AutoModelForSequenceClassification"
    column_fields = ("text_column", "label_column")

    def __init__(self, columns, *, metric: str | None = None, regression: bool = False, positive=None,
                 **_options) -> None:
        super().__init__(columns, metric=metric)
        self.force_regression, self.positive = regression, positive
        """positive: the label whose binary F1 metrics.py reports as "f1" (a suite's preset: MRPC, QQP)."""
        self.target: Classes | Regression | None = None

    def read(self, row: dict, where: str) -> dict:
        text, label = row[self.columns.text_column], row[self.columns.label_column]
        if text in (None, ""):
            raise Drop("empty_text")
        if label in (None, ""):
            raise Drop("empty_label")
        if isinstance(label, (list, dict)):
            raise DataError(f"{where}: column {self.columns.label_column!r}: {label!r} is not a label (a string or a number)")
        return {"text": str(text), "label": label}

    def prepare(self, train: Split, others: list[Split]) -> None:
        column = self.columns.label_column
        labels = [e["label"] for e in train.examples]
        numeric = all(number(v) is not None for v in labels)
        if self.force_regression or (numeric and any(is_float_typed(v) for v in labels)):
            self.target = Regression.fit(train, column)
        else:
            self.target = Classes.fit(train, column)
            if self.positive is not None:
                self.target.positive = self._positive_id(train)
        for split in others:
            self.target.check(split, column)
        super().prepare(train, others)

    def _positive_id(self, train: Split) -> int:
        ids = self.target.labels.ids
        n = number(self.positive)
        key = self.positive if self.positive in ids else (int(n) if n is not None and n.is_integer() else None)
        if key not in ids:
            raise DataError(f"{train.url}: the positive label {self.positive!r} never appears in column "
                            f"{self.columns.label_column!r}")
        return ids[key]

    def texts(self, examples: list[dict]) -> tuple[list[str], list[str] | None]:
        return [e["text"] for e in examples], None

    def head_config(self) -> dict:
        return self.target.head_config()

    def encode(self, examples: list[dict], tokenizer, *, max_len: int) -> Features:
        first, second = self.texts(examples)
        enc = tokenizer(first, second, truncation=True, max_length=max_len, padding="longest", return_tensors="pt")
        return Features({**enc, "labels": self.target.tensor(examples)}, np.arange(len(examples)))

    def decode(self, outputs, features, examples) -> list:
        return self.target.decode(outputs[0])

    def gold(self, examples: list[dict]) -> list:
        return self.target.gold(examples)

    def metrics(self, gold, predicted) -> dict[str, float]:
        return self.target.metrics(gold, predicted)

    def default_metric(self) -> str:
        return self.target.default_metric

    def sample(self) -> tuple[list, list]:
        return self.target.sample()

    def metric_names(self) -> list[str]:
        self.lower_is_better = self.target.lower_is_better
        return super().metric_names()

    def stats(self, gold, predicted) -> Stats | None:
        return self.target.stats(self.metric, gold, predicted)

    def records(self, examples, predicted) -> list[dict]:
        return [{"line": e["line"], "prediction": self.target.value(p), "label": e["label"]}
                for e, p in zip(examples, predicted)]

    def labels_record(self):
        return self.target.record()

    def variant(self) -> str:
        return " (regression)" if isinstance(self.target, Regression) else ""


class Pair(Classify):
    name = "pair"
    column_fields = ("text_column", "text_pair_column", "label_column")

    def read(self, row: dict, where: str) -> dict:
        example = super().read(row, where)
        second = row[self.columns.text_pair_column]
        return {**example, "text_pair": "" if second is None else str(second)}

    def texts(self, examples: list[dict]) -> tuple[list[str], list[str] | None]:
        return [e["text"] for e in examples], [e["text_pair"] for e in examples]
