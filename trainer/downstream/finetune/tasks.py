"""The four shapes of BERT fine-tuning: inputs for the model, the transformers head, predictions back to labels.

In:  examples from `data.read_split`, a transformers fast tokenizer (the export's), the label map.
Out: `Features` (tensors the model takes, plus what decoding needs), the `AutoModelFor...` class of the task,
     and `decode` → predictions in the data's own terms (labels, float scores, tags per word, answer strings),
     which `metrics` scores.

    classify  [CLS] text [SEP]                     head on [CLS] (AutoModelForSequenceClassification;
    pair      [CLS] text [SEP] text_pair [SEP]      one output and an MSE loss when the labels are floats)
    tag       words split into pieces, the first piece of each word carries its tag, the others -100 (ignored),
              as in the BERT paper's NER recipe (AutoModelForTokenClassification); a word cut off by the
              length limit is predicted "O"
    span      [CLS] question [SEP] context window [SEP]; contexts longer than the model are cut into windows
              that overlap by `stride` tokens; a window that does not hold the whole answer is trained to point
              at [CLS]; the prediction is the best valid span over every window of the question (start <= end,
              both in the context, at most `max_answer_tokens`), mapped back to characters by the offsets
              (AutoModelForQuestionAnswering)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

TASKS = ("classify", "pair", "tag", "span")


@dataclasses.dataclass
class Features:
    tensors: dict[str, torch.Tensor]
    """Model inputs and training targets, one row per example (per window for span)."""
    example_of_row: np.ndarray
    """(rows,) index of the example each row came from (windows of one question share it)."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What decoding needs: first-piece positions per word (tag), offsets and context masks (span)."""


def model_class(task: str):
    import transformers

    return {"classify": transformers.AutoModelForSequenceClassification,
            "pair": transformers.AutoModelForSequenceClassification,
            "tag": transformers.AutoModelForTokenClassification,
            "span": transformers.AutoModelForQuestionAnswering}[task]


def head_config(task: str, labels) -> dict[str, Any]:
    """The config overrides that size the head: num_labels, label names (saved with the model), problem type."""
    if task == "span":
        return {}
    if labels is None:  # float labels: one output, MSE loss
        return {"num_labels": 1, "problem_type": "regression"}
    names = [str(x) for x in labels.labels]
    return {"num_labels": len(names), "id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)},
            **({"problem_type": "single_label_classification"} if task != "tag" else {})}


