"""Downstream metrics, each the reference definition (contract 8 of DESIGN.md), from maintained code where it exists.

In:  gold and predicted labels (class ids, floats, tag sequences, or answer strings, with no-answer scores for
     SQuAD v2).
Out: {metric name: value}; every dict holds "score", the number runs are compared by unless a task or suite names
     another key (accuracy for classification, Pearson for regression, entity F1 for tagging, token F1 for spans).

- scikit-learn computes accuracy, macro-F1, the binary F1 of one positive class (MRPC, QQP) and MCC (CoLA);
  scipy Pearson and Spearman (STS-B).
- Entity F1 is CoNLL's, as seqeval computes it in its default (non-strict) mode: an entity is (type, first token,
  last token), found only when both ends and the type match. Tag sequences may be IOB1 (CoNLL-2003 as
  distributed: I- opens an entity, B- only splits two adjacent ones of one type), BIO (IOB2) or BIOES; the scheme
  is detected from the gold tags (`tag_scheme`) and both sides are rewritten to BIO before chunking, where an I-
  tag that does not continue an entity of its type opens one, as conlleval and seqeval read it.
- SQuAD v1.1: exact match and token F1 as the official evaluation script defines them, normalisation included
  (lowercase, strip punctuation, drop the articles a/an/the, collapse white space), the maximum over a
  question's gold answers, averaged over questions.
- SQuAD v2.0: the same, plus its no-answer rules: a question whose gold answers are empty (or normalise to
  nothing) has the one gold answer "", which an empty prediction matches (EM and F1 1) and anything else misses
  (0); scores split into HasAns and NoAns; with a no-answer score per question, a question is predicted
  unanswerable when its score is above a threshold, and `best_null_threshold` picks that threshold the way the
  official script's best-threshold search does (to be chosen on validation and applied to test).
Values are fractions in [0, 1] (Pearson, Spearman and MCC in [-1, 1]); results.json and the progress lines show
points (x 100).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence

import numpy as np


def classification(gold: Sequence[int], predicted: Sequence[int], *, positive: int | None = None) -> dict[str, float]:
    """Accuracy, macro-F1 and MCC; with `positive` (the id of the positive class) also that class's binary F1."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    accuracy = float(accuracy_score(gold, predicted))
    out = {"score": accuracy, "accuracy": accuracy,
           "macro_f1": float(f1_score(gold, predicted, average="macro", zero_division=0)),
           "mcc": float(matthews_corrcoef(gold, predicted))}
    if positive is not None:
        # labels=[positive] keeps the binary F1 defined when one side never shows the class (sklearn's
        # average="binary" refuses label sets other than {0, 1} or {-1, 1})
        out["f1"] = float(f1_score(gold, predicted, labels=[positive], average="micro", zero_division=0))
    return out


def regression(gold: Sequence[float], predicted: Sequence[float]) -> dict[str, float]:
    from scipy.stats import pearsonr, spearmanr

    gold, predicted = np.asarray(gold, np.float64), np.asarray(predicted, np.float64)
    if np.ptp(predicted) == 0 or np.ptp(gold) == 0:  # a constant has no correlation; scipy warns and returns nan
        pearson = spearman = 0.0
    else:
        pearson, spearman = float(pearsonr(gold, predicted)[0]), float(spearmanr(gold, predicted)[0])
    return {"score": pearson, "pearson": pearson, "spearman": spearman,
            "mse": float(np.mean((gold - predicted) ** 2))}


# ---- tagging -------------------------------------------------------------------------------------------------

TAG_SCHEMES = ("IOB1", "BIO", "BIOES")
_TAG = re.compile(r"^(O|[BIES]-.+)$")


def tag_scheme(sequences: Sequence[Sequence[str]]) -> str:
    """The scheme of tag sequences: "BIOES" when E-/S- tags occur, "IOB1" when an I- tag opens an entity (it
    follows O, another type, or starts the sentence), else "BIO". Anything but O and B-/I-/E-/S-<type> tags is a
    ValueError naming what was found."""
    odd = sorted({t for seq in sequences for t in seq if not isinstance(t, str) or not _TAG.match(t)}, key=str)
    if odd:
        shown = ", ".join(repr(t) for t in odd[:5]) + (f" (+{len(odd) - 5} more)" if len(odd) > 5 else "")
        raise ValueError(f"tags are not IOB1, BIO or BIOES (O, or B-/I-/E-/S- and a type): found {shown}")
    prefixes = {t[0] for seq in sequences for t in seq}
    if prefixes & {"E", "S"}:
        return "BIOES"
    for seq in sequences:
        previous = "O"
        for tag in seq:
            if tag[0] == "I" and previous[2:] != tag[2:]:
                return "IOB1"
            previous = tag
    return "BIO"


def to_bio(tags: Sequence[str], scheme: str) -> list[str]:
    """One sequence rewritten to BIO: IOB1's entity-opening I-X becomes B-X; BIOES's S-X becomes B-X, E-X I-X."""
    if scheme not in TAG_SCHEMES:
        raise ValueError(f"tag scheme must be one of {', '.join(TAG_SCHEMES)}, got {scheme!r}")
    if scheme == "BIOES":
        return ["B" + t[1:] if t[0] == "S" else "I" + t[1:] if t[0] == "E" else t for t in tags]
    if scheme == "IOB1":
        out, previous = [], "O"
        for tag in tags:
            out.append("B" + tag[1:] if tag[0] == "I" and previous[2:] != tag[2:] else tag)
            previous = tag
        return out
    return list(tags)


