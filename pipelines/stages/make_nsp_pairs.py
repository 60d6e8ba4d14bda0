"""MakeNspPairs: TokenizedDoc → NSP pair rows, with random-next partners from buckets.

MakeNspPairs assigns each document to a split (validation by a seeded per-document coin, so a document
is wholly in one split; the coin's odds are --validation-fraction, raised on a small corpus so that the
validation split holds --validation-min-docs documents to draw random-next partners from, see
validation_share) and to one of ceil(docs / bucket_docs) seeded random buckets of its split. A
bucket is the unit of memory: its documents are grouped on one worker (through run files,
pipelines/shuffle, so the split's document count is known without holding the documents), sorted by
doc_id (so the result does not depend on arrival order), and each is turned into pairs by
pipelines/documents/nsp.py with the bucket's *other* documents as random-next partners. Memory is bounded by the
bucket size, not by the corpus.

The pairs are made as the bucket is read back (BucketPairs, GroupIntoRanges' consumer), so a bucket never
travels as one Beam element. Its pair rows come out placed for WriteShards' global shuffle: (split,
shuffle_key, row, tokens), where `row` is a tuple of the pair schema's columns in order (token ids as packed
bytes of the schema's id type), `shuffle_key` a seeded 64-bit int and `tokens` the row's word pieces
(len(A) + len(B)). The counts of what happened are summed per bucket and sent on `stats` (with row_tokens,
Σ num_tokens, for the padding figures of report.json).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines.documents import keys, nsp
from pipelines.documents.records import TokenizedDoc
from pipelines.outputs.shards import ids_dtype
from pipelines.shuffle import GroupIntoRanges, Scratch
from pipelines.stages.accounting import NAMESPACE, SumPerKey


class _Partners(Sequence):
    """The bucket's documents except one, without copying the list for every document."""

    def __init__(self, docs: list[TokenizedDoc], skip: int):
        self.docs, self.skip = docs, skip

    def __len__(self) -> int:
        return len(self.docs) - 1

    def __getitem__(self, i: int):
        return self.docs[i + (i >= self.skip)].sentences


class BucketPairs:
    """GroupBuckets' consumer: (split, index, count) and the bucket's TokenizedDocs → placed pair rows
    (split, shuffle_key, row, tokens), then the bucket's ((split, stat), count) sums, tagged `stats`."""

    def __init__(self, *, max_seq_len: int, short_seq_prob: float, dupe_factor: int, seed: int):
        self.max_seq_len = max_seq_len
        self.short_seq_prob = short_seq_prob
        self.dupe_factor = dupe_factor
        self.seed = seed

    def __call__(self, work: tuple[str, int, int], docs, vocab: dict):
        split = work[0]
        typecode = _typecode(ids_dtype(vocab["size"]))
        docs = sorted(docs, key=lambda d: d.doc_id)
        stats = Counter({"docs": len(docs)})
        for k, doc in enumerate(docs):
            partners = _Partners(docs, k)
            if len(doc.sentences) == 1:  # makes no pair (nsp.py); counted once per document, not per dupe round
                stats["single_sentence_docs"] += 1
            for round_ in range(self.dupe_factor):
                rng = np.random.default_rng([self.seed, round_, keys.key64(self.seed, "pairs", doc.doc_id)])
                pairs, made = nsp.make_pairs(doc.sentences, partners, max_seq_len=self.max_seq_len,
                                             short_seq_prob=self.short_seq_prob, rng=rng, all_sentences_non_empty=True)
                stats.update(made)
                stats["row_tokens"] += sum(pair.num_tokens for pair in pairs)  # for report.json's padding figures
                for i, pair in enumerate(pairs):
                    # NOTE: ids travel as packed bytes of the shard's id type: 2 bytes a token through the
                    # shuffle and in WriteShards' memory, against ~36 for a list of Python ints
                    row = (array(typecode, pair.tokens_a).tobytes(), array(typecode, pair.tokens_b).tobytes(),
                           pair.is_random_next, pair.num_tokens, doc.source, doc.doc_id)
                    key = keys.key64(self.seed, "shuffle", f"{doc.doc_id}:{round_}:{i}")
                    yield split, key, row, pair.num_tokens - 3
        for name, count in stats.items():
            if name != "docs":
                Metrics.counter(NAMESPACE, f"pairs_{name}").inc(count)
            yield beam.pvalue.TaggedOutput("stats", ((split, name), count))


def _typecode(dtype: np.dtype) -> str:
    """The array module's code for the unsigned id dtype (same width and byte order as numpy's)."""
    return next(c for c in "HIL" if array(c).itemsize == dtype.itemsize)


VALIDATION_MAX_SHARE = 0.2
"""--validation-min-docs never takes more than this share of the documents (unless --validation-fraction asks)."""


def validation_share(fraction: float, min_docs: int, docs: int) -> float:
    """The share of documents held out: `fraction`, raised so that about `min_docs` documents are held out on
    a small corpus, but never above max(fraction, VALIDATION_MAX_SHARE); 0 when `fraction` is 0."""
    if fraction <= 0.0:
        return 0.0
    return min(max(fraction, min_docs / max(docs, 1)), max(fraction, VALIDATION_MAX_SHARE))


