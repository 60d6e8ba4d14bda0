"""span: extractive question answering, SQuAD v1.1 and v2 (questions without an answer).

    [CLS] question [SEP] context window [SEP]   AutoModelForQuestionAnswering: a start and an end logit per token

([CLS] here is the first token, whatever the family calls it: <s> for RoBERTa and XLM-R, which also separate the
question from the context with </s></s> and have no token types.)

Contexts longer than the model are cut into windows that overlap by `stride` tokens; a question is cut to its
first 64 pieces (BERT's max_query_length) or less, so that a window keeps more context than the stride. A window that does not
hold the whole answer, and every window of a question without an answer (SQuAD v2), is trained to point at
[CLS], as transformers' question-answering examples do. The best span of a question is the best valid span over
all its windows (start <= end, both in the context, at most `max_answer_tokens`), mapped back to characters by
the offsets. Its null score is the lowest [CLS] score (start + end) over its windows; when the training split
holds questions without an answer, the prediction is no answer ("") where the null score beats the best span by
more than a threshold, chosen on validation to maximise the selected metric (as the official v2 evaluation's
best threshold) and reused unchanged on test. Scored as the official SQuAD evaluation: exact match and token F1,
the maximum over the gold answers; a question without an answer scores 1 only for an empty prediction.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from downstream.finetune import metrics as metrics_mod
from downstream.finetune.data import BadRow, DataError, Drop, Split
from downstream.finetune.tasks.base import Evaluation, Features, Stats, Task, mean_stats
from downstream.finetune.tasks.tag import json_field
from schemas.config import Config, flag


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpanColumns(Config):
    question_column: str = flag("question", metavar="NAME")
    """Column of the question (--task span)."""
    context_column: str = flag("context", metavar="NAME")
    """Column of the context (--task span)."""
    answers_column: str = flag("answers", metavar="NAME")
    """Column of the answers, {"text": [...], "answer_start": [...]} as in SQuAD; empty lists: no answer
    (SQuAD v2) (--task span)."""


def question_scores(answers: list[str], prediction: str) -> tuple[float, float]:
    """(exact match, token F1) of one question by metrics.squad_v2 (no gold answer: 1 only for no prediction)."""
    m = metrics_mod.squad_v2([answers], [prediction])
    return m["exact_match"], m["f1"]


MAX_QUESTION_PIECES = 64
"""BERT's run_squad.py max_query_length: longer questions are cut to their first 64 pieces."""


