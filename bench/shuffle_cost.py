"""Benchmark: what prep's run-file shuffles write and read, measured on a small corpus and projected to
100 GB and 1 TB of text on Google Cloud Storage, against Dataflow Shuffle's price for the same bytes.

In:  `corpus` (a glob read by bench/_corpus.py, or None for the built-in docstring corpus): S MB of documents
     (S = 4; 1 with `quick`) written as one JSON-lines file; prep runs once in this process (FnApiRunner, one
     worker, --shuffle files, --vocab-size 8192, --spill-mb 4) with pipelines/shuffle/runs.py instrumented.
Out: per shuffle (its directory under .tmp-<id>/: dedup/exact, clean, words, buckets, pairs): measured run
     files, rows, record bytes (uncompressed, as a GroupByKey would move them), compressed bytes, blocks, and
     range reads (GETs) with their bytes; then, per target size T (100 GB, 1 TB), the projection:
       rows and bytes scale with T / S (for words, an over-estimate: distinct words grow slower than text);
       run files = bytes / --spill-mb (64 MiB, the default: the best case, one run per full buffer; a
       bundle's end also writes one); blocks per run = 64 (1 MiB each, uncompressed); readers = rows / the rows each reader takes (the code's constants, below);
       GETs = runs x (blocks per run + readers) (a reader reads each block of each run that overlaps its key
       range, and, once readers outnumber a run's blocks, one whole block per run); bytes read = GETs x one
       compressed block when readers outnumber blocks (else the run bytes once);
       cost = class A x runs (one upload each) + class B x GETs + storage for the job's duration,
       against Dataflow Shuffle = record bytes x its price per GB processed.
     Prices (list, USD, no free tier or volume discount applied): README.md next to pipelines/shuffle/ cites
     them. The projection is a model fed by measured ratios, not a measurement at 100 GB.
"""

from __future__ import annotations

import json
import os
import posixpath
import tempfile
from collections import defaultdict

from bench._corpus import read_texts

GCS_CLASS_A_PER_1000 = 0.005
GCS_CLASS_B_PER_1000 = 0.0004
GCS_STANDARD_GB_MONTH = 0.020
DATAFLOW_SHUFFLE_PER_GB = 0.011
JOB_HOURS = 4  # how long run files sit in the bucket (storage is prorated per second)
SPILL_MB = 4
RUN_BYTES = 64 << 20  # --spill-mb's default: record bytes per run file at scale
BLOCK_BYTES = 1 << 20  # runs._BLOCK_BYTES: uncompressed bytes per block, the unit of a range read
TARGETS_GB = (100, 1000)

# Rows one reader takes, per shuffle, as the code sets it (default flags).
READER_ROWS = {
    "dedup/exact": 20_000,   # GroupByKeyViaFiles.ROWS_PER_PARTITION
    "clean": 50_000,         # WriteCleanDocs: docs per clean/ shard
    "words": 200_000,        # count_words.ROWS_PER_RANGE
    "buckets": 1_000,        # --bucket-docs: one reader per random bucket
    "pairs": 100_000,        # --rows-per-shard: one reader per shard
}


def _instrument(written: dict, read: dict) -> None:
    from pipelines.shuffle import runs

    flush, read_range = runs.RunWriter.flush, runs.read_range

    def shuffle_of(path: str) -> str:
        parts = path.split("/")
        at = next(i for i, p in enumerate(parts) if p.startswith(".tmp-"))
        return "/".join(parts[at + 1 : -1])

    def counting_flush(self):
        raw = self.bytes
        info = flush(self)
        if info is not None:
            entry = written[shuffle_of(info.path)]
            entry["runs"] += 1
            entry["rows"] += info.rows
            entry["record_bytes"] += raw
            entry["compressed_bytes"] += sum(b[3] for b in info.blocks)
            entry["blocks"] += len(info.blocks)
        return info

    def counting_read_range(run, lo, hi):
        entry = read[shuffle_of(run.path)]
        for first, last, _, length in run.blocks:
            if not (last < lo or first >= hi):
                entry["gets"] += 1
                entry["bytes"] += length
        return read_range(run, lo, hi)

    runs.RunWriter.flush = counting_flush
    runs.read_range = counting_read_range


def _project(name: str, w: dict, scale: float) -> dict:
    record_bytes = w["record_bytes"] * scale
    rows = w["rows"] * scale
    runs = max(1, round(record_bytes / RUN_BYTES))
    blocks_per_run = RUN_BYTES // BLOCK_BYTES
    block_bytes = BLOCK_BYTES * w["compressed_bytes"] / w["record_bytes"]  # one block, compressed as measured
    readers = max(1, round(rows / READER_ROWS.get(name, 20_000)))
    gets = runs * (blocks_per_run + readers)
    bytes_read = gets * block_bytes if readers > blocks_per_run else w["compressed_bytes"] * scale
    stored_gb = w["compressed_bytes"] * scale / 1e9
    cost = (runs * GCS_CLASS_A_PER_1000 + gets * GCS_CLASS_B_PER_1000) / 1000 + stored_gb * GCS_STANDARD_GB_MONTH * JOB_HOURS / 730
    return {
        "run_files": runs,
        "readers": readers,
        "gets": gets,
        "gb_written": round(stored_gb, 1),
        "gb_read": round(bytes_read / 1e9, 1),
        "read_amplification": round(bytes_read / max(w["compressed_bytes"] * scale, 1), 1),
        "gcs_usd": round(cost, 2),
        "dataflow_shuffle_usd": round(record_bytes / 1e9 * DATAFLOW_SHUFFLE_PER_GB, 2),
    }


def main(corpus: str | None, quick: bool) -> dict:
    from pipelines import prep

    size = 1_000_000 if quick else 4_000_000
    written: dict = defaultdict(lambda: defaultdict(int))
    read: dict = defaultdict(lambda: defaultdict(int))
    _instrument(written, read)
    with tempfile.TemporaryDirectory(prefix="bench-shuffle-") as tmp:
        path = posixpath.join(tmp, "corpus.jsonl")
        text_bytes = 0
        with open(path, "w", encoding="utf-8") as f:
            for text in read_texts(corpus, size):
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                text_bytes += len(text.encode())
        prep.run(["--input", path, "--output", os.path.join(tmp, "out"), "--vocab-size", "8192",
                  "--spill-mb", str(SPILL_MB), "--shuffle", "files"])
    measured = {name: {**dict(w), **{f"read_{k}": v for k, v in read[name].items()}} for name, w in sorted(written.items())}
    projected = {}
    for target in TARGETS_GB:
        scale = target * 1e9 / text_bytes
        per = {name: _project(name, w, scale) for name, w in measured.items()}
        total = {key: round(sum(p[key] for p in per.values()), 2) for key in ("run_files", "gets", "gb_written", "gb_read",
                                                                             "gcs_usd", "dataflow_shuffle_usd")}
        projected[f"{target}GB"] = {"total": total, "per_shuffle": per}
    one_tb = projected[f"{TARGETS_GB[-1]}GB"]["total"]
    return {
        "text_mb": round(text_bytes / 1e6, 2),
        "measured": measured,
        "projected": projected,
        "ratio": round(one_tb["gcs_usd"] / max(one_tb["dataflow_shuffle_usd"], 1e-9), 2),
        "ratio_is": "run files on GCS / Dataflow Shuffle, USD at 1 TB",
    }
