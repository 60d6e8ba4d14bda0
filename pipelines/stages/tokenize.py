"""Tokenize: clean/ shards (WriteCleanDocs' Staged files) → TokenizedDoc (token ids per sentence), and the
corpus's token counts.

The documents are read back from the staged clean shards once the vocabulary exists (rather than waiting in the runner's
memory), and every sentence is encoded with the vocabulary the same pipeline learned: a side input, so the
encoder (its kind's, pipelines/tokenizer_kinds.py: clozeforge's WordPiece encoder, or `tokenizers`' on the
tokenizer.json for bpe and unigram) loads once per worker on first use. Ids are tallied per bundle for the unigram table the trainer's
random-token sampling reads (vocab/token_counts.txt).

Outputs: `docs` (TokenizedDoc) and `token_counts` (one int64 array of vocabulary size).
"""

from __future__ import annotations

from itertools import chain

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipelines import wordpiece
from pipelines.documents.records import Doc, TokenizedDoc
from pipelines.outputs.shards import read_clean_shard
from pipelines.stages.accounting import NAMESPACE
from pipelines.tokenizer_kinds import TOKENIZER_KINDS

_TALLY_BATCH = 1 << 20
"""Ids collected before they are counted (~8 MB of list): a bincount's cost is then in the ids, not the vocabulary."""


class TokenizeFn(beam.DoFn):
    def __init__(self, cache_size: int = wordpiece.DEFAULT_CACHE_SIZE):
        self.cache_size = cache_size  # words whose pieces the encoder remembers: the bulk of a worker's memory
        self._encoder = None
        self._loaded_from = None

    def start_bundle(self):
        self.pending: list[int] = []  # ids not yet tallied: a list extends at C speed, np.bincount counts in bulk
        self.tally = None  # int64 counts per id, once the vocabulary size is known

    def process(self, doc: Doc, vocab: dict):
        if self._loaded_from != vocab["sha256"]:
            self._encoder = TOKENIZER_KINDS[vocab.get("tokenizer", "wordpiece")].encoder(vocab["directory"], cache_size=self.cache_size)
            self._loaded_from = vocab["sha256"]
            self.size = vocab["size"]
        sentences = tuple(tuple(ids) for ids in self._encoder.encode_batch(list(doc.sentences)) if ids)
        # NOTE: ids are collected in a list and counted a million at a time, 3-4 times cheaper than a Counter's
        # dict update per id (a bincount per sentence allocated a vocab-sized array each time: 1/5 of prep's CPU)
        self.pending.extend(chain.from_iterable(sentences))
        if len(self.pending) >= _TALLY_BATCH:
            self._count_pending()
        if not sentences:
            Metrics.counter(NAMESPACE, "pairs_doc_without_tokens").inc()
            return
        yield TokenizedDoc(source=doc.source, path=doc.path, doc_id=doc.doc_id, sentences=sentences, language=doc.language)

    def _count_pending(self):
        ids = np.fromiter(self.pending, dtype=np.int64, count=len(self.pending))
        counts = np.bincount(ids, minlength=self.size)
        self.tally = counts if self.tally is None else self.tally + counts
        self.pending = []

    def finish_bundle(self):
        if self.pending:
            self._count_pending()
        if self.tally is not None:
            yield beam.pvalue.TaggedOutput("token_counts", GlobalWindows.windowed_value(self.tally))


def sum_token_counts(arrays) -> np.ndarray:
    """Element-wise sum of per-bundle id tallies (associative, so Beam may apply it in stages)."""
    total = np.zeros(0, dtype=np.int64)
    for a in arrays:
        a = np.asarray(a, dtype=np.int64)
        total = a.copy() if total.size == 0 else total + a
    return total


class Tokenize(beam.PTransform):
    """Staged clean shards → {"docs": TokenizedDoc, "token_counts": summed id counts}; `vocab` is the singleton summary."""

    def __init__(self, vocab, cache_size: int = wordpiece.DEFAULT_CACHE_SIZE):
        super().__init__()
        self.vocab, self.cache_size = vocab, cache_size

    def expand(self, clean_shards):
        encoded = (
            clean_shards
            | "ReadCleanDocs" >> beam.FlatMap(lambda staged: read_clean_shard(staged.attempt))
            | "Encode" >> beam.ParDo(TokenizeFn(self.cache_size), beam.pvalue.AsSingleton(self.vocab)).with_outputs("token_counts", main="docs")
        )
        counts = encoded.token_counts | "SumTokenCounts" >> beam.CombineGlobally(sum_token_counts)
        return {"docs": encoded.docs, "token_counts": counts}