class Span(Task):
    name = "span"
    pipeline = "question-answering"
    model_class_name = "AutoModelForQuestionAnswering"
    per_token = True
    output_names = ("start_logits", "end_logits")
    column_fields = ("question_column", "context_column", "answers_column")
    padding_free_loss = False
    """transformers' question-answering loss is a softmax over every position of the batch, padding included: a
    batch computed in pieces padded less would take another step, so span batches stay whole."""

    def __init__(self, columns, *, stride: int = 32, max_answer_tokens: int = 30, unanswerable: bool | None = None,
                 **options) -> None:
        super().__init__(columns, **options)
        self.stride, self.max_answer_tokens = stride, max_answer_tokens
        self.unanswerable = unanswerable
        """Predict no answer past the threshold (v2): given (a suite's preset), else whether the training split
        has questions without an answer."""

    @classmethod
    def from_config(cls, config) -> Span:
        return cls(config.columns, metric=config.metric, regression=config.regression, stride=config.stride,
                   max_answer_tokens=config.max_answer_tokens)

    def read(self, row: dict, where: str) -> dict:
        c = self.columns
        context, question = str(row[c.context_column] or ""), str(row[c.question_column] or "")
        if not context.strip() or not question.strip():
            raise Drop("empty_question_or_context")
        answers = json_field(row[c.answers_column], where, c.answers_column) or {}
        if not isinstance(answers, dict) or not all(isinstance(answers.get(k) or [], list) for k in ("text", "answer_start")):
            raise DataError(f"{where}: column {c.answers_column!r} is not an object "
                            '{"text": [...], "answer_start": [...]} of two lists')
        texts, starts = [str(t) for t in answers.get("text") or []], list(answers.get("answer_start") or [])
        if len(texts) != len(starts):
            raise DataError(f"{where}: column {c.answers_column!r} has {len(texts)} texts and {len(starts)} answer_start")
        try:
            starts = [int(s) for s in starts]
        except (TypeError, ValueError):
            raise DataError(f"{where}: column {c.answers_column!r}: answer_start {starts!r} are not integers") from None
        wrong = next(((t, s) for t, s in zip(texts, starts) if context[s: s + len(t)] != t), None)
        if wrong is not None:
            t, s = wrong
            raise BadRow("answer_not_at_offset", f"column {c.answers_column!r}: answer {t!r} is not at character {s} "
                         f"of the context (found {context[s: s + len(t)]!r})")
        return {"question": question, "context": context, "answers": texts, "starts": starts}

    def prepare(self, train: Split, others: list[Split]) -> None:
        if self.unanswerable is None:
            self.unanswerable = any(not e["answers"] for e in train.examples)
        super().prepare(train, others)

    def questions(self, examples: list[dict], tokenizer, max_len: int) -> list[str]:
        """The questions, each cut to what leaves a window room for more context than the stride (and to BERT's
        max_query_length, 64 pieces): a longer question would leave the context no room to advance."""
        budget = min(MAX_QUESTION_PIECES, max_len - 4 - self.stride)
        if budget < 1:
            raise DataError(f"--stride {self.stride} leaves no room for a question in windows of {max_len} pieces "
                            f"(at most {max_len - 5})")
        out = []
        for e in examples:
            question = e["question"]
            while True:
                offsets = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
                if len(offsets) <= budget:
                    break
                question = question[: offsets[budget - 1][1]]  # strictly shorter: pieces follow the cut
            out.append(question)
        return out

    def encode(self, examples: list[dict], tokenizer, *, max_len: int) -> Features:
        questions = self.questions(examples, tokenizer, max_len)
        enc = tokenizer(questions, [e["context"] for e in examples], truncation="only_second",
                        max_length=max_len, stride=self.stride, return_overflowing_tokens=True,
                        return_offsets_mapping=True, padding="longest")
        rows = len(enc["input_ids"])
        example_of_row = np.asarray(enc["overflow_to_sample_mapping"])
        starts, ends, in_context = np.zeros(rows, np.int64), np.zeros(rows, np.int64), []
        for row in range(rows):
            e, sequence = examples[example_of_row[row]], enc.sequence_ids(row)
            offsets = enc["offset_mapping"][row]
            in_context.append([s == 1 for s in sequence])
            if not e["answers"]:
                continue  # no answer: both targets stay 0, [CLS]
            first_char, last_char = e["starts"][0], e["starts"][0] + len(e["answers"][0])
            context_tokens = [i for i, s in enumerate(sequence) if s == 1]
            if context_tokens and offsets[context_tokens[0]][0] <= first_char and offsets[context_tokens[-1]][1] >= last_char:
                start = next(i for i in context_tokens if offsets[i][1] > first_char)
                end = max((i for i in context_tokens if offsets[i][0] < last_char), default=-1)
                if start <= end:  # an answer of white space alone covers no piece
                    starts[row], ends[row] = start, end
            # else: the answer is not whole in this window, and both targets stay 0: [CLS]
        tensors = {k: torch.tensor(enc[k]) for k in ("input_ids", "token_type_ids", "attention_mask") if k in enc}  # RoBERTa: no types
        tensors.update(start_positions=torch.from_numpy(starts), end_positions=torch.from_numpy(ends))
        return Features(tensors, example_of_row, {"offsets": enc["offset_mapping"], "in_context": in_context})

    def best_spans(self, outputs, features: Features, examples: list[dict]) -> tuple[list[str], np.ndarray]:
        """Per question: the best span's text, and its null margin (null score - best span score)."""
        start_logits, end_logits = outputs  # (rows, seq) each
        best: dict[int, tuple[float, str]] = {}
        null = np.full(len(examples), np.inf)
        for row, example_index in enumerate(features.example_of_row):
            context = examples[example_index]["context"]
            null[example_index] = min(null[example_index], float(start_logits[row, 0] + end_logits[row, 0]))
            allowed = torch.tensor(features.extra["in_context"][row])
            start = start_logits[row].masked_fill(~allowed, float("-inf"))
            end = end_logits[row].masked_fill(~allowed, float("-inf"))
            scores = start[:, None] + end[None, :]  # (seq, seq): score of the span start..end
            n = scores.shape[0]
            valid = torch.ones(n, n, dtype=torch.bool).triu().tril(self.max_answer_tokens - 1)  # start <= end < start + max
            scores = scores.masked_fill(~valid, float("-inf"))
            flat = int(scores.argmax())
            score = float(scores.view(-1)[flat])
            if score == float("-inf"):
                continue
            s, e = divmod(flat, n)
            offsets = features.extra["offsets"][row]
            if example_index not in best or score > best[example_index][0]:
                best[example_index] = (score, context[offsets[s][0]: offsets[e][1]])
        texts = [best.get(i, (0.0, ""))[1] for i in range(len(examples))]
        margins = np.array([null[i] - best[i][0] if i in best else np.inf for i in range(len(examples))])
        return texts, margins

    def decode(self, outputs, features, examples) -> list:
        texts, margins = self.best_spans(outputs, features, examples)
        return self._apply(texts, margins, 0.0)

    def _apply(self, texts: list[str], margins: np.ndarray, threshold: float) -> list[str]:
        if not self.unanswerable:
            return texts
        return ["" if m > threshold else t for t, m in zip(texts, margins)]

    def evaluate(self, outputs, features, examples, calibration: dict | None = None) -> Evaluation:
        texts, margins = self.best_spans(outputs, features, examples)
        gold = self.gold(examples)
        if not self.unanswerable:
            return Evaluation(self.score(gold, texts), texts)
        threshold = calibration["null_threshold"] if calibration else self.best_threshold(gold, texts, margins)
        predicted = self._apply(texts, margins, threshold)
        return Evaluation(self.score(gold, predicted), predicted, {"null_threshold": threshold})

    def best_threshold(self, gold: list[list[str]], texts: list[str], margins: np.ndarray) -> float:
        """The null-margin threshold that maximises the selected metric on these questions: metrics.py's
        best_null_threshold, the official v2 evaluation's search (a question with no valid span has margin +inf)."""
        finite = np.where(np.isfinite(margins), margins, np.finfo(np.float64).max)
        return float(metrics_mod.best_null_threshold(gold, texts, finite, metric=self.metric)[1])

    def gold(self, examples: list[dict]) -> list:
        return [e["answers"] for e in examples]

    def metrics(self, gold, predicted) -> dict[str, float]:
        if all(gold):  # every question has an answer: SQuAD v1.1's evaluation
            return metrics_mod.squad(gold, predicted)
        return {k: v for k, v in metrics_mod.squad_v2(gold, predicted).items() if not k.endswith("total")}  # no counts

    def default_metric(self) -> str:
        return "f1"

    def sample(self) -> tuple[list, list]:
        return [["a"]], ["a"]  # the selectable metrics; v2 data adds HasAns_f1 and NoAns_f1 to the report

    def stats(self, gold, predicted) -> Stats | None:
        if self.metric not in ("f1", "exact_match"):
            return None
        pick = 0 if self.metric == "exact_match" else 1
        return mean_stats([question_scores(g, p)[pick] for g, p in zip(gold, predicted)])

    def records(self, examples, predicted) -> list[dict]:
        return [{"line": e["line"], "question": e["question"], "prediction": p, "answers": e["answers"]}
                for e, p in zip(examples, predicted)]
