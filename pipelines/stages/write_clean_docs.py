"""WriteCleanDocs: Doc → Parquet shards of the CLEAN_DOC schema, staged for clean/ (rows in a seeded random order).

Output: a Staged record (pipelines/outputs/attempts.py) per shard: each attempt writes its own file under the
scratch directory's staged/, Tokenize reads the committed attempt's file back (pipelines/outputs/shards.
read_clean_shard) once the vocabulary exists, so the documents wait on disk, not in the runner's memory, and
Finalize renames it to clean/<name>.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Iterable, Iterator

import apache_beam as beam

from pipelines.documents import keys
from pipelines.documents.records import Doc
from pipelines.outputs.attempts import Staged, open_attempt
from pipelines.outputs.shards import shard_count_by_rows, shard_name, write_clean_docs
from pipelines.shuffle import GroupIntoRanges, Scratch, scratch_or_local


def _write_clean_shard(work: tuple[str, int, int], docs: Iterable[Doc], *, directory: str, staging: str,
                       meta: bool) -> Iterator[Staged]:
    """GroupIntoRanges' consumer: one clean/ shard, a row group at a time, in shuffle-key order → its Staged file."""
    _, index, count = work
    with open_attempt(staging, posixpath.join(directory, shard_name("clean", index, count, "parquet"))) as sink:
        write_clean_docs(sink, docs, meta)
    yield sink.staged()


class WriteCleanDocs(beam.PTransform):
    """Doc → Parquet shards of the CLEAN_DOC schema for `directory` (rows in a seeded random order); outputs their
    Staged records."""

    def __init__(self, directory: str, docs_per_shard: int = 50_000, scratch: Scratch | None = None, meta: bool = False):
        super().__init__()
        self.meta = meta  # the meta column: decided for the whole run, so every shard of it has one schema
        self.directory = directory
        self.docs_per_shard = docs_per_shard
        self.scratch = scratch_or_local(scratch)  # the run files, and staged/ for the attempts' shard files

    def expand(self, docs):
        per_shard = self.docs_per_shard
        return (
            docs
            | "PlaceDocs" >> beam.Map(lambda d: ("clean", keys.key64(0, "clean", d.doc_id), d, 0))
            | "WriteCleanShards"
            >> GroupIntoRanges(
                self.scratch,
                lambda _, docs, __: shard_count_by_rows(docs, per_shard),
                consume=functools.partial(_write_clean_shard, directory=self.directory,
                                          staging=posixpath.join(self.scratch.directory, "staged"), meta=self.meta),
            )
        )
