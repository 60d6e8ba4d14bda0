"""LearnVocabulary (and ReuseVocab): (word, count) pairs → the vocabulary directory, of any tokenizer kind, staged for vocab/.

LearnVocabulary gathers the counts on one worker (the learners are sequential by nature; CountWords has pruned them to
--vocab-max-words words), and the kind (pipelines/tokenizer_kinds.py) learns from them, sorted, so the vocabulary does
not depend on arrival order, and writes the directory (schemas/vocab.py). With `--vocab DIR`, ReuseVocab writes the
given vocabulary instead, once `check_vocab` found it, at start, of the --tokenizer kind and whole. Each attempt
writes into a directory of its own under `staging` (pipelines/outputs/attempts.py): Tokenize loads the committed
attempt's, and Finalize renames its files into vocab/.

Output of both: a singleton PCollection holding the vocabulary summary dict
{"file", "sha256", "size", "lowercase", "tokenizer", "directory" (the attempt's), "staged" (its files' Staged
records)}, plus LearnVocabulary's word bound (words distinct, kept, pruned, and the count a kept word needed).
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from pipelines.outputs.attempts import attempt_directory, staged_files
from pipelines.tokenizer_kinds import TOKENIZER_KINDS
from schemas.tokenizer_formats import format_of


def _staged_summary(summary: dict, attempt: str, directory: str) -> dict:
    return {**summary, "directory": attempt, "staged": staged_files(attempt, directory)}


def _learn_and_write(word_counts: list[tuple[str, int]], name: str, settings: Any, directory: str, staging: str,
                     bound: dict, chars: dict | None = None) -> dict:
    attempt = attempt_directory(staging)
    summary = TOKENIZER_KINDS[name].learn(word_counts, chars, settings, attempt)
    return _staged_summary({**summary, **bound}, attempt, directory)


class LearnVocabulary(beam.PTransform):
    """CountWords' {"counts": (word, count), "bound": singleton (, "chars": singleton)} → singleton vocabulary
    summary; the vocabulary of kind `name`, learned with `settings`, is staged under `staging` for `directory`."""

    def __init__(self, name: str, settings: Any, directory: str, staging: str):
        super().__init__()
        self.name, self.settings, self.directory, self.staging = name, settings, directory, staging

    def expand(self, counted):
        extra = {"chars": beam.pvalue.AsSingleton(counted["chars"])} if "chars" in counted else {}
        return (
            counted["counts"]
            | "GatherCounts" >> beam.combiners.ToList()
            | "Learn" >> beam.Map(_learn_and_write, self.name, self.settings, self.directory, self.staging,
                                  beam.pvalue.AsSingleton(counted["bound"]), **extra)
        )


def check_vocab(source: str, tokenizer: str = "wordpiece") -> None:
    """Read and check the --vocab directory as reuse_vocab will, at start: a PrepError naming it and the cause (no
    vocabulary there, one of another kind than `tokenizer`, a malformed file, a missing special token)."""
    from pipelines.errors import PrepError

    try:
        found = format_of(source)
        if found.name != tokenizer:
            raise PrepError(f"--vocab {source} holds a {found.name} vocabulary ({found.tokenizer_class}), not a {tokenizer} "
                            f"one: pass --tokenizer {found.name}, or another --vocab")
        TOKENIZER_KINDS[tokenizer].check_source(source)
    except (OSError, ValueError, KeyError, TypeError) as e:  # ContractError is a ValueError
        message = str(e) if str(e).startswith(source.rstrip("/")) else f"{source}: {e}"
        raise PrepError(f"--vocab {message}") from None


def reuse_vocab(source: str, directory: str) -> dict:
    """Write an existing vocabulary (a prep run's vocab/, or a directory transformers saved) into `directory`; return
    its summary."""
    kind = TOKENIZER_KINDS[format_of(source).name]
    return {**kind.reuse(source, directory), "directory": directory}


def _reuse_staged(source: str, directory: str, staging: str) -> dict:
    attempt = attempt_directory(staging)
    return _staged_summary(reuse_vocab(source, attempt), attempt, directory)


class ReuseVocab(beam.PTransform):
    def __init__(self, source: str, directory: str, staging: str):
        super().__init__()
        self.source = source
        self.directory = directory
        self.staging = staging

    def expand(self, pbegin):
        return (pbegin | "VocabSource" >> beam.Create([self.source])
                | "CopyVocab" >> beam.Map(_reuse_staged, self.directory, self.staging))
