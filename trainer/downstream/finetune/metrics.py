"""Downstream metrics, each the standard definition (contract 8 of DESIGN.md), from maintained code where it exists.

In:  gold and predicted labels (class ids, floats, BIO tag sequences, or answer strings).
Out: {metric name: value}; every task's dict holds "score", the one number runs are compared and selected by
     (accuracy for classification, Pearson for regression, entity F1 for tagging, token F1 for span extraction).

scikit-learn computes accuracy, macro-F1 and MCC, scipy Pearson and Spearman. Entity-level F1 over BIO spans is
CoNLL's (seqeval's default mode): an entity is (type, first token, last token), found only when both ends and
the type match; an I- tag that does not continue an entity of its type opens one, as conlleval reads it. SQuAD's
exact match and token F1 follow the official v1.1 evaluation script, normalisation included (lowercase, strip
punctuation, drop the articles a/an/the, collapse whitespace), maximised over the gold answers of a question.
Values are fractions in [0, 1] (Pearson and Spearman in [-1, 1]); results.json and the progress lines show
points (x 100).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence

import numpy as np


def classification(gold: Sequence[int], predicted: Sequence[int]) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    accuracy = float(accuracy_score(gold, predicted))
    return {"score": accuracy, "accuracy": accuracy,
            "macro_f1": float(f1_score(gold, predicted, average="macro", zero_division=0)),
            "mcc": float(matthews_corrcoef(gold, predicted))}


def regression(gold: Sequence[float], predicted: Sequence[float]) -> dict[str, float]:
    from scipy.stats import pearsonr, spearmanr

    gold, predicted = np.asarray(gold, np.float64), np.asarray(predicted, np.float64)
    if np.ptp(predicted) == 0 or np.ptp(gold) == 0:  # a constant has no correlation; scipy warns and returns nan
        pearson = spearman = 0.0
    else:
        pearson, spearman = float(pearsonr(gold, predicted)[0]), float(spearmanr(gold, predicted)[0])
    return {"score": pearson, "pearson": pearson, "spearman": spearman,
            "mse": float(np.mean((gold - predicted) ** 2))}


def bio_entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """{(type, first, last)} of the entities in one BIO (or IOB1) sequence, read as conlleval reads it."""
    entities, kind, start = set(), None, 0
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-")
        continues = prefix == "I" and kind == label
        if kind is not None and not continues:
            entities.add((kind, start, i - 1))
            kind = None
        if prefix in ("B", "I") and not continues:
            kind, start = label, i
    return entities


def entity_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro-averaged precision, recall and F1 over the entities of every sentence."""
    tp = n_gold = n_pred = 0
    for g, p in zip(gold, predicted, strict=True):
        g_entities, p_entities = bio_entities(g), bio_entities(p)
        tp += len(g_entities & p_entities)
        n_gold += len(g_entities)
        n_pred += len(p_entities)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    correct = sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
    total = sum(len(g) for g in gold)
    return {"score": f1, "entity_f1": f1, "precision": precision, "recall": recall,
            "token_accuracy": correct / total if total else 0.0}


def normalize_answer(text: str) -> str:
    """SQuAD v1.1's normalisation: lowercase, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_f1(prediction: str, gold: str) -> float:
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def squad(gold_answers: Sequence[Sequence[str]], predicted: Sequence[str]) -> dict[str, float]:
    """Exact match and token F1 per question, the maximum over its gold answers, averaged over questions."""
    em = f1 = 0.0
    for answers, prediction in zip(gold_answers, predicted, strict=True):
        em += max(float(normalize_answer(prediction) == normalize_answer(a)) for a in answers)
        f1 += max(_token_f1(prediction, a) for a in answers)
    n = max(len(predicted), 1)
    return {"score": f1 / n, "f1": f1 / n, "exact_match": em / n}


def mean_and_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (sample standard deviation / sqrt(n); 0 for one value)."""
    values = np.asarray(values, np.float64)
    if len(values) < 2:
        return (float(values.mean()) if len(values) else float("nan")), 0.0
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values)))
