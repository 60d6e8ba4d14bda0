"""ReadCorpus: named URL globs → RawDoc records (main output), Drop and Event records (tagged outputs).

Globs are expanded when the pipeline is built, so a typo fails before any worker starts, with the flag
named. Each file is planned into splits by a worker (pipelines/documents/splits.py): a large uncompressed
line file into byte ranges of --split-bytes, whose newlines are counted in parallel so that every range
knows its first line number, a Parquet file into row groups; compressed files and .txt documents or
paragraphs stay whole. Each split (or whole file) is read by one worker, streaming (see
pipelines/documents/readers.py), and its documents go on in the same worker: no shuffle of whole documents
here, since Beam's local runner would hold all of them in memory (the next stage that needs them spread,
Deduplicate or WriteCleanDocs, goes through prep's shuffle). The records, their ids and the report are the same
however a file is split. Every record read is also tallied as a ('read', path) accounting key, and every
matched file as a ('file', path) key, so that report.json lists it even when it holds no record (an
`empty_file` event then says so).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import apache_beam as beam
import fsspec
from apache_beam.metrics import Metrics

from pipelines.config import typed_input
from pipelines.documents import remote, splits
from pipelines.documents.readers import Event, ReadConfig, file_format, read_file
from pipelines.documents.records import Drop
from pipelines.errors import PrepError
from pipelines.outputs import ownership
from schemas import formats
from pipelines.stages.accounting import NAMESPACE


PROTOCOL_EXTRAS = {"hf": "hub", "gs": "gcs", "gcs": "gcs", "s3": "s3"}
"""The clozeforge extra that brings a URL protocol's fsspec filesystem."""
DATASETS_METADATA = ("state.json", "dataset_info.json", "dataset_dict.json")


def expand_inputs(inputs: Sequence[tuple[str, str]], output: str | None = None) -> list[tuple[str, str]]:
    """[(name, file URL)] for every file the globs match, sorted, less prep's own files under `output`; a glob
    matching nothing is an error."""
    return matched_files(inputs, output)[0]


def matched_files(inputs: Sequence[tuple[str, str]], output: str | None = None) -> tuple[list[tuple[str, str]], dict[str, str], list[str]]:
    """expand_inputs' files; {input name: root}: the URL prefix of the input's folder (the glob's folder
    before its first wildcard; a directory itself; a plain file's folder); and the files a glob matched under
    `output` that prep itself writes there (ownership.is_prep_file), left out: a rerun never reads its own
    vocabulary, lock or run file as documents. Document ids are made from the input's name and the rest of
    the URL, so that they do not change when the same corpus is read from another folder or bucket."""
    files: list[tuple[str, str]] = []
    roots: dict[str, str] = {}
    skipped: list[str] = []
    out_protocol = (fsspec.core.split_protocol(output)[0] or "file") if output else None
    for index, (name, pattern) in enumerate(inputs):
        flag = f"--input {typed_input(name, pattern, index)}"
        try:
            fs, _ = fsspec.core.url_to_fs(pattern)
        except ImportError as e:
            extra = PROTOCOL_EXTRAS.get(fsspec.core.split_protocol(pattern)[0] or "")
            raise PrepError(f"{flag}: " + (f"pip install 'clozeforge[{extra}]' to read it" if extra else str(e))) from None
        except ValueError as e:
            raise PrepError(f"{flag}: {e}") from None
        folder = _folder(pattern)
        with remote.quiet_clients():
            remote.check_reachable(fs, fs._strip_protocol(folder), flag)
            try:
                if fs.isdir(pattern):
                    folder, pattern = pattern, pattern.rstrip("/") + "/**"
                found = _without_sidecars(sorted(p for p in fs.glob(pattern) if fs.isfile(p)))
            except Exception as e:  # noqa: BLE001  (each object store's client has its own errors; the listing failed)
                raise PrepError(f"{flag}: cannot list it ({remote.describe(e)})") from None
        matches = []
        # the output's filesystem is opened only when this input lies on the same kind of store (a Dataflow job
        # built offline reads local files and writes gs://: building its graph must not need gcsfs)
        out_root = fsspec.core.url_to_fs(output)[1] if (fsspec.core.split_protocol(pattern)[0] or "file") == out_protocol else None
        for path in found:
            inside = out_root is not None and path.startswith(out_root.rstrip("/") + "/")
            if inside and ownership.is_prep_file(path[len(out_root.rstrip("/")) + 1:]):
                skipped.append(path)
            else:
                matches.append(path)
        if not matches:
            raise PrepError(f"{flag}: no file matches" + (f" outside the outputs of --output {output}" if found else ""))
        root = fs._strip_protocol(folder).rstrip("/") + "/"
        url = fs.unstrip_protocol if "://" in pattern else str
        files.extend((name, url(p)) for p in matches)
        roots[name] = url(root) if all(p.startswith(root) for p in matches) else ""
    return files, roots, skipped


def _without_sidecars(paths: list[str]) -> list[str]:
    """`paths` less the files that describe others rather than hold text: the JSON files `datasets`' save_to_disk
    writes beside its .arrow files (a directory of its is read as its Arrow files), and a multistream dump's index
    beside its dump (splits.py reads it to split the dump)."""
    folders = {p.rsplit("/", 1)[0] for p in paths if p.endswith(".arrow")}
    dumps = {p[: -len(".xml.bz2")] + "-index.txt.bz2" for p in paths if p.endswith(".xml.bz2")}
    return [p for p in paths if p not in dumps
            and not (p.rsplit("/", 1)[-1] in DATASETS_METADATA and p.rsplit("/", 1)[0] in folders)]


