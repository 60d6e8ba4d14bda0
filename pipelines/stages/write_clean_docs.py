"""WriteCleanDocs: Doc → Parquet shards of the CLEAN_DOC schema under clean/ (rows in a seeded random order).

Output: the URL of every shard written; Tokenize reads them back (pipelines/outputs/shards.read_clean_shard)
once the vocabulary exists, so the documents wait on disk, not in the runner's memory.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Iterable, Iterator

import apache_beam as beam

from pipelines.documents import keys
from pipelines.documents.records import Doc
from pipelines.outputs.atomic import open_atomically
from pipelines.outputs.shards import shard_count_by_rows, shard_name, write_clean_docs
from pipelines.shuffle import GroupIntoRanges, Scratch


def _write_clean_shard(work: tuple[str, int, int], docs: Iterable[Doc], *, directory: str) -> Iterator[str]:
    """GroupIntoRanges' consumer: one clean/ shard, a row group at a time, in shuffle-key order → its URL."""
    _, index, count = work
    url = posixpath.join(directory, shard_name("clean", index, count, "parquet"))
    with open_atomically(url) as sink:
        write_clean_docs(sink, docs)
    yield url


class WriteCleanDocs(beam.PTransform):
    """Doc → Parquet shards of the CLEAN_DOC schema under `directory` (rows in a seeded random order); outputs their URLs."""

    def __init__(self, directory: str, docs_per_shard: int = 50_000, scratch: Scratch | None = None):
        super().__init__()
        self.directory = directory
        self.docs_per_shard = docs_per_shard
        self.scratch = scratch

    def expand(self, docs):
        per_shard = self.docs_per_shard
        return (
            docs
            | "PlaceDocs" >> beam.Map(lambda d: ("clean", keys.key64(0, "clean", d.doc_id), d, 0))
            | "WriteCleanShards"
            >> GroupIntoRanges(
                self.scratch,
                lambda _, docs, __: shard_count_by_rows(docs, per_shard),
                consume=functools.partial(_write_clean_shard, directory=self.directory),
            )
        )
