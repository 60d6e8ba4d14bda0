"""CleanDocuments: RawDoc → Doc (normalized, quality-filtered, split into sentences), or a Drop.

The per-record logic lives in pipelines/normalize.py, filters.py and sentences.py; this module only
wires it into Beam; its drops become `dropped_<reason>` counters where prep tallies all drops
(read_corpus.count_drops).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.filters import FilterConfig, filter_document
from pipelines.normalize import NormalizeConfig, normalize_text
from pipelines.read_corpus import NAMESPACE
from pipelines.records import Doc, Drop, RawDoc
from pipelines.sentences import split_sentences

_SAMPLE_CHARS = 80


def clean_one(raw: RawDoc, normalize: NormalizeConfig, filters: FilterConfig) -> Doc | Drop:
    """The whole cleaning of one document, as a plain function (tested without Beam)."""
    text = normalize_text(raw.text, normalize)
    kept, reason = filter_document(text, filters)
    if kept is None:
        return Drop(raw.path, reason or "filtered", raw.line, text[:_SAMPLE_CHARS])
    sentences = tuple(s for s in split_sentences(kept) if s.strip())
    if not sentences:
        return Drop(raw.path, "no_sentences", raw.line, text[:_SAMPLE_CHARS])
    return Doc(source=raw.source, path=raw.path, doc_id=raw.doc_id, sentences=sentences)


class CleanDocumentFn(beam.DoFn):
    def __init__(self, normalize: NormalizeConfig, filters: FilterConfig):
        self.normalize = normalize
        self.filters = filters
        self.kept = Metrics.counter(NAMESPACE, "clean_kept")

    def process(self, raw: RawDoc):
        result = clean_one(raw, self.normalize, self.filters)
        if isinstance(result, Drop):
            yield beam.pvalue.TaggedOutput("drops", result)
        else:
            self.kept.inc()
            yield result


class CleanDocuments(beam.PTransform):
    """Outputs: `docs` (Doc), `drops` (Drop)."""

    def __init__(self, normalize: NormalizeConfig, filters: FilterConfig):
        super().__init__()
        self.normalize = normalize
        self.filters = filters

    def expand(self, raw_docs):
        cleaned = raw_docs | "Clean" >> beam.ParDo(CleanDocumentFn(self.normalize, self.filters)).with_outputs("drops", main="docs")
        return {"docs": cleaned.docs, "drops": cleaned.drops}