def _folder(pattern: str) -> str:
    """The folder a glob's matches lie under: the part before its first wildcard, up to its last '/'."""
    wild = re.search(r"[*?[]", pattern)
    head = pattern[: wild.start()] if wild else pattern
    return head.rsplit("/", 1)[0] if "/" in head else "."


class PlanSplitsFn(beam.DoFn):
    """(source, path) → (source, path, None) to read whole, (source, path, Split) for a row group, or, tagged
    `ranges`, (source, path, Split) for a byte range whose first line number is still to be counted."""

    def __init__(self, config: ReadConfig):
        self.config = config

    def process(self, element: tuple[str, str]):
        source, path = element
        fmt = file_format(path)
        planned = splits.plan(path, fmt, self.config.split_bytes, self.config.txt_mode)
        if planned is None:
            yield source, path, None
            return
        for split in planned:
            if formats.FORMATS[fmt].split != "lines":  # row groups, bz2 streams, gzip members: known without counting
                yield source, path, split
            else:
                yield beam.pvalue.TaggedOutput("ranges", (source, path, split))


def _numbered(grouped: tuple[tuple[str, str], Iterable[tuple[splits.Split, int]]]) -> list[tuple[str, str, splits.Split]]:
    (source, path), counted = grouped
    return [(source, path, split) for split in splits.number_ranges(counted)]


Counted = tuple[tuple[str, str], tuple[splits.Split, int]]
"""((source, path), (split, its newlines)): what RangesPerFile groups. Declared on the step too, not only here: a Beam
older than 2.78 reads this module's string annotations as Any."""


def _count_newlines(ranged: tuple[str, str, splits.Split], flags: dict[str, str]) -> Counted:
    """(source, path, split) → ((source, path), (split, its newlines)); Beam passes the element first."""
    source, path, split = ranged
    try:
        return (source, path), (split, splits.count_newlines(path, split))
    except Exception as e:
        if remote.is_store_failure(e):
            raise remote.store_failed(flags[source], path, e) from None
        raise


class ReadFileFn(beam.DoFn):
    """(source, path, split) → its records. A store that fails once the file was listed stops the run with a
    PrepError naming the --input (remote.store_failed); a file that is unreadable is a counted drop."""

    def __init__(self, config: ReadConfig, roots: dict[str, str], flags: dict[str, str] | None = None):
        self.config, self.roots = config, roots  # {input name: its root}, see matched_files
        self.flags = flags or {}  # {input name: its --input flag as typed}
        self.files = Metrics.counter(NAMESPACE, "files_read")
        self.records = Metrics.counter(NAMESPACE, "records_read")

    def process(self, element: tuple[str, str, splits.Split | None]):
        try:
            yield from self._read(element)
        except Exception as e:
            if remote.is_store_failure(e):
                raise remote.store_failed(self.flags.get(element[0], f"--input {element[0]}"), element[1], e) from None
            raise

    def _read(self, element: tuple[str, str, splits.Split | None]):
        source, path, split = element
        if split is None or split.start == 0:
            self.files.inc()
            yield beam.pvalue.TaggedOutput("accounting", (path, "file"))  # every matched file is in the report
        name = f"{source}/{path.removeprefix(self.roots[source])}"
        records = 0
        for item in read_file(source, path, self.config, split, name=name):
            if isinstance(item, Event):
                Metrics.counter(NAMESPACE, f"event_{item.kind}").inc()
                yield beam.pvalue.TaggedOutput("accounting", (item.path, f"event:{item.kind}"))
                continue
            records += 1
            self.records.inc()
            yield beam.pvalue.TaggedOutput("accounting", (path, "read"))
            if isinstance(item, Drop):
                yield beam.pvalue.TaggedOutput("drops", item)
            else:
                yield item
        if split is None and not records:  # a 0-byte file, or one of blank lines: no record, but not unseen
            Metrics.counter(NAMESPACE, "event_empty_file").inc()
            yield beam.pvalue.TaggedOutput("accounting", (path, "event:empty_file"))


class ReadCorpus(beam.PTransform):
    """Outputs: `docs` (RawDoc), `drops` (Drop), `accounting` ((path, key) tally keys)."""

    def __init__(self, inputs: Sequence[tuple[str, str]], config: ReadConfig, output: str | None = None):
        super().__init__()
        self.files, self.roots, _ = matched_files(inputs, output)  # prep's own files under `output` left out
        self.flags = {name: f"--input {typed_input(name, pattern, i)}" for i, (name, pattern) in enumerate(inputs)}
        self.config = config

    def expand(self, pbegin):
        planned = (
            pbegin
            | "ListFiles" >> beam.Create(self.files)
            | "SpreadFiles" >> beam.Reshuffle()
            | "PlanSplits" >> beam.ParDo(PlanSplitsFn(self.config)).with_outputs("ranges", main="parts")
        )
        numbered = (
            planned.ranges
            | "SpreadRanges" >> beam.Reshuffle()
            | "CountNewlines" >> beam.Map(_count_newlines, self.flags).with_output_types(Counted)
            | "RangesPerFile" >> beam.GroupByKey()
            | "NumberRanges" >> beam.FlatMap(_numbered)
        )
        read = (
            (planned.parts, numbered)
            | "AllParts" >> beam.Flatten()
            | "SpreadParts" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(ReadFileFn(self.config, self.roots, self.flags)).with_outputs("drops", "accounting", main="docs")
        )
        return {"docs": read.docs, "drops": read.drops, "accounting": read.accounting}
