"""Deduplicate: Doc → Doc, dropping exact and (optionally) near duplicates, without a global in-memory set.

Every grouping goes through run files (pipelines/shuffle/), so memory does not grow with the corpus.

Exact: documents are grouped by the hash of their normalized text; the smallest doc_id of a group is
kept, the others dropped as `duplicate_exact`. Near: each document's MinHash signature is cut into LSH
bands; documents that share a band and whose estimated Jaccard similarity reaches the threshold are a
candidate pair, and the one with the larger doc_id is dropped as `duplicate_near` (no transitive
closure: in a chain A~B~C with A≁C, both B and C go, which errs on the side of removing). Keeping the
smallest doc_id makes the survivor the same on every runner and worker count. Drops go out on the `drops`
output uncounted: prep counts every stage's drops in one place (stages/accounting.py).
"""

from __future__ import annotations

import typing

import apache_beam as beam

from pipelines.documents.minhash import (
    MinHashConfig,
    estimated_jaccard,
    exact_hash,
    lsh_band_keys,
    minhash_signature,
)
from pipelines.documents.records import Drop
from pipelines.shuffle import GroupByKeyViaFiles, Scratch, scratch_or_local

_SAMPLE_CHARS = 80


def _keep_smallest(element, reason: str):
    _, docs = element
    docs = sorted(docs, key=lambda d: d.doc_id)
    yield docs[0]
    for dup in docs[1:]:
        yield beam.pvalue.TaggedOutput("drops", Drop(dup.path, reason, 0, dup.text[:_SAMPLE_CHARS], dup.language))


class _NearDuplicateIdsFn(beam.DoFn):
    """Per LSH band bucket: the ids of documents that have a smaller-id near-duplicate in it."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def process(self, element):
        _, members = element
        if len(members) < 2:
            return
        members = sorted(members, key=lambda m: m[0])
        for j in range(1, len(members)):
            doc_id, sig = members[j]
            if any(estimated_jaccard(sig, members[i][1]) >= self.threshold for i in range(j)):
                yield doc_id


class Deduplicate(beam.PTransform):
    """Outputs: `docs` (Doc), `drops` (Drop). mode: 'none', 'exact' or 'near' (near includes exact)."""

    def __init__(self, mode: str, minhash: MinHashConfig | None = None, threshold: float = 0.8,
                 scratch: Scratch | None = None):
        super().__init__()
        self.mode = mode
        self.scratch = scratch_or_local(scratch)
        self.minhash = minhash or MinHashConfig()
        self.threshold = threshold

    def expand(self, docs):
        p = docs.pipeline
        if self.mode == "none":
            return {"docs": docs, "drops": p | "NoDrops" >> beam.Create([])}
        exact = (
            docs
            | "KeyByTextHash" >> beam.Map(lambda d: (exact_hash(d.text), d)).with_output_types(tuple[str, typing.Any])
            | "GroupByTextHash" >> GroupByKeyViaFiles(self.scratch.sub("exact"))
            | "KeepFirstExact" >> beam.FlatMap(_keep_smallest, "duplicate_exact").with_outputs("drops", main="docs")
        )
        if self.mode == "exact":
            return {"docs": exact.docs, "drops": exact.drops}
        config, threshold = self.minhash, self.threshold
        signed = exact.docs | "Sign" >> beam.Map(lambda d: (d, minhash_signature(d.text, config)))
        near_ids = (
            signed
            | "BandKeys" >> beam.FlatMap(lambda ds: [(k, (ds[0].doc_id, ds[1])) for k in lsh_band_keys(ds[1], config)])
            .with_output_types(tuple[bytes, tuple[str, typing.Any]])  # (band key, (doc id, signature))
            | "GroupByBand" >> GroupByKeyViaFiles(self.scratch.sub("bands"))
            | "FindNear" >> beam.ParDo(_NearDuplicateIdsFn(threshold))
            | "KeyNear" >> beam.Map(lambda doc_id: (doc_id, _NEAR)).with_output_types(tuple[str, typing.Any])
        )
        by_id = signed | "KeyById" >> beam.Map(lambda ds: (ds[0].doc_id, ds[0])).with_output_types(tuple[str, typing.Any])
        near = (
            (by_id, near_ids)
            | "DocsAndNearIds" >> beam.Flatten()
            | "JoinNear" >> GroupByKeyViaFiles(self.scratch.sub("join"))
            | "DropNear" >> beam.FlatMap(_split_near).with_outputs("drops", main="docs")
        )
        drops = (exact.drops, near.drops) | "AllDedupDrops" >> beam.Flatten()
        return {"docs": near.docs, "drops": drops}


_NEAR = "near"  # the join's marker: this doc_id has a smaller-id near duplicate (possibly several times)


def _split_near(element):
    _, values = element
    near = any(isinstance(v, str) for v in values)
    for doc in values:
        if isinstance(doc, str):
            continue
        if near:
            yield beam.pvalue.TaggedOutput("drops", Drop(doc.path, "duplicate_near", 0, doc.text[:_SAMPLE_CHARS], doc.language))
        else:
            yield doc
