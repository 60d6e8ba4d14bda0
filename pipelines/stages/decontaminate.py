"""Decontaminate: Doc → Doc, dropping each document that shares a 13-word n-gram with the evaluation files.

The n-grams are read once per worker, in `DecontaminateFn.setup` (pipelines/documents/decontaminate.py holds the
logic, with no Beam import); a dropped document goes out on `drops` as reason `contaminated`, with the shared
n-gram as its sample, uncounted here: prep counts every stage's drops in one place (stages/accounting.py), which
bumps the `dropped_contaminated` counter and puts the count per input file in report.json.
"""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam

from pipelines.documents.decontaminate import EvalFile, load_index
from pipelines.documents.records import Drop

REASON = "contaminated"


class DecontaminateFn(beam.DoFn):
    def __init__(self, files: Sequence[EvalFile]):
        self.files = tuple(files)

    def setup(self):
        self.index = load_index(self.files)

    def process(self, doc):
        shared = self.index.shared_ngram(doc.text)
        if shared is None:
            yield doc
        else:
            yield beam.pvalue.TaggedOutput("drops", Drop(doc.path, REASON, 0, shared, doc.language))


class Decontaminate(beam.PTransform):
    """Outputs: `docs` (Doc), `drops` (Drop)."""

    def __init__(self, files: Sequence[EvalFile]):
        super().__init__()
        self.files = tuple(files)

    def expand(self, docs):
        out = docs | "DropContaminated" >> beam.ParDo(DecontaminateFn(self.files)).with_outputs("drops", main="docs")
        return {"docs": out.docs, "drops": out.drops}