def bio_entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """{(type, first, last)} of the entities in one BIO sequence, read as seqeval's default mode reads it: B-
    opens an entity, I- continues one of its type or else opens one, O or a change of type closes it."""
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


def entity_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], *,
              scheme: str | None = None) -> dict[str, float]:
    """Micro-averaged entity precision, recall and F1 over every sentence, after rewriting both sides from
    `scheme` (default: detected from the gold tags) to BIO."""
    scheme = scheme or tag_scheme(gold)
    tp = n_gold = n_pred = correct = total = 0
    for g, p in zip(gold, predicted, strict=True):
        g_entities, p_entities = bio_entities(to_bio(g, scheme)), bio_entities(to_bio(p, scheme))
        tp += len(g_entities & p_entities)
        n_gold += len(g_entities)
        n_pred += len(p_entities)
        correct += sum(a == b for a, b in zip(g, p))
        total += len(g)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"score": f1, "entity_f1": f1, "precision": precision, "recall": recall,
            "token_accuracy": correct / total if total else 0.0}


# ---- SQuAD ---------------------------------------------------------------------------------------------------

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation (v1.1 and v2.0 alike): lowercase, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _token_f1(prediction: str, gold: str) -> float:
    """v2.0's token F1, which is v1.1's except that an empty side scores 1 when both are empty, else 0."""
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def squad(gold_answers: Sequence[Sequence[str]], predicted: Sequence[str]) -> dict[str, float]:
    """SQuAD v1.1: exact match and token F1 per question, the maximum over its gold answers, averaged."""
    em = f1 = 0.0
    for answers, prediction in zip(gold_answers, predicted, strict=True):
        if not answers:
            raise ValueError("SQuAD v1.1 scores answerable questions only: a question has no gold answer (use squad_v2)")
        em += max(float(normalize_answer(prediction) == normalize_answer(a)) for a in answers)
        # v1.1's F1 of an answer that normalises to nothing is 0 (no common token), even against ""
        f1 += max(_token_f1(prediction, a) if normalize_answer(a) else 0.0 for a in answers)
    n = max(len(predicted), 1)
    return {"score": f1 / n, "f1": f1 / n, "exact_match": em / n}


def _v2_per_question(gold_answers, predicted) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exact, f1, has_answer) per question; a question's gold answers are those that normalise to something,
    or the one answer "" when none does."""
    exact, f1, has = [], [], []
    for answers, prediction in zip(gold_answers, predicted, strict=True):
        golds = [a for a in answers if normalize_answer(a)] or [""]
        exact.append(max(float(normalize_answer(prediction) == normalize_answer(a)) for a in golds))
        f1.append(max(_token_f1(prediction, a) for a in golds))
        has.append(bool(answers))  # as the official script: a question with answers is HasAns, whatever their text
    return np.asarray(exact), np.asarray(f1), np.asarray(has, bool)


def squad_v2(gold_answers: Sequence[Sequence[str]], predicted: Sequence[str], *,
             na_scores: Sequence[float] | None = None, threshold: float | None = None) -> dict[str, float]:
    """SQuAD v2.0. `predicted`: the best answer text per question ("" for no answer). With `na_scores` (higher:
    more likely unanswerable) and `threshold`, a question whose score is above the threshold is predicted
    unanswerable. Out: exact_match, f1 (= score), and HasAns_/NoAns_ exact_match, f1 and total (the split's
    question count; a split with no question is left out)."""
    exact, f1, has = _v2_per_question(gold_answers, predicted)
    if threshold is not None:
        if na_scores is None:
            raise ValueError("a no-answer threshold needs the no-answer scores")
        null = np.asarray(na_scores, np.float64) > threshold
        exact = np.where(null, (~has).astype(float), exact)
        f1 = np.where(null, (~has).astype(float), f1)
    out = {"score": _mean(f1), "f1": _mean(f1), "exact_match": _mean(exact), "total": float(len(f1))}
    for name, mask in (("HasAns", has), ("NoAns", ~has)):
        if mask.any():
            out.update({f"{name}_exact_match": _mean(exact[mask]), f"{name}_f1": _mean(f1[mask]),
                        f"{name}_total": float(mask.sum())})
    if threshold is not None:
        out["null_threshold"] = float(threshold)
    return out


def best_null_threshold(gold_answers: Sequence[Sequence[str]], predicted: Sequence[str], na_scores: Sequence[float],
                        *, metric: str = "f1") -> tuple[float, float]:
    """(best score, threshold) of SQuAD v2's best-threshold search: start from every question predicted
    unanswerable (the NoAns ones right), then answer the questions in increasing no-answer score, each adding
    its answer's score (answerable), or losing its point when its prediction is not empty (unanswerable); the
    threshold is the score of the question after which the running total was highest (0.0 when answering
    nothing is best). Questions with equal scores are taken in their given order, as a stable sort does."""
    if metric not in ("f1", "exact_match"):
        raise ValueError(f"metric must be f1 or exact_match, got {metric!r}")
    exact, f1, has = _v2_per_question(gold_answers, predicted)
    scores = f1 if metric == "f1" else exact
    na = np.asarray(na_scores, np.float64)
    current = best = float((~has).sum())
    threshold = 0.0
    for i in np.argsort(na, kind="stable"):
        current += scores[i] if has[i] else (-1.0 if predicted[i] else 0.0)
        if current > best:
            best, threshold = current, float(na[i])
    return best / max(len(scores), 1), threshold


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else 0.0

