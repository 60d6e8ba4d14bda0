"""tag: one label per word (named entities), from the first word piece of each word.

Words are split into pieces; the first piece of each word carries its tag, the others IGNORE_INDEX (ignored by the
loss), as in the BERT paper's NER recipe (AutoModelForTokenClassification). A word cut off by the length limit
is predicted "O". Scored by metrics.entity_f1 (entities micro-averaged over sentences) in the task's tag scheme
(IOB1, BIO or BIOES, read from the training split by metrics.tag_scheme unless a suite fixes it; both sides are
rewritten to BIO before chunking); tags in no scheme are one line naming the file.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import torch

from downstream.finetune import metrics as metrics_mod
from downstream.finetune.data import BadRow, DataError, Drop, LabelMap, Split
from downstream.finetune.tasks.base import Features, Stats, Task, checked
from schemas.config import Config, flag
from trainer.heads import IGNORE_INDEX


@dataclasses.dataclass(frozen=True, kw_only=True)
class TagColumns(Config):
    tokens_column: str = flag("tokens", metavar="NAME")
    """Column of the word list (--task tag)."""
    tags_column: str = flag("tags", metavar="NAME")
    """Column of the tags, one per word (--task tag)."""


def json_field(value, where: str, column: str):
    """A list or dict column read from CSV arrives as text: parse it."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise DataError(f"{where}: column {column!r} is not a JSON list/object: {value[:40]!r}") from None
    return value


class Tag(Task):
    name = "tag"
    pipeline = "token-classification"
    model_class_name = "AutoModelForTokenClassification"
    per_token = True
    column_fields = ("tokens_column", "tags_column")

    def __init__(self, columns, *, scheme: str | None = None, **options) -> None:
        super().__init__(columns, **options)
        self.labels: LabelMap | None = None
        self.scheme = scheme
        """IOB1, BIO or BIOES: given (a suite's preset: CoNLL-2003 is IOB1), else read from the training split."""

    def read(self, row: dict, where: str) -> dict:
        c = self.columns
        tokens = json_field(row[c.tokens_column], where, c.tokens_column)
        tags = json_field(row[c.tags_column], where, c.tags_column)
        if not tokens:
            raise Drop("empty_tokens")
        if not isinstance(tokens, list) or not isinstance(tags, list):
            raise DataError(f"{where}: columns {c.tokens_column!r} and {c.tags_column!r} must be lists")
        if len(tokens) != len(tags):
            raise BadRow("tag_count_differs", f"column {c.tags_column!r} has {len(tags)} tags for {len(tokens)} tokens")
        return {"tokens": [str(t) for t in tokens], "tags": [str(t) for t in tags]}

    def prepare(self, train: Split, others: list[Split]) -> None:
        if self.scheme is None:
            try:
                self.scheme = metrics_mod.tag_scheme([e["tags"] for e in train.examples])
            except ValueError as e:
                raise DataError(f"{train.url}: column {self.columns.tags_column!r}: {e}") from None
        self.labels = LabelMap.of(t for e in train.examples for t in e["tags"])
        for split in others:
            for e in split.examples:
                unseen = next((t for t in e["tags"] if t not in self.labels.ids), None)
                if unseen is not None:
                    raise DataError(f"{split.url}:{e['line']}: column {self.columns.tags_column!r}: tag {unseen!r} "
                                    "never appears in the training split")
        super().prepare(train, others)

    def head_config(self) -> dict:
        names = [str(x) for x in self.labels.labels]
        return {"num_labels": len(names), "id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}

    def encode(self, examples: list[dict], tokenizer, *, max_len: int) -> Features:
        enc = tokenizer([e["tokens"] for e in examples], is_split_into_words=True, truncation=True, max_length=max_len,
                        padding="longest", return_tensors="pt")
        target = torch.full(enc["input_ids"].shape, IGNORE_INDEX)
        first_pieces = []
        for row, e in enumerate(examples):
            firsts, previous = {}, None
            for position, word in enumerate(enc.word_ids(row)):
                if word is not None and word != previous:
                    firsts[word] = position
                    target[row, position] = self.labels.ids[e["tags"][word]]
                previous = word
            first_pieces.append([firsts.get(w) for w in range(len(e["tokens"]))])
        return Features({**enc, "labels": target}, np.arange(len(examples)), {"first_pieces": first_pieces})

    def loss_units(self, batch) -> int:
        """Labelled word pieces: transformers' token-classification loss is a mean over those not IGNORE_INDEX."""
        return int((batch["labels"] != IGNORE_INDEX).sum())

    def decode(self, outputs, features, examples) -> list:
        best = outputs[0].argmax(-1)  # (rows, seq)
        return [[self.labels.labels[best[row, p]] if p is not None else "O" for p in firsts]
                for row, firsts in enumerate(features.extra["first_pieces"])]

    def gold(self, examples: list[dict]) -> list:
        return [e["tags"] for e in examples]

    def metrics(self, gold, predicted) -> dict[str, float]:
        return metrics_mod.entity_f1(gold, predicted, scheme=self.scheme)

    def entities(self, tags: list[str]) -> set:
        return metrics_mod.bio_entities(metrics_mod.to_bio(tags, self.scheme))

    def default_metric(self) -> str:
        return "entity_f1"

    def sample(self) -> tuple[list, list]:
        return [["B-X", "O"]], [["B-X", "O"]]

    def stats(self, gold, predicted) -> Stats | None:
        """Entity F1, precision and recall are micro-averaged: sums of (found, gold, predicted) per sentence."""
        if self.metric not in ("entity_f1", "precision", "recall"):
            return None
        counts = []
        for g, p in zip(gold, predicted):
            g_entities, p_entities = self.entities(g), self.entities(p)
            counts.append((len(g_entities & p_entities), len(g_entities), len(p_entities)))
        metric = self.metric

        def finish(sums: np.ndarray) -> np.ndarray:
            tp, n_gold, n_pred = sums[:, 0], sums[:, 1], sums[:, 2]
            with np.errstate(divide="ignore", invalid="ignore"):
                values = {"precision": tp / n_pred, "recall": tp / n_gold, "entity_f1": 2 * tp / (n_gold + n_pred)}[metric]
            return np.nan_to_num(values, nan=0.0)

        # the fast path must be the metric itself: were metrics.py to read entities otherwise, recompute instead
        return checked(np.asarray(counts, np.float64).reshape(-1, 3), finish, self.score(gold, predicted)["score"])

    def records(self, examples, predicted) -> list[dict]:
        return [{"line": e["line"], "tokens": e["tokens"], "prediction": p, "tags": e["tags"]}
                for e, p in zip(examples, predicted)]

    def labels_record(self):
        return [str(x) for x in self.labels.labels]
