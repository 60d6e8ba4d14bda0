"""A sense-labelled table → instances with their contextual vectors, every row kept or dropped with a counted reason.

In:  a table (.jsonl, .csv, .tsv, .parquet; any fsspec URL) read by finetune's reader (finetune/data.py over
     schemas/tables.py: lines and records counted, a bad record one line naming file and line), one row an
     instance: `text`; its target, `start` and `end` (characters, end excluded) or `index` (the word's number
     among the tokenizer's words, as `clozeforge embed --pooling words` numbers them); `sense` (fit, evaluate;
     optional for predict); `lemma` (optional: the word whose senses compete; without it every sense does).
Out: `read(url, need_sense)` → a finetune `Split` of instance dicts; `Instances.encode(split, encoder, ...)` → their
     vectors, lemmas and senses, with the rows the model cannot give a vector dropped (counted), and `restrict`
     drops the instances a fitted inventory cannot score (a lemma it has no sense for, a sense it never saw).

A bad row is one line naming the file and line, or with `skip_bad_rows` a drop counted at its line: a span outside
its text or covering no word piece (bad_span), a word index past the text's words (bad_index), a target the
tokenizer reads as [UNK] only (unknown_word), a lemma no sense was fitted for (unknown_lemma), a sense the training
file has no instance of (unseen_sense). A row with no text or no sense is a counted drop (empty_text, no_sense); a
target past the model's trained length is a counted drop (past_positions), said in a note.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from downstream.contextual.encoder import Encoder
from downstream.finetune.data import BadRow, DataError, Drop, Split, read_split

ERRORS = ("bad_span", "bad_index", "unknown_word", "unknown_lemma", "unseen_sense")
"""Reasons that stop the command unless --skip-bad-rows (then they are counted drops)."""


def _int(value, column: str) -> int:
    if isinstance(value, bool):
        raise BadRow("bad_span", f"column {column!r} holds {value!r}, not a whole number")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadRow("bad_span", f"column {column!r} holds {value!r}, not a whole number") from None
    if isinstance(value, float) and number != value:
        raise BadRow("bad_span", f"column {column!r} holds {value!r}, not a whole number")
    return number


class InstanceReader:
    """What finetune's read_split asks of a task: the columns it needs, and one row made an instance."""

    def __init__(self, need_sense: bool) -> None:
        self.need_sense = need_sense

    def required(self) -> list[tuple[str, str]]:
        return [("text", "a `text` column")] + ([("sense", "a `sense` column")] if self.need_sense else [])

    def read(self, row: dict, where: str) -> dict:
        text = row["text"]
        if text is None or (isinstance(text, str) and not text.strip()):
            raise Drop("empty_text")
        if not isinstance(text, str):
            raise BadRow("bad_span", f"column 'text' holds {type(text).__name__}, not text")
        if "start" in row and "end" in row:
            start, end = _int(row["start"], "start"), _int(row["end"], "end")
            if not 0 <= start < end <= len(text):
                raise BadRow("bad_span", f"span [{start}, {end}) is not within the text's {len(text)} characters")
            target = ("span", start, end)
        elif "index" in row:
            index = _int(row["index"], "index")
            if index < 0:
                raise BadRow("bad_index", f"word index {index} is negative")
            target = ("word", index, 0)
        else:
            raise DataError(f"{where}: no target: give `start` and `end` (characters) or `index` (a word's number)")
        sense = row.get("sense")
        if self.need_sense and (sense is None or str(sense).strip() == ""):
            raise Drop("no_sense")
        lemma = row.get("lemma")
        return {"text": text, "target": target, "sense": None if sense is None else str(sense),
                "lemma": None if lemma is None or str(lemma).strip() == "" else str(lemma)}


def read(url: str, *, need_sense: bool, skip_bad_rows: bool, quoting: str) -> Split:
    """Every row of `url` kept as an instance or dropped with a counted reason (DataError: one line)."""
    return read_split(url, InstanceReader(need_sense), skip_bad_rows=skip_bad_rows, quoting=quoting)


def refuse_or_drop(split: Split, example: dict, reason: str, message: str, skip_bad_rows: bool) -> None:
    """An error naming file and line, or (skip_bad_rows, or a reason that is no error) a counted drop."""
    if reason in ERRORS and not skip_bad_rows:
        raise DataError(f"{split.url}:{example['line']}: {message} (--skip-bad-rows counts such rows as drops instead)")
    split.account.drop(reason, example["line"])


@dataclasses.dataclass
class Instances:
    split: Split
    vectors: np.ndarray
    """(instances, hidden), or (instances, layers, hidden) per layer."""
    lemmas: list[str | None]
    senses: list[str | None]
    lines: list[int]

    @classmethod
    def encode(cls, split: Split, encoder: Encoder, layers: tuple[int, ...], *, skip_bad_rows: bool,
               batch_size: int = 32, standardize=None) -> Instances:
        """The vectors of the split's instances; a target with none is refused or dropped (see the module docstring)."""
        examples = split.examples
        vectors, misses = encoder.targets([e["text"] for e in examples], [e["target"] for e in examples], layers,
                                          batch_size=batch_size)
        keep = []
        for i, (example, miss) in enumerate(zip(examples, misses)):
            if miss is None:
                keep.append(i)
            else:
                refuse_or_drop(split, example, miss.reason, miss.message, skip_bad_rows)
        split.examples = [examples[i] for i in keep]
        split.account.check(len(split.examples), split.url)
        kept = vectors[keep]
        return cls(split, standardize.apply(kept) if standardize is not None else kept,
                   [examples[i]["lemma"] for i in keep], [examples[i]["sense"] for i in keep],
                   [examples[i]["line"] for i in keep])

    def restrict(self, known: set[tuple[str | None, str]], *, need_sense: bool, skip_bad_rows: bool) -> Instances:
        """Only the instances whose lemma (and, with need_sense, whose sense) the fitted inventory has."""
        lemmas = {lemma for lemma, _ in known}
        keep = []
        for i, example in enumerate(self.split.examples):
            lemma, sense = self.lemmas[i], self.senses[i]
            if lemma not in lemmas:
                what = f"lemma {lemma!r}" if lemma is not None else "an instance without a lemma"
                refuse_or_drop(self.split, example, "unknown_lemma", f"{what}: no sense of it was fitted", skip_bad_rows)
            elif need_sense and (lemma, sense) not in known:
                refuse_or_drop(self.split, example, "unseen_sense",
                               f"sense {sense!r}{f' of {lemma!r}' if lemma else ''} has no instance in the training file",
                               skip_bad_rows)
            else:
                keep.append(i)
        self.split.examples = [self.split.examples[i] for i in keep]
        self.split.account.check(len(self.split.examples), self.split.url)
        return Instances(self.split, self.vectors[keep], [self.lemmas[i] for i in keep], [self.senses[i] for i in keep],
                         [self.lines[i] for i in keep])
