"""ReadCorpus: named URL globs → RawDoc records (main output), Drop and Event records (tagged outputs).

Globs are expanded when the pipeline is built, so a typo fails before any worker starts, with the flag
named. Each file is read by one worker, streaming (see pipelines/documents/readers.py), and its documents go on in
the same worker: no shuffle of whole documents here, since Beam's local runner would hold all of them in
memory (the next stage that needs them spread, Deduplicate or WriteCleanDocs, goes through run files).
Every record read is also tallied as a ('read', path) accounting key.
"""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam
import fsspec
from apache_beam.metrics import Metrics

from pipelines.config import typed_input
from pipelines.documents.readers import Event, ReadConfig, read_file
from pipelines.documents.records import Drop
from pipelines.errors import PrepError
from pipelines.stages.accounting import NAMESPACE


def expand_inputs(inputs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """[(name, file URL)] for every file the globs match, sorted; a glob matching nothing is an error."""
    files: list[tuple[str, str]] = []
    for index, (name, pattern) in enumerate(inputs):
        flag = f"--input {typed_input(name, pattern, index)}"
        try:
            fs, _ = fsspec.core.url_to_fs(pattern)
            if fs.isdir(pattern):
                pattern = pattern.rstrip("/") + "/**"
            matches = sorted(p for p in fs.glob(pattern) if fs.isfile(p))
        except (ImportError, ValueError) as e:
            raise PrepError(f"{flag}: {e}") from None
        if not matches:
            raise PrepError(f"{flag}: no file matches")
        files.extend((name, fs.unstrip_protocol(p) if "://" in pattern else p) for p in matches)
    return files


class ReadFileFn(beam.DoFn):
    def __init__(self, config: ReadConfig):
        self.config = config
        self.files = Metrics.counter(NAMESPACE, "files_read")
        self.records = Metrics.counter(NAMESPACE, "records_read")

    def process(self, element: tuple[str, str]):
        source, path = element
        self.files.inc()
        for item in read_file(source, path, self.config):
            if isinstance(item, Event):
                Metrics.counter(NAMESPACE, f"event_{item.kind}").inc()
                yield beam.pvalue.TaggedOutput("accounting", (item.path, f"event:{item.kind}"))
                continue
            self.records.inc()
            yield beam.pvalue.TaggedOutput("accounting", (path, "read"))
            if isinstance(item, Drop):
                yield beam.pvalue.TaggedOutput("drops", item)
            else:
                yield item


class ReadCorpus(beam.PTransform):
    """Outputs: `docs` (RawDoc), `drops` (Drop), `accounting` ((path, key) tally keys)."""

    def __init__(self, inputs: Sequence[tuple[str, str]], config: ReadConfig):
        super().__init__()
        self.files = expand_inputs(inputs)
        self.config = config

    def expand(self, pbegin):
        read = (
            pbegin
            | "ListFiles" >> beam.Create(self.files)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(ReadFileFn(self.config)).with_outputs("drops", "accounting", main="docs")
        )
        return {"docs": read.docs, "drops": read.drops, "accounting": read.accounting}
