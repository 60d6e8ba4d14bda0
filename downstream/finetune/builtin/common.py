"""What every built-in task shares: the task row, the split into disjoint train/validation/test rows, the writer.

In:  a task's examples, `{label: [(group, row), ...]}`, where a group is the document a row came from (a man page,
     a manual, a source file); rows of one group never straddle two splits, so a test row is never a sibling of a
     training row from the same document.
Out: train.jsonl, validation.jsonl, test.jsonl under a directory (rows as `clozeforge finetune` reads them:
     {"text", "label"} or {"text", "text_pair", "label"}), the same bytes for the same seed and machine image.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import random
import re
from collections.abc import Callable, Iterable

Row = dict[str, str]
Grouped = dict[str, list[tuple[str, Row]]]
SPLITS = ("train", "validation", "test")
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(_[A-Z]{2})?(@[a-z]+)?")
"""A language as locales (and man-db's folders) name it: de, pt_BR, sr@latin."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sizes:
    """Rows per class in each split: few training labels, as the demo's budget allows and where pretraining shows."""

    train: int = 32
    """Training rows per class."""
    validation: int = 24
    """Validation rows per class (the learning-rate choice)."""
    test: int = 64
    """Test rows per class (the reported score)."""
    per_group: int = 3
    """At most this many rows of one group (document) per class, so that a few long documents do not make a class."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuiltinTask:
    """One built-in task, a row of builtin/__init__.py's TASKS: its name, the `clozeforge finetune --task` kind,
    where its text comes from, how many rows each split takes, and the function that reads its text."""

    name: str
    kind: str = "classify"
    """`clozeforge finetune --task`: classify or pair."""
    source: str
    """Where the text comes from, in words (printed by the demo)."""
    root: str = ""
    """The folder its text is read from (empty: the running interpreter's standard library)."""
    sizes: Sizes = Sizes()
    min_words: int = 12
    """Shortest text kept, in words."""
    grouped: Callable[..., Grouped] | None = None
    """Its rows by label, each with the group (document) it comes from; `write` splits them by group. Called as
    grouped(task, rng), or grouped(task, rng, tally) by a transfer (a Tally: the documents it read, kept, dropped)."""
    writer: Callable[[BuiltinTask, str, int], list[str]] | None = None
    """For a task that draws its splits its own way (pairs): writes them itself, instead of `grouped`."""
    translations: str = ""
    """Where its text in another language lies, `{root}` and `{language}` filled in ("{root}/{language}", man-db's
    layout: /usr/share/man/de/man1); empty: English only. A language is where the same task's text is read, so it
    is a field of the row, not another row: `in_language(code)` is this task read there (the same labels, sizes
    and cleaning), and `clozeforge finetune --test-language` scores a model trained on English on it (transfer.py)."""
    language: str = "en"
    """The language its text is read in: en (at `root`), or a code under `translations` (set by `in_language`)."""
    exclude: frozenset[str] = frozenset()
    """Groups (documents, by name) left unread: a transfer leaves out the English originals of its test pages."""

    @property
    def text_root(self) -> str:
        """Where its text in `language` lies."""
        return self.root if self.language == "en" else self.translations.format(root=self.root, language=self.language)

    def in_language(self, code: str) -> BuiltinTask:
        """This task read in language `code`; LookupError (one line) when it has no translations or none in `code`."""
        if not self.translations:
            raise LookupError(f"--test-language: {self.name} has no translations (English only)")
        if not LANGUAGE_CODE.fullmatch(code):
            raise LookupError(f"--test-language {code!r}: not a language code (ll, ll_CC or ll_CC@variant, as locales are named)")
        task = dataclasses.replace(self, language=code)
        if not os.path.isdir(task.text_root):
            here = os.path.dirname(task.text_root)
            have = sorted(d for d in os.listdir(here) if LANGUAGE_CODE.fullmatch(d)) if os.path.isdir(here) else []
            raise LookupError(f"--test-language {code}: no {task.text_root} on this machine"
                              + (f" (languages there: {' '.join(have)})" if have else ""))
        return task

    def write(self, directory: str, seed: int = 0) -> list[str]:
        """Write the three splits under `directory`; return the class names: the labels whose text fills every
        split. Raises LookupError when fewer than two do (this machine lacks the text)."""
        if self.writer is not None:
            return self.writer(self, directory, seed)
        rng = random.Random(f"{self.name}:{seed}")
        by_label = split_by_group(self.grouped(self, rng), self.sizes, rng)
        full = {"train": self.sizes.train, "validation": self.sizes.validation, "test": self.sizes.test}
        classes = sorted(label for label, splits in by_label.items() if all(len(splits[s]) == n for s, n in full.items()))
        if len(classes) < 2:
            raise LookupError(f"{self.name}: this machine lacks the text ({self.source}) for two classes")
        write_splits(directory, {s: [row for c in classes for row in by_label[c][s]] for s in SPLITS}, rng)
        return classes


@dataclasses.dataclass
class Tally:
    """The documents a task's reader met: each read one is kept (it gave rows) or dropped with a reason; and the
    rows left out of kept documents, per reason. Filled by `grouped(task, rng, tally)`."""

    read: int = 0
    kept: int = 0
    dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    rows_dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    left_out: int = 0
    """Documents not read because the task's `exclude` names them."""
    notes: dict = dataclasses.field(default_factory=dict)
    """What the reader decided from the text (man-sections: the headings it left out)."""

    def record(self) -> dict:
        """results.json's account; read == kept + sum(dropped), checked."""
        if self.read != self.kept + sum(self.dropped.values()):
            raise AssertionError(f"documents read {self.read} != kept {self.kept} + dropped {dict(self.dropped)}")
        return {"read": self.read, "kept": self.kept, "dropped": dict(sorted(self.dropped.items())), "left_out": self.left_out,
                "rows_dropped": {k: v for k, v in sorted(self.rows_dropped.items()) if v}, **self.notes}


def split_by_group(grouped: Grouped, sizes: Sizes, rng: random.Random) -> dict[str, dict[str, list[Row]]]:
    """{label: {split: rows}}: per label, groups in a seeded order fill test, then validation, then train, at most
    `per_group` rows each; each group's rows go to one split only."""
    out: dict[str, dict[str, list[Row]]] = {}
    for label in sorted(grouped):
        by_group: dict[str, list[Row]] = {}
        for group, row in grouped[label]:
            by_group.setdefault(group, []).append(row)
        groups = sorted(by_group)
        rng.shuffle(groups)
        want = {"test": sizes.test, "validation": sizes.validation, "train": sizes.train}
        out[label] = {s: [] for s in SPLITS}
        for group in groups:
            split = next((s for s in ("test", "validation", "train") if want[s]), None)
            if split is None:
                break
            rows = by_group[group][:]
            rng.shuffle(rows)
            taken = rows[:min(sizes.per_group, want[split])]
            out[label][split] += taken
            want[split] -= len(taken)
    return out


def write_splits(directory: str, splits: dict[str, list[Row]], rng: random.Random) -> None:
    os.makedirs(directory, exist_ok=True)
    for split in SPLITS:
        rows = splits[split][:]
        rng.shuffle(rows)
        path = os.path.join(directory, f"{split}.jsonl")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        os.replace(path + ".tmp", path)


def paragraphs_of(lines: Iterable[str], min_words: int) -> list[str]:
    """Blank-line separated paragraphs of `lines`, whitespace folded, with at least `min_words` words."""
    out, current = [], []
    for line in [*lines, ""]:
        if line.strip():
            current.append(line)
        elif current:
            text = " ".join(" ".join(current).split())
            if len(text.split()) >= min_words:
                out.append(text)
            current = []
    return out
