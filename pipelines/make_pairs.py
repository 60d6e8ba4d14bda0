"""Tokenize and MakeNspPairs: Doc → TokenizedDoc → NSP pair rows, with random-next partners from buckets.

Tokenize encodes every sentence with the vocabulary the same pipeline learned (a side input, so the
encoder loads once per worker on first use) and tallies token ids for the unigram table.

MakeNspPairs assigns each document to a split (validation by a seeded per-document coin, so a document
is wholly in one split) and to one of ceil(docs / bucket_docs) seeded random buckets of its split. A
bucket is the unit of memory: its documents are grouped on one worker, sorted by doc_id (so the result
does not depend on arrival order), and each is turned into pairs by pipelines/nsp.py with the bucket's
*other* documents as random-next partners. Memory is bounded by the bucket size, not by the corpus.

Row dicts carry the pair schema's columns plus `split` and a 64-bit `shuffle_key`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipelines import keys, nsp, wordpiece
from pipelines.read_corpus import NAMESPACE
from pipelines.records import Doc, TokenizedDoc


class TokenizeFn(beam.DoFn):
    def __init__(self):
        self._encoder = None
        self._loaded_from = None

    def start_bundle(self):
        self.token_counts = None

    def process(self, doc: Doc, vocab: dict):
        if self._loaded_from != vocab["sha256"]:
            self._encoder = wordpiece.WordPieceEncoder.from_directory(vocab["directory"])
            self._loaded_from = vocab["sha256"]
            self.size = vocab["size"]
        if self.token_counts is None:
            self.token_counts = np.zeros(self.size, dtype=np.int64)
        sentences = tuple(tuple(ids) for ids in self._encoder.encode_batch(list(doc.sentences)) if ids)
        for ids in sentences:
            self.token_counts += np.bincount(ids, minlength=self.size)
        if not sentences:
            Metrics.counter(NAMESPACE, "pairs_doc_without_tokens").inc()
            return
        yield TokenizedDoc(source=doc.source, path=doc.path, doc_id=doc.doc_id, sentences=sentences)

    def finish_bundle(self):
        if self.token_counts is not None:
            yield beam.pvalue.TaggedOutput("token_counts", GlobalWindows.windowed_value(self.token_counts))


class _Partners(Sequence):
    """The bucket's documents except one, without copying the list for every document."""

    def __init__(self, docs: list[TokenizedDoc], skip: int):
        self.docs, self.skip = docs, skip

    def __len__(self) -> int:
        return len(self.docs) - 1

    def __getitem__(self, i: int):
        return self.docs[i + (i >= self.skip)].sentences


class MakePairsFn(beam.DoFn):
    def __init__(self, *, max_seq_len: int, short_seq_prob: float, dupe_factor: int, seed: int):
        self.max_seq_len = max_seq_len
        self.short_seq_prob = short_seq_prob
        self.dupe_factor = dupe_factor
        self.seed = seed

    def process(self, element):
        (split, _), docs = element
        docs = sorted(docs, key=lambda d: d.doc_id)
        for k, doc in enumerate(docs):
            partners = _Partners(docs, k)
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
                        "tokens_a": pair.tokens_a,
                        "tokens_b": pair.tokens_b,
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

    def __init__(self, *, max_seq_len, short_seq_prob, dupe_factor, bucket_docs, validation_fraction, seed):
        super().__init__()
        self.max_seq_len, self.short_seq_prob, self.dupe_factor = max_seq_len, short_seq_prob, dupe_factor
        self.bucket_docs, self.validation_fraction, self.seed = bucket_docs, validation_fraction, seed

    def expand(self, tokenized):
        seed, fraction, per_bucket = self.seed, self.validation_fraction, self.bucket_docs
        with_split = tokenized | "AssignSplit" >> beam.Map(lambda d: (split_of(d.doc_id, seed, fraction), d))
        docs_per_split = with_split | "DocsPerSplit" >> beam.combiners.Count.PerKey()

        def to_bucket(element, counts):
            split, doc = element
            buckets = max(1, math.ceil(counts[split] / per_bucket))
            return (split, keys.bucket(keys.key64(seed, "bucket", doc.doc_id), buckets)), doc

        made = (
            with_split
            | "AssignBucket" >> beam.Map(to_bucket, beam.pvalue.AsDict(docs_per_split))
            | "GroupBuckets" >> beam.GroupByKey()
            | "PairsPerBucket"
            >> beam.ParDo(
                MakePairsFn(
                    max_seq_len=self.max_seq_len,
                    short_seq_prob=self.short_seq_prob,
                    dupe_factor=self.dupe_factor,
                    seed=seed,
                )
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