def split_of(doc_id: str, seed: int, validation_fraction: float) -> str:
    return "validation" if keys.unit(seed, "split", doc_id) < validation_fraction else "train"


def split_warnings(pairs: dict[str, dict[str, int]], *, fraction: float, min_docs: int, min_pairs: int,
                   unit: tuple[str, str] = ("docs", "documents")) -> list[str]:
    """What makes a split's figures mean little: too few validation documents or pairs, a random-next share
    far from 1/2 (more than 0.1, or 3 standard errors on a small split). `unit`: the stat that counts what a split
    holds out, and its name in words (documents; translation pairs for --packing tlm)."""
    warnings = []
    if fraction > 0.0:
        held = pairs.get("validation", {})
        docs, rows = held.get(unit[0], 0), held.get("rows", 0)
        total = sum(stats.get(unit[0], 0) for stats in pairs.values())
        # NOTE: each document is held out by a seeded coin, so a share aimed at 100 documents holds out 100 +- 10
        # (84-93 were seen on 1,777- and 6,000-document corpora): only a share capped below the aim is the
        # corpus' size speaking. Too few pairs to measure much is the next warning's business.
        reachable = validation_share(fraction, min_docs, total) * total
        if docs < min_docs and reachable < min_docs:
            warnings.append(f"validation split: {docs} {unit[1]}, fewer than --validation-min-docs {min_docs}: at most "
                            f"{max(fraction, VALIDATION_MAX_SHARE):.0%} of the corpus' {total} {unit[1]} is held out, so "
                            "the corpus is too small for a validation split that measures much")
        if rows < min_pairs:
            se = f"; an accuracy on it has a standard error up to {0.5 / math.sqrt(rows):.3f}" if rows else ""
            warnings.append(f"validation split: {rows} pairs, fewer than --validation-min-pairs {min_pairs}{se}")
    for split, stats in sorted(pairs.items()):
        rows = stats.get("random_next", 0) + stats.get("true_next", 0)
        if not rows:
            continue
        share = stats.get("random_next", 0) / rows
        if abs(share - 0.5) > max(0.1, 1.5 / math.sqrt(rows)):
            warnings.append(f"{split} split: random-next share {share:.3f} over {rows} pairs, far from 0.5 "
                            f"({stats.get('no_random_partner', 0)} chunks had no other document to draw from)")
    return warnings


class MakeNspPairs(beam.PTransform):
    """TokenizedDoc → placed pair rows (main; see the module docstring) and ((split, stat), count) sums (`stats`)."""

    def __init__(self, *, max_seq_len, short_seq_prob, dupe_factor, bucket_docs, validation_fraction, seed, vocab,
                 scratch: Scratch | None = None, validation_min_docs: int = 0, doc_count=None):
        super().__init__()
        self.scratch = scratch
        # singleton PCollection of the corpus' document count, for validation_share(); None: the fraction alone
        self.doc_count, self.validation_min_docs = doc_count, validation_min_docs
        self.vocab = vocab  # singleton PCollection of the vocabulary summary (its size fixes the id type)
        self.max_seq_len, self.short_seq_prob, self.dupe_factor = max_seq_len, short_seq_prob, dupe_factor
        self.bucket_docs, self.validation_fraction, self.seed = bucket_docs, validation_fraction, seed

    def expand(self, tokenized):
        seed, fraction, per_bucket, min_docs = self.seed, self.validation_fraction, self.bucket_docs, self.validation_min_docs
        p = tokenized.pipeline
        doc_count = self.doc_count if self.doc_count is not None else p | "NoDocCount" >> beam.Create([0])

        def assign(d, docs):
            share = validation_share(fraction, min_docs, docs)
            return split_of(d.doc_id, seed, share), keys.key64(seed, "bucket", d.doc_id), d, 1

        pairs = BucketPairs(max_seq_len=self.max_seq_len, short_seq_prob=self.short_seq_prob,
                            dupe_factor=self.dupe_factor, seed=seed)
        made = (
            tokenized
            | "AssignSplit" >> beam.Map(assign, beam.pvalue.AsSingleton(doc_count))
            | "GroupBuckets" >> GroupIntoRanges(
                self.scratch, lambda split, docs, _, __: max(1, math.ceil(docs / per_bucket)),
                beam.pvalue.AsSingleton(self.vocab), consume=pairs, tags=("stats",))
        )
        stats = made["stats"] | "SumPairStats" >> SumPerKey(tuple[str, str])  # ((split, name), count)
        return {"pairs": made["main"], "stats": stats}


def merge_stats(items: list[tuple[tuple[str, str], int]]) -> dict[str, dict[str, int]]:
    out: dict[str, Counter] = {}
    for (split, name), count in items:
        out.setdefault(split, Counter())[name] += count
    return {split: dict(sorted(c.items())) for split, c in sorted(out.items())}
