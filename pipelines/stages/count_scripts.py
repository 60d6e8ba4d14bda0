"""CountScripts: kept Doc → the characters of each script and the letters uncased normalisation would delete.

The per-document logic is pipelines/documents/scripts.py; here each bundle's counts are summed and emitted once, then
summed over the corpus (a few keys per script, whatever the corpus size). `check` turns the sums into report.json's
`scripts` table and the accent-stripping warning: a PrepError (one line, nothing written) under --strict when the
vocabulary strips accents (--tokenizer wordpiece without --cased), else a warning in report.json and the summary.

Outputs: the {"scripts": ..., "warning": str | None} singleton Finalize reads.
"""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipelines.documents.scripts import accent_warning, ascii_letters, script_counts, scripts_report
from pipelines.errors import PrepError


@beam.typehints.with_output_types(tuple[tuple[str, str], int])  # ((script, "chars" | "marks_lost"), count)
class CountScriptsFn(beam.DoFn):
    def start_bundle(self):
        self.counts: Counter = Counter()

    def process(self, doc):
        joined = "".join(doc.sentences)
        if joined.isascii():  # most documents: one count, not a Counter per sentence
            letters = ascii_letters(joined)
            if letters:
                self.counts["Latin", "chars"] += letters
            return
        for sentence in doc.sentences:
            self.counts.update(script_counts(sentence))

    def finish_bundle(self):
        for key, count in self.counts.items():
            yield GlobalWindows.windowed_value((key, count))
        self.counts = Counter()


def check(tallies: list, *, strips_accents: bool, strict: bool) -> dict:
    """report.json's scripts table, and the warning (None when nothing is lost or accents are kept); under `strict`
    a loss is a PrepError."""
    scripts = scripts_report(tallies)
    warning = accent_warning(scripts) if strips_accents else None
    if warning and strict:
        raise PrepError(f"--strict: {warning}")
    return {"scripts": scripts, "warning": warning}


class CountScripts(beam.PTransform):
    """Doc → the singleton {"scripts", "warning"} (see the module docstring)."""

    def __init__(self, *, strips_accents: bool, strict: bool):
        super().__init__()
        self.strips_accents, self.strict = strips_accents, strict

    def expand(self, docs):
        strips, strict = self.strips_accents, self.strict
        return (
            docs
            | "Count" >> beam.ParDo(CountScriptsFn())
            | "Sum" >> beam.CombinePerKey(sum)
            | "Gather" >> beam.combiners.ToList()
            | "Check" >> beam.Map(lambda tallies: check(sorted(tallies), strips_accents=strips, strict=strict))
        )
