"""The accounting of prep: every record read is kept or dropped with a reason, and each shows as a Beam counter.

In:  Drops (from ReadCorpus, CleanDocuments, Deduplicate), kept Docs and ReadCorpus' (path, key) tally keys.
Out: ((path, key), count) sums, key 'read', 'kept', 'dropped:<reason>' or 'event:<kind>', which prep adds up
     per file into report.json (pipelines/outputs/report.py); the `dropped_<reason>` and `records_kept`
     counters are bumped here and nowhere else. With --identify-languages, `count_languages` tallies the same
     records under their language ((language, key) sums); with --parallel, `count_parallel` tallies translation
     pairs per file and per direction.

What each counts. report.json counts through the data: a tally is an element, and a runner passes on the
elements of the attempt of a bundle it committed only, so the report counts every record once on any runner,
whatever it retries. The counters count what workers did: every attempt of a bundle that got as far as a
record, failed and duplicate attempts included, under `attempted`; `committed`, where a runner reports it,
is meant to leave failed attempts out, but not every runner keeps to that: Beam's BundleBasedDirectRunner keeps
a failed attempt's counts in its retry's (tests/pipelines/test_runners.py shows both above the report). So the
counters equal the report's totals when no bundle was retried or run twice (tests/pipelines/test_prep.py checks
it on the FnApiRunner), and may exceed them otherwise: they are progress to watch in a runner's console, and
report.json is the figure.

Each tally step counts its bundle's records in a dict and emits one sum per distinct key when the bundle
ends: what crosses from stage to stage is a few sums per file, not an element per record (Beam's local
runner holds an element per record between stages, ~0.8 KB each, so a million dropped records cost 800 MB).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipelines.documents.languages import UND
from pipelines.documents.records import Drop, Pair

NAMESPACE = "clozeforge"
"""The Beam metrics namespace of every clozeforge counter."""

TallyKey = tuple[str, ...]
"""A tally's key: (path, key), (language, key), or ("file" | "direction", name, key)."""


@beam.ptransform_fn
def SumPerKey(tallies, key_type):  # noqa: N802  (a PTransform, named as Beam's are)
    """(key, count) → one (key, sum) per key, typed first as (key_type, int): the runner's GroupByKey then codes the
    key deterministically and Beam checks what reaches it (a tagged output arrives untyped)."""
    return (
        tallies
        | "Typed" >> beam.Map(lambda kv: kv).with_output_types(tuple[key_type, int])
        | "Sum" >> beam.CombinePerKey(sum)
    )


@beam.typehints.with_output_types(tuple[TallyKey, int])
class TallyFn(beam.DoFn):
    """Records → ((path, key), count) per distinct key of a bundle, at the bundle's end."""

    def __init__(self, key_of: Callable[[object], tuple[str, str]], *, several: bool = False):
        self.key_of, self.several = key_of, several  # several: key_of gives a list of keys, each counted

    def start_bundle(self):
        self.counts: Counter = Counter()

    def process(self, element):
        if self.several:
            self.counts.update(self.key_of(element))
        else:
            self.counts[self.key_of(element)] += 1

    def finish_bundle(self):
        for key, count in self.counts.items():
            yield GlobalWindows.windowed_value((key, count))
        self.counts = Counter()


def _drop_key(drop: Drop) -> tuple[str, str]:
    Metrics.counter(NAMESPACE, f"dropped_{drop.reason}").inc()
    return drop.path, f"dropped:{drop.reason}"


def _kept_key(doc) -> tuple[str, str]:
    Metrics.counter(NAMESPACE, "records_kept").inc()
    return doc.path, "kept"


def count_drops(label_prefix: str):
    """Drops → their ((path, 'dropped:<reason>'), count) sums; bumps `dropped_<reason>`, once per record an attempt
    handled (the module docstring says when that is more than report.json's count)."""
    return f"{label_prefix}Tally" >> beam.ParDo(TallyFn(_drop_key))


def count_kept(label_prefix: str):
    """Kept documents → their ((path, 'kept'), count) sums; bumps `records_kept`."""
    return f"{label_prefix}Tally" >> beam.ParDo(TallyFn(_kept_key))


def count_languages(label_prefix: str, what: str):
    """Per-language accounting (prep --identify-languages): records → ((language, key), count) sums, `what` one of
    "read" (identified documents: their language's read), "kept" (kept Docs), "dropped" (Drops: their reason), or
    "read_and_dropped" (Drops of records never passed on: ReadCorpus' drops, which no identifier saw, under "und",
    and IdentifyLanguage's --keep-language drops, under their language: each is read and dropped). No counter is
    bumped: the file tallies do that once."""
    if what == "read_and_dropped":
        return f"{label_prefix}LanguageTally" >> beam.ParDo(TallyFn(
            lambda drop: [(drop.language or UND, "read"), (drop.language or UND, f"dropped:{drop.reason}")], several=True))
    keys = {
        "read": lambda raw: (raw.language, "read"),
        "kept": lambda doc: (doc.language, "kept"),
        "dropped": lambda drop: (drop.language or UND, f"dropped:{drop.reason}"),
    }
    return f"{label_prefix}LanguageTally" >> beam.ParDo(TallyFn(keys[what]))


def count_parallel(label_prefix: str, what: str):
    """prep --parallel's accounting: records → (("file", path, key), n) and (("direction", "en-fr", key), n) sums,
    `what` one of "read" (every record read, Pair or Drop), "kept" (the pairs written) or "dropped" (Drops: their
    reason). report.json's `parallel` (pipelines/outputs/report.parallel_report) balances them per file and direction."""
    def keys(record):
        direction = record.languages if isinstance(record, Pair) else record.language
        key = f"dropped:{record.reason}" if what == "dropped" else what
        return [("file", record.path, key), ("direction", direction, key)]

    return f"{label_prefix}ParallelTally" >> beam.ParDo(TallyFn(keys, several=True))


def count_keys(label_prefix: str):
    """(path, key) tally keys (ReadCorpus' 'read' and 'event:<kind>') → their ((path, key), count) sums."""
    return f"{label_prefix}Tally" >> beam.ParDo(TallyFn(tuple))
