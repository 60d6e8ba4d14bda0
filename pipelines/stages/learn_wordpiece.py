"""LearnWordPiece (and ReuseVocab): (word, count) pairs → a WordPiece vocabulary directory under vocab/.

LearnWordPiece gathers the counts on one worker (the learner is sequential by nature; CountWords has pruned
them to --vocab-max-words words), sorts them, so the vocabulary does not depend on arrival order, and writes
the directory (schemas/vocab.py). With
`--vocab DIR`, ReuseVocab writes the given vocabulary instead.

Output of both: a singleton PCollection holding the vocabulary summary dict
{"file", "sha256", "size", "lowercase", "directory"}, plus LearnWordPiece's word bound (words distinct, kept,
pruned, and the count a kept word needed).
"""

from __future__ import annotations

import apache_beam as beam

from pipelines import wordpiece
from schemas import vocab as vocab_files


def _learn_and_write(word_counts: list[tuple[str, int]], config: wordpiece.VocabConfig, directory: str, bound: dict) -> dict:
    tokens = wordpiece.learn_wordpiece(sorted(word_counts), config)
    summary = wordpiece.write_vocab(directory, tokens, config)
    return {**summary, **bound, "directory": directory}


class LearnWordPiece(beam.PTransform):
    """CountWords' {"counts": (word, count), "bound": singleton} → singleton vocabulary summary; the vocabulary
    is written to `directory`."""

    def __init__(self, config: wordpiece.VocabConfig, directory: str):
        super().__init__()
        self.config = config
        self.directory = directory

    def expand(self, counted):
        config, directory = self.config, self.directory
        return (
            counted["counts"]
            | "GatherCounts" >> beam.combiners.ToList()
            | "Learn" >> beam.Map(_learn_and_write, config, directory, beam.pvalue.AsSingleton(counted["bound"]))
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


class ReuseVocab(beam.PTransform):
    def __init__(self, source: str, directory: str):
        super().__init__()
        self.source = source
        self.directory = directory

    def expand(self, pbegin):
        return pbegin | "VocabSource" >> beam.Create([self.source]) | "CopyVocab" >> beam.Map(reuse_vocab, self.directory)
