"""IdentifyLanguage: RawDoc → RawDoc tagged with its language (prep --identify-languages), or a Drop.

The per-record logic is pipelines/documents/languages.py (py3langid's model, loaded once per worker in setup());
this module wires it into Beam. A tagged document's `source` becomes its language code, so its rows are counted and
sampled by language (train --sample-languages); report.json still accounts for it under its file. A document whose
language is not among --keep-language is a Drop (`language_not_kept`), counted with the other drops and under its
language (stages/accounting.py: read and dropped).

Outputs: `docs` (RawDoc, `language` set), `drops` (Drop).
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.documents.languages import Identifier, LanguageConfig
from pipelines.documents.records import Drop, RawDoc
from pipelines.stages.accounting import NAMESPACE

_SAMPLE_CHARS = 80


class IdentifyLanguageFn(beam.DoFn):
    def __init__(self, config: LanguageConfig):
        self.config = config
        self.identifier = None

    def setup(self):
        self.identifier = Identifier(self.config.language_min_prob)

    def process(self, raw: RawDoc):
        code, _ = self.identifier.identify(raw.text)
        Metrics.counter(NAMESPACE, f"language_{code}").inc()
        if self.config.keep_languages and code not in self.config.keep_languages:
            yield beam.pvalue.TaggedOutput("drops", Drop(raw.path, "language_not_kept", raw.line, raw.text[:_SAMPLE_CHARS], code))
            return
        # NOTE: the language becomes the document's source, so that packing keeps languages apart (a row never mixes
        # two sources), the manifest counts rows per language and the trainer samples languages as named sources
        yield dataclasses.replace(raw, language=code, source=code)


class IdentifyLanguage(beam.PTransform):
    """Outputs: `docs` (RawDoc with its language), `drops` (Drop)."""

    def __init__(self, config: LanguageConfig):
        super().__init__()
        self.config = config

    def expand(self, raw_docs):
        tagged = raw_docs | "Identify" >> beam.ParDo(IdentifyLanguageFn(self.config)).with_outputs("drops", main="docs")
        return {"docs": tagged.docs, "drops": tagged.drops}