def encode(task: str, examples: list[dict], tokenizer, labels, *, max_len: int, stride: int) -> Features:
    if task in ("classify", "pair"):
        pairs = [e["text_pair"] for e in examples] if task == "pair" else None
        enc = tokenizer([e["text"] for e in examples], pairs, truncation=True, max_length=max_len, padding="longest",
                        return_tensors="pt")
        if labels is None:
            target = torch.tensor([float(e["label"]) for e in examples], dtype=torch.float32)
        else:
            target = torch.tensor([labels.ids[e["label"]] for e in examples])
        return Features({**enc, "labels": target}, np.arange(len(examples)))
    if task == "tag":
        enc = tokenizer([e["tokens"] for e in examples], is_split_into_words=True, truncation=True, max_length=max_len,
                        padding="longest", return_tensors="pt")
        target = torch.full(enc["input_ids"].shape, -100)
        first_pieces = []
        for row, e in enumerate(examples):
            firsts, previous = {}, None
            for position, word in enumerate(enc.word_ids(row)):
                if word is not None and word != previous:
                    firsts[word] = position
                    target[row, position] = labels.ids[e["tags"][word]]
                previous = word
            first_pieces.append([firsts.get(w) for w in range(len(e["tokens"]))])
        return Features({**enc, "labels": target}, np.arange(len(examples)), {"first_pieces": first_pieces})
    enc = tokenizer([e["question"] for e in examples], [e["context"] for e in examples], truncation="only_second",
                    max_length=max_len, stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True,
                    padding="longest")
    rows = len(enc["input_ids"])
    example_of_row = np.asarray(enc["overflow_to_sample_mapping"])
    starts, ends, in_context = np.zeros(rows, np.int64), np.zeros(rows, np.int64), []
    for row in range(rows):
        e, sequence = examples[example_of_row[row]], enc.sequence_ids(row)
        offsets = enc["offset_mapping"][row]
        in_context.append([s == 1 for s in sequence])
        first_char, last_char = e["starts"][0], e["starts"][0] + len(e["answers"][0])
        context_tokens = [i for i, s in enumerate(sequence) if s == 1]
        if offsets[context_tokens[0]][0] <= first_char and offsets[context_tokens[-1]][1] >= last_char:
            starts[row] = next(i for i in context_tokens if offsets[i][1] > first_char)
            ends[row] = max(i for i in context_tokens if offsets[i][0] < last_char)
        # else: the answer is not whole in this window, and both targets stay 0: [CLS]
    tensors = {k: torch.tensor(enc[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    tensors.update(start_positions=torch.from_numpy(starts), end_positions=torch.from_numpy(ends))
    return Features(tensors, example_of_row, {"offsets": enc["offset_mapping"], "in_context": in_context})


def gold(task: str, examples: list[dict], labels) -> list:
    """What `metrics` compares the predictions with, in the order of `examples`."""
    if task in ("classify", "pair"):
        return [float(e["label"]) if labels is None else labels.ids[e["label"]] for e in examples]
    if task == "tag":
        return [e["tags"] for e in examples]
    return [e["answers"] for e in examples]


def decode(task: str, outputs: list[torch.Tensor], features: Features, examples: list[dict], labels,
           *, max_answer_tokens: int = 30) -> list:
    """Predictions per example from the model's outputs on every row of `features` (logits, or start/end logits)."""
    if task in ("classify", "pair"):
        logits = outputs[0]
        return logits[:, 0].tolist() if labels is None else logits.argmax(-1).tolist()
    if task == "tag":
        best = outputs[0].argmax(-1)  # (rows, seq)
        return [[labels.labels[best[row, p]] if p is not None else "O" for p in firsts]
                for row, firsts in enumerate(features.extra["first_pieces"])]
    start_logits, end_logits = outputs  # (rows, seq) each
    best: dict[int, tuple[float, str]] = {}
    for row, example_index in enumerate(features.example_of_row):
        context = examples[example_index]["context"]
        allowed = torch.tensor(features.extra["in_context"][row])
        start = start_logits[row].masked_fill(~allowed, float("-inf"))
        end = end_logits[row].masked_fill(~allowed, float("-inf"))
        scores = start[:, None] + end[None, :]  # (seq, seq): score of the span start..end
        n = scores.shape[0]
        valid = torch.ones(n, n, dtype=torch.bool).triu().tril(max_answer_tokens - 1)  # start <= end < start + max
        scores = scores.masked_fill(~valid, float("-inf"))
        flat = int(scores.argmax())
        score = float(scores.view(-1)[flat])
        if score == float("-inf"):
            continue
        s, e = divmod(flat, n)
        offsets = features.extra["offsets"][row]
        text = context[offsets[s][0]: offsets[e][1]]
        if example_index not in best or score > best[example_index][0]:
            best[example_index] = (score, text)
    return [best.get(i, (0.0, ""))[1] for i in range(len(examples))]


def score(task: str, gold_values: list, predicted: list, labels) -> dict[str, float]:
    from trainer.downstream.finetune import metrics

    if task in ("classify", "pair"):
        return metrics.regression(gold_values, predicted) if labels is None else metrics.classification(gold_values, predicted)
    if task == "tag":
        return metrics.entity_f1(gold_values, predicted)
    return metrics.squad(gold_values, predicted)


def prediction_records(task: str, examples: list[dict], predicted: list, labels) -> list[dict]:
    """One JSON record per example of the test split: its line, the prediction (and the gold, when known)."""
    out = []
    for e, p in zip(examples, predicted):
        if task in ("classify", "pair"):
            value = p if labels is None else labels.labels[p]
            out.append({"line": e["line"], "prediction": value, "label": e["label"]})
        elif task == "tag":
            out.append({"line": e["line"], "tokens": e["tokens"], "prediction": p, "tags": e["tags"]})
        else:
            out.append({"line": e["line"], "question": e["question"], "prediction": p, "answers": e["answers"]})
    return out
