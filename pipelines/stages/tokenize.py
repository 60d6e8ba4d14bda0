"""Tokenize: clean/ shard URLs → TokenizedDoc (word-piece ids per sentence), and the corpus's token counts.

The documents are read back from clean/ once the vocabulary exists (rather than waiting in the runner's
memory), and every sentence is encoded with the vocabulary the same pipeline learned: a side input, so the
encoder loads once per worker on first use. Ids are tallied per bundle for the unigram table the trainer's
random-token sampling reads (vocab/token_counts.txt).

Outputs: `docs` (TokenizedDoc) and `token_counts` (one int64 array of vocabulary size).
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipelines import wordpiece
from pipelines.documents.records import Doc, TokenizedDoc
from pipelines.outputs.shards import read_clean_shard
from pipelines.stages.accounting import NAMESPACE


class TokenizeFn(beam.DoFn):
    def __init__(self, cache_size: int = wordpiece.DEFAULT_CACHE_SIZE):
        self.cache_size = cache_size  # words whose pieces the encoder remembers: the bulk of a worker's memory
        self._encoder = None
        self._loaded_from = None

    def start_bundle(self):
        self.tally: Counter = Counter()

    def process(self, doc: Doc, vocab: dict):
        if self._loaded_from != vocab["sha256"]:
            self._encoder = wordpiece.WordPieceEncoder.from_directory(vocab["directory"], cache_size=self.cache_size)
            self._loaded_from = vocab["sha256"]
            self.size = vocab["size"]
        sentences = tuple(tuple(ids) for ids in self._encoder.encode_batch(list(doc.sentences)) if ids)
        # NOTE: one update per document: a bincount per sentence allocated a vocab-sized array each time (1/5 of
        # prep's CPU), and a Counter.update per sentence pays its Python prologue ~13 times a document
        self.tally.update(chain.from_iterable(sentences))
        if not sentences:
            Metrics.counter(NAMESPACE, "pairs_doc_without_tokens").inc()
            return
        yield TokenizedDoc(source=doc.source, path=doc.path, doc_id=doc.doc_id, sentences=sentences)

    def finish_bundle(self):
        if self.tally:
            counts = np.zeros(self.size, dtype=np.int64)
            ids = np.fromiter(self.tally.keys(), dtype=np.int64, count=len(self.tally))
            counts[ids] = np.fromiter(self.tally.values(), dtype=np.int64, count=len(self.tally))
            yield beam.pvalue.TaggedOutput("token_counts", GlobalWindows.windowed_value(counts))


def sum_token_counts(arrays) -> np.ndarray:
    """Element-wise sum of per-bundle id tallies (associative, so Beam may apply it in stages)."""
    total = np.zeros(0, dtype=np.int64)
    for a in arrays:
        a = np.asarray(a, dtype=np.int64)
        total = a.copy() if total.size == 0 else total + a
    return total


class Tokenize(beam.PTransform):
    """clean/ shard URLs → {"docs": TokenizedDoc, "token_counts": summed id counts}; `vocab` is the singleton summary."""

    def __init__(self, vocab, cache_size: int = wordpiece.DEFAULT_CACHE_SIZE):
        super().__init__()
        self.vocab, self.cache_size = vocab, cache_size

    def expand(self, clean_shards):
        encoded = (
            clean_shards
            | "ReadCleanDocs" >> beam.FlatMap(read_clean_shard)
            | "Encode" >> beam.ParDo(TokenizeFn(self.cache_size), beam.pvalue.AsSingleton(self.vocab)).with_outputs("token_counts", main="docs")
        )
        counts = encoded.token_counts | "SumTokenCounts" >> beam.CombineGlobally(sum_token_counts)
        return {"docs": encoded.docs, "token_counts": counts}
