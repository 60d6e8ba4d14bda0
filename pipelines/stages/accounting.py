"""The accounting of prep: every record read is kept or dropped with a reason, and each shows as a Beam counter.

In:  Drops (from ReadCorpus, CleanDocuments, Deduplicate) and kept Docs.
Out: (path, "dropped:<reason>") and (path, "kept") tally keys, which prep counts per file into report.json
     (pipelines/outputs/report.py); the `dropped_<reason>` and `records_kept` counters are bumped here and
     nowhere else, so Beam's counters equal the report's totals.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.documents.records import Drop

NAMESPACE = "clozeforge"
"""The Beam metrics namespace of every clozeforge counter."""


def count_drops(label_prefix: str):
    """A Map that bumps the `dropped_<reason>` counter and turns a Drop into its accounting key.
    The only place a drop is counted, so the counters equal report.json's totals."""

    def tally(drop: Drop) -> tuple[str, str]:
        Metrics.counter(NAMESPACE, f"dropped_{drop.reason}").inc()
        return drop.path, f"dropped:{drop.reason}"

    return f"{label_prefix}Tally" >> beam.Map(tally)


def count_kept(label_prefix: str):
    """A Map that bumps the `records_kept` counter and turns a kept document into its accounting key."""

    def tally(doc) -> tuple[str, str]:
        Metrics.counter(NAMESPACE, "records_kept").inc()
        return doc.path, "kept"

    return f"{label_prefix}Tally" >> beam.Map(tally)
