"""ReadParallel: the --parallel files → translation pairs, cleaned, and every record's read and drop tallies.

In:  the --parallel specs (pipelines/documents/parallel.parse_spec), matched when the graph is built: a spec that
     matches no file is a PrepError naming it; --strict; the documents' NormalizeConfig.
Out: `pairs` (Pair, both sides normalised), `drops` (Drop; its `language` is the pair's direction, `en-fr`).
The per-record logic is pipelines/documents/parallel.py; each file is one work item, read whole (a catalog or a TSV
of interface strings is kilobytes to a few megabytes). Tallies: stages/accounting.count_parallel.
"""

from __future__ import annotations

import apache_beam as beam
import fsspec
from fsspec.implementations.local import LocalFileSystem

from pipelines.documents.normalize import NormalizeConfig
from pipelines.documents.parallel import (
    Pair,
    ParallelSpec,
    aligned_pairs,
    catalog_pairs,
    clean_pair,
    tsv_pairs,
)
from pipelines.errors import PrepError

CATALOG, TSV, ALIGNED = "catalog", "tsv", "aligned"


def work_items(specs: tuple[ParallelSpec, ...]) -> list[tuple[str, tuple[str, ...], tuple[str, str] | None]]:
    """(format, files, languages) per file (per pair of files for line-aligned ones), sorted within a spec."""
    items = []
    for spec in specs:
        if spec.aligned:
            for url in spec.aligned:
                if not fsspec.core.url_to_fs(url)[0].exists(fsspec.core.url_to_fs(url)[1]):
                    raise PrepError(f"--parallel {spec.glob}: no file {url}")
            items.append((ALIGNED, spec.aligned, spec.languages))
            continue
        files = sorted(f.path if isinstance(f.fs, LocalFileSystem) else f.fs.unstrip_protocol(f.path)
                       for f in fsspec.open_files(spec.glob, "rb"))
        if not files:
            raise PrepError(f"--parallel {spec.glob}: no file matches")
        items.extend((TSV if spec.languages else CATALOG, (url,), spec.languages) for url in files)
    return items


def _read(url: str) -> bytes:
    with fsspec.open(url, "rb") as f:
        return f.read()


def _lines(url: str) -> list[str]:
    try:
        return _read(url).decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise PrepError(f"{url}: not UTF-8 ({e.reason} at byte {e.start})") from None


def read_item(item, *, strict: bool):
    """One work item's records: Pairs (not yet cleaned) and Drops."""
    kind, files, languages = item
    if kind == CATALOG:
        return catalog_pairs(_read(files[0]), files[0])
    if kind == TSV:
        return tsv_pairs("\n".join(_lines(files[0])), files[0], languages, strict=strict)
    return aligned_pairs(_lines(files[0]), _lines(files[1]), files, languages)


class CleanPairFn(beam.DoFn):
    def __init__(self, normalize: NormalizeConfig):
        self.normalize = normalize

    def process(self, record):
        record = clean_pair(record, self.normalize) if isinstance(record, Pair) else record
        yield record if isinstance(record, Pair) else beam.pvalue.TaggedOutput("drops", record)


class ReadParallel(beam.PTransform):
    """PBegin → {"records": every record read (Pair or Drop, for the read tallies), "pairs", "drops"}."""

    def __init__(self, specs: tuple[ParallelSpec, ...], *, strict: bool, normalize: NormalizeConfig):
        super().__init__()
        self.items = work_items(specs)
        self.strict, self.normalize = strict, normalize

    def expand(self, pbegin):
        strict = self.strict
        records = (
            pbegin
            | "Files" >> beam.Create(self.items)
            | "Spread" >> beam.Reshuffle()
            | "Read" >> beam.FlatMap(lambda item: read_item(item, strict=strict))
        )
        cleaned = records | "Clean" >> beam.ParDo(CleanPairFn(self.normalize)).with_outputs("drops", main="pairs")
        return {"records": records, "pairs": cleaned.pairs, "drops": cleaned.drops}
