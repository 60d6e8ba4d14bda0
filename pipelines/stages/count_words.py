"""CountWords: cleaned documents → (word, corpus count), one element per distinct word.

Words are BERT's basic tokenization (pipelines/wordpiece/basic.py) of each sentence, counted per bundle
before the shuffle, so a worker emits each distinct word once per bundle, not once per occurrence.
"""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipelines import wordpiece
from pipelines.documents.records import Doc


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
