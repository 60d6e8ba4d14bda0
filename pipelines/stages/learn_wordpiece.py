"""LearnWordPiece (and ReuseVocab): (word, count) pairs → a WordPiece vocabulary directory, staged for vocab/.

LearnWordPiece gathers the counts on one worker (the learner is sequential by nature; CountWords has pruned
them to --vocab-max-words words), sorts them, so the vocabulary does not depend on arrival order, and writes
the directory (schemas/vocab.py). With `--vocab DIR`, ReuseVocab writes the given vocabulary instead. Each
attempt writes into a directory of its own under `staging` (pipelines/outputs/attempts.py): Tokenize loads
the committed attempt's, and Finalize renames its files into vocab/.

Output of both: a singleton PCollection holding the vocabulary summary dict
{"file", "sha256", "size", "lowercase", "directory" (the attempt's), "staged" (its files' Staged records)},
plus LearnWordPiece's word bound (words distinct, kept, pruned, and the count a kept word needed).
"""

from __future__ import annotations

import apache_beam as beam

from pipelines import wordpiece
from pipelines.outputs.attempts import attempt_directory, staged_files
from schemas import vocab as vocab_files


def _staged_summary(summary: dict, attempt: str, directory: str) -> dict:
    return {**summary, "directory": attempt, "staged": staged_files(attempt, directory)}


def _learn_and_write(word_counts: list[tuple[str, int]], config: wordpiece.VocabConfig, directory: str, staging: str,
                     bound: dict) -> dict:
    tokens = wordpiece.learn_wordpiece(sorted(word_counts), config)
    attempt = attempt_directory(staging)
    summary = wordpiece.write_vocab(attempt, tokens, config)
    return _staged_summary({**summary, **bound}, attempt, directory)


class LearnWordPiece(beam.PTransform):
    """CountWords' {"counts": (word, count), "bound": singleton} → singleton vocabulary summary; the vocabulary
    is staged under `staging` for `directory`."""

    def __init__(self, config: wordpiece.VocabConfig, directory: str, staging: str):
        super().__init__()
        self.config = config
        self.directory = directory
        self.staging = staging

    def expand(self, counted):
        config, directory, staging = self.config, self.directory, self.staging
        return (
            counted["counts"]
            | "GatherCounts" >> beam.combiners.ToList()
            | "Learn" >> beam.Map(_learn_and_write, config, directory, staging, beam.pvalue.AsSingleton(counted["bound"]))
        )


def check_vocab(source: str) -> None:
    """Read and check the --vocab directory as reuse_vocab will, at start: a PrepError naming it and the cause
    (no vocabulary file, no vocab_config.json nor tokenizer.json, a malformed file, a missing special token)."""
    from pipelines.errors import PrepError

    try:
        tokens = vocab_files.read_tokens(source)
        wordpiece.read_vocab_config(source)
        wordpiece.check_tokens(tokens)
        recorded = (vocab_files.read_config(source) or {}).get("size")
        if recorded is not None and recorded != len(tokens):
            raise ValueError(f"{vocab_files.VOCAB_FILE} holds {len(tokens)} tokens, {vocab_files.CONFIG_FILE} says {recorded}")
    except (OSError, ValueError, KeyError, TypeError) as e:  # ContractError is a ValueError
        message = str(e) if str(e).startswith(source.rstrip("/")) else f"{source}: {e}"
        raise PrepError(f"--vocab {message}") from None


def reuse_vocab(source: str, directory: str) -> dict:
    """Write an existing vocabulary (a prep run's vocab/, or a HuggingFace BERT's files) into `directory`;
    return its summary."""
    tokens = vocab_files.read_tokens(source)
    config = wordpiece.read_vocab_config(source)
    return {**wordpiece.write_vocab(directory, tokens, config), "directory": directory}


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
