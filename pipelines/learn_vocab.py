"""CountWords and LearnWordPiece: cleaned documents → word counts → a WordPiece vocabulary directory.

CountWords applies BERT's basic tokenization (pipelines/wordpiece.py) and counts words per bundle
before the shuffle, so a worker emits each distinct word once per bundle, not once per occurrence.
LearnWordPiece gathers the counts on one worker (the learner is sequential by nature), sorts them, so
the vocabulary does not depend on arrival order, and writes `vocab.txt`, `tokenizer.json` and
`vocab_config.json`. With `--vocab DIR` the given vocabulary is copied instead.

Output of both paths: a singleton PCollection holding the vocabulary summary dict
{"file", "sha256", "size", "lowercase", "directory"}.
"""

from __future__ import annotations

import posixpath
from collections import Counter

import apache_beam as beam
import fsspec
from apache_beam.transforms.window import GlobalWindows

from pipelines import wordpiece
from pipelines.records import Doc


class CountWordsFn(beam.DoFn):
    def __init__(self, lowercase: bool):
        self.lowercase = lowercase

    def start_bundle(self):
        self.counts: Counter = Counter()

    def process(self, doc: Doc):
        for sentence in doc.sentences:
            self.counts.update(wordpiece.basic_words(sentence, lowercase=self.lowercase))

    def finish_bundle(self):
        for word, count in self.counts.items():
            yield GlobalWindows.windowed_value((word, count))
        self.counts = Counter()


class CountWords(beam.PTransform):
    """Doc → (word, corpus count), one element per distinct word."""

    def __init__(self, lowercase: bool):
        super().__init__()
        self.lowercase = lowercase

    def expand(self, docs):
        return (
            docs
            | "CountPerBundle" >> beam.ParDo(CountWordsFn(self.lowercase))
            | "SumCounts" >> beam.CombinePerKey(sum)
        )


def _learn_and_write(word_counts: list[tuple[str, int]], config: wordpiece.VocabConfig, directory: str) -> dict:
    tokens = wordpiece.learn_wordpiece(sorted(word_counts), config)
    summary = wordpiece.write_vocab(directory, tokens, config)
    return {**summary, "directory": directory}


class LearnWordPiece(beam.PTransform):
    """(word, count) → singleton vocabulary summary; the vocabulary is written to `directory`."""

    def __init__(self, config: wordpiece.VocabConfig, directory: str):
        super().__init__()
        self.config = config
        self.directory = directory

    def expand(self, word_counts):
        config, directory = self.config, self.directory
        return (
            word_counts
            | "GatherCounts" >> beam.combiners.ToList()
            | "Learn" >> beam.Map(_learn_and_write, config, directory)
        )


def copy_vocab(source: str, directory: str) -> dict:
    """Copy an existing vocabulary directory's files into `directory`; return its summary."""
    fs_src, src = fsspec.core.url_to_fs(source)
    for name in ("vocab.txt", "tokenizer.json", "vocab_config.json"):
        if fs_src.exists(posixpath.join(src, name)):
            with fsspec.open(posixpath.join(source, name), "rb") as f, fsspec.open(posixpath.join(directory, name), "wb") as g:
                g.write(f.read())
    config = wordpiece.read_vocab_config(directory)
    with fsspec.open(posixpath.join(directory, "vocab.txt"), "r", encoding="utf-8") as f:
        tokens = f.read().splitlines()
    return {**wordpiece.write_vocab(directory, tokens, config), "directory": directory}


class ReuseVocab(beam.PTransform):
    def __init__(self, source: str, directory: str):
        super().__init__()
        self.source = source
        self.directory = directory

    def expand(self, pbegin):
        return pbegin | "VocabSource" >> beam.Create([self.source]) | "CopyVocab" >> beam.Map(copy_vocab, self.directory)
