"""Tokenize and MakeNspPairs: Doc → TokenizedDoc → NSP pair rows, with random-next partners from buckets.

Tokenize encodes every sentence with the vocabulary the same pipeline learned (a side input, so the
encoder loads once per worker on first use) and tallies token ids for the unigram table.

MakeNspPairs assigns each document to a split (validation by a seeded per-document coin, so a document
is wholly in one split) and to one of ceil(docs / bucket_docs) seeded random buckets of its split. A
bucket is the unit of memory: its documents are grouped on one worker (through run files,
pipelines/shuffle.py, so the split's document count is known without holding the documents), sorted by
doc_id (so the result does not depend on arrival order), and each is turned into pairs by
pipelines/nsp.py with the bucket's *other* documents as random-next partners. Memory is bounded by the
bucket size, not by the corpus.

Row dicts carry the pair schema's columns (token ids as packed bytes of the schema's id type) plus `split`
and a 64-bit `shuffle_key`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipelines import keys, nsp, wordpiece
from pipelines.read_corpus import NAMESPACE
from pipelines.records import Doc, TokenizedDoc
from pipelines.shuffle import GroupIntoRanges, Scratch
from schemas import token_type


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
        for ids in sentences:
            self.tally.update(ids)  # NOTE: a bincount per sentence allocated a vocab-sized array each time (1/5 of prep's CPU)
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


class _Partners(Sequence):
    """The bucket's documents except one, without copying the list for every document."""

    def __init__(self, docs: list[TokenizedDoc], skip: int):
        self.docs, self.skip = docs, skip

    def __len__(self) -> int:
        return len(self.docs) - 1

    def __getitem__(self, i: int):
        return self.docs[i + (i >= self.skip)].sentences


def ids_dtype(vocab_size: int) -> np.dtype:
    """The numpy dtype of the shards' id column for this vocabulary (uint16 when it fits)."""
    return np.dtype(np.uint16) if token_type(vocab_size) == pa.uint16() else np.dtype(np.uint32)


class MakePairsFn(beam.DoFn):
    def __init__(self, *, max_seq_len: int, short_seq_prob: float, dupe_factor: int, seed: int):
        self.max_seq_len = max_seq_len
        self.short_seq_prob = short_seq_prob
        self.dupe_factor = dupe_factor
        self.seed = seed

    def process(self, element, vocab: dict):
        (split, _, _), docs = element
        dtype = ids_dtype(vocab["size"])
        docs = sorted(docs, key=lambda d: d.doc_id)
        for k, doc in enumerate(docs):
            partners = _Partners(docs, k)
            if len(doc.sentences) == 1:  # makes no pair (nsp.py); counted once per document, not per dupe round
                Metrics.counter(NAMESPACE, "pairs_single_sentence_docs").inc()
                yield beam.pvalue.TaggedOutput("stats", ((split, "single_sentence_docs"), 1))
            for round_ in range(self.dupe_factor):
                rng = np.random.default_rng([self.seed, round_, keys.key64(self.seed, "pairs", doc.doc_id)])
                pairs, stats = nsp.make_pairs(
                    doc.sentences, partners, max_seq_len=self.max_seq_len, short_seq_prob=self.short_seq_prob, rng=rng
                )
                for name, count in stats.items():
                    Metrics.counter(NAMESPACE, f"pairs_{name}").inc(count)
                    yield beam.pvalue.TaggedOutput("stats", ((split, name), count))
                for i, pair in enumerate(pairs):
                    yield {
                        # NOTE: ids travel as packed bytes of the shard's id type: 2 bytes a token through the
                        # shuffle and in WriteShards' memory, against ~36 for a list of Python ints
                        "tokens_a": np.asarray(pair.tokens_a, dtype).tobytes(),
                        "tokens_b": np.asarray(pair.tokens_b, dtype).tobytes(),
                        "is_random_next": pair.is_random_next,
                        "num_tokens": pair.num_tokens,
                        "source": doc.source,
                        "doc_id": doc.doc_id,
                        "split": split,
                        "shuffle_key": keys.key64(self.seed, "shuffle", f"{doc.doc_id}:{round_}:{i}"),
                    }


def split_of(doc_id: str, seed: int, validation_fraction: float) -> str:
    return "validation" if keys.unit(seed, "split", doc_id) < validation_fraction else "train"


class MakeNspPairs(beam.PTransform):
    """TokenizedDoc → pair rows (main) and ((split, stat), count) tallies (`stats`)."""

    def __init__(self, *, max_seq_len, short_seq_prob, dupe_factor, bucket_docs, validation_fraction, seed, vocab,
                 scratch: Scratch | None = None):
        super().__init__()
        self.scratch = scratch
        self.vocab = vocab  # singleton PCollection of the vocabulary summary (its size fixes the id type)
        self.max_seq_len, self.short_seq_prob, self.dupe_factor = max_seq_len, short_seq_prob, dupe_factor
        self.bucket_docs, self.validation_fraction, self.seed = bucket_docs, validation_fraction, seed

    def expand(self, tokenized):
        seed, fraction, per_bucket = self.seed, self.validation_fraction, self.bucket_docs
        made = (
            tokenized
            | "AssignSplit" >> beam.Map(lambda d: (split_of(d.doc_id, seed, fraction), keys.key64(seed, "bucket", d.doc_id), d, 1))
            | "GroupBuckets" >> GroupIntoRanges(self.scratch, lambda split, docs, _: max(1, math.ceil(docs / per_bucket)))
            | "PairsPerBucket"
            >> beam.ParDo(
                MakePairsFn(
                    max_seq_len=self.max_seq_len,
                    short_seq_prob=self.short_seq_prob,
                    dupe_factor=self.dupe_factor,
                    seed=seed,
                ),
                beam.pvalue.AsSingleton(self.vocab),
            ).with_outputs("stats", main="pairs")
        )
        stats = made.stats | "SumPairStats" >> beam.CombinePerKey(sum)
        return {"pairs": made.pairs, "stats": stats}


def sum_token_counts(arrays) -> np.ndarray:
    """Element-wise sum of per-bundle id tallies (associative, so Beam may apply it in stages)."""
    total = np.zeros(0, dtype=np.int64)
    for a in arrays:
        a = np.asarray(a, dtype=np.int64)
        total = a.copy() if total.size == 0 else total + a
    return total


def merge_stats(items: list[tuple[tuple[str, str], int]]) -> dict[str, dict[str, int]]:
    out: dict[str, Counter] = {}
    for (split, name), count in items:
        out.setdefault(split, Counter())[name] += count
    return {split: dict(sorted(c.items())) for split, c in sorted(out.items())}
