"""What every benchmark suite hands the fine-tuning command, and the file reading the suites share.

In:  a suite's directory (local path or fsspec URL) holding the benchmark's files as users download them.
Out: `SuiteTask`s: per task, its splits as row lists in finetune's row formats (README, "Fine-tune and score":
     classify/pair {text, text_pair?, label}, tag {tokens, tags}, span {id, question, context, answers:
     {text, answer_start}}), every row also carrying `line` (its line, or its question's index in a JSON file),
     with the rows dropped per reason, and the settings the benchmark's convention fixes (kind, regression,
     reported metrics, selection metric, seeds, what model a task starts from).

Every problem with a file (missing, not UTF-8, a row with too few columns where the format allows none) is a
`SuiteError` whose message is one line naming the file and line.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import posixpath
from typing import Any

import fsspec

from schemas.config import Config, flag


class SuiteError(ValueError):
    """A benchmark file that is missing or not in its official format; the message names file and line."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SuiteTask:
    """One task of a suite, ready for the fine-tuning command: its rows and the settings of its benchmark."""

    suite: str
    """The suite it belongs to (glue, squad, squad_v2, conll2003)."""
    name: str
    """Its name in the suite's table (cola, mnli, squad, ...)."""
    kind: str
    """finetune's task kind: classify, pair, tag or span."""
    splits: dict[str, list[dict[str, Any]]]
    """Rows per split: "train", "validation" (selects the learning rate, epoch and SQuAD v2's no-answer
    threshold) and, where the suite has one, "test"; further splits are scored too (MNLI's
    "validation_mismatched")."""
    files: dict[str, dict[str, str]]
    """Per split: {"url", "sha256"} of the file it was read from."""
    dropped: dict[str, dict[str, int]]
    """Per split: rows dropped per reason (a QQP line with missing columns, a SQuAD question without answers)."""
    metrics: tuple[str, ...]
    """Keys of finetune.metrics' dicts that the benchmark reports for this task; its score is their mean (GLUE's
    convention for tasks with two metrics), and MNLI's is that mean over its matched and mismatched splits."""
    selection: str
    """The metrics key that picks the learning rate and epoch, on "validation"."""
    seeds: int
    """Fine-tuning runs per learning rate."""
    regression: bool = False
    """One output and an MSE loss (STS-B)."""
    positive: Any = None
    """The label whose binary F1 is reported (MRPC, QQP)."""
    tag_scheme: str | None = None
    """IOB1, BIO or BIOES (tag tasks): both sides are rewritten to BIO before entity F1."""
    no_answer: bool = False
    """Span task with unanswerable questions (SQuAD v2): no-answer predictions are scored, with a null threshold
    chosen on validation."""
    start_from: str | None = None
    """The task whose fine-tuned model this one starts from instead of the pretrained model ("mnli" for RTE,
    MRPC and STS-B in MosaicBERT's GLUE recipe), or None."""

    def write_rows(self, directory: str) -> dict[str, str]:
        """Each split as a JSON-lines file of finetune's rows (DIR/<task>-<split>.jsonl, `line` left out), for the
        file-based `clozeforge finetune --train/--validation/--test`; {split: path}."""
        import json
        import os

        os.makedirs(directory, exist_ok=True)
        paths = {}
        for split, rows in self.splits.items():
            paths[split] = os.path.join(directory, f"{self.name}-{split}.jsonl")
            with open(paths[split], "w", encoding="utf-8") as f:
                f.writelines(json.dumps({k: v for k, v in r.items() if k != "line"}, ensure_ascii=False) + "\n"
                             for r in rows)
        return paths

    @property
    def scored_splits(self) -> tuple[str, ...]:
        """The splits the suite reports: test when there is one, else validation; plus any extra splits."""
        main = "test" if "test" in self.splits else "validation"
        return (main, *(s for s in self.splits if s not in ("train", "validation", "test")))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SuiteOptions(Config):
    """How a suite's tasks are set up (nested in the fine-tuning command's config, which makes them flags)."""

    from_mnli: bool = True
    """Start RTE, MRPC and STS-B from the MNLI fine-tuned model, as MosaicBERT's GLUE recipe does (--suite glue)."""
    suite_holdout: float = flag(0.0, metavar="FRACTION")
    """Hold this share of a suite's training data out as validation (whole SQuAD articles; GLUE rows) and score on
    the official dev files as a test split; 0 selects on the dev files and reports them, as the anchors do (a
    selected score flatters a little). CoNLL-2003 has its own validation file and ignores it."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.suite_holdout < 1.0:
            raise ValueError(f"--suite-holdout must be in [0, 1), got {self.suite_holdout}")


class Suite:
    """One benchmark: a name, the files it expects, and a reader from its directory to SuiteTasks."""

    name: str = ""
    description: str = ""
    task_count: int = 1
    """Tasks in the whole suite: the table's average says when fewer were run."""

    def load(self, root: str, options: SuiteOptions) -> list[SuiteTask]:
        raise NotImplementedError


def hold_out(splits: dict, files: dict, dropped: dict, fraction: float, key) -> tuple[dict, dict, dict]:
    """(splits, files, dropped) with `fraction` of train's groups (rows sharing `key(row)`, chosen by a hash of it:
    the same on every machine) moved to "validation", and every evaluation split renamed from validation to test."""
    if fraction <= 0:
        return splits, files, dropped

    def renamed(d: dict) -> dict:
        return {(k.replace("validation", "test", 1) if k != "train" else k): v for k, v in d.items()}

    splits, files, dropped = renamed(splits), renamed(files), renamed(dropped)
    train, held = [], []
    for row in splits["train"]:
        h = int.from_bytes(hashlib.sha256(key(row).encode()).digest()[:8], "big") / 2**64
        (held if h < fraction else train).append(row)
    if not train or not held:
        raise SuiteError(f"{files['train']['url']}: --suite-holdout {fraction} leaves "
                         f"{'no training' if not train else 'no validation'} rows")
    splits = {"train": train, "validation": held, **{k: v for k, v in splits.items() if k != "train"}}
    files = {**files, "validation": {**files["train"], "holdout": fraction}}
    return splits, files, {**dropped, "validation": {}}


# ---- reading ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ReadFile:
    url: str
    sha256: str
    text: str


def exists(url: str) -> bool:
    fs, path = fsspec.core.url_to_fs(url)
    return fs.exists(path)


def join(root: str, *parts: str) -> str:
    return posixpath.join(root.rstrip("/"), *parts)


def read_text(url: str) -> ReadFile:
    """The whole file, decoded as UTF-8 (a BOM dropped); a bad byte is an error naming its line."""
    try:
        with fsspec.open(url, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise SuiteError(f"{url}: no such file") from None
    except (OSError, ValueError) as e:
        raise SuiteError(f"{url}: cannot be read ({e})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise SuiteError(f"{url}:{line}: not UTF-8 ({e.reason} at byte {e.start})") from None
    return ReadFile(url, hashlib.sha256(data).hexdigest(), text)


def tsv_lines(text: str) -> list[tuple[int, list[str]]]:
    """[(line number, fields)] of a tab-separated file, split on tabs only: no CSV quoting, because GLUE's
    sentences may start with a double quote that a CSV reader would take as an opening quote and run on into
    the next lines (GLUE's own loaders read it the same way). Empty lines are skipped."""
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if line:
            out.append((number, line.split("\t")))
    return out


def drops() -> collections.Counter:
    return collections.Counter()

