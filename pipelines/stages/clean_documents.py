"""CleanDocuments: RawDoc → Doc (normalized, quality-filtered, split into sentences), or a Drop.

The per-record logic lives in pipelines/documents/clean.py (normalize, filters, sentences); this module only
wires it into Beam; its drops become `dropped_<reason>` counters where prep tallies all drops
(stages/accounting.py).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.documents.clean import clean_one
from pipelines.documents.normalize import NormalizeConfig
from pipelines.documents.records import Drop, RawDoc
from pipelines.filters import FilterConfig
from pipelines.stages.accounting import NAMESPACE


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
