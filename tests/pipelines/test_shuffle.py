"""Shuffles through run files: the runs themselves (pipelines/shuffle/runs.py) and the Beam transforms over them
(pipelines/shuffle/), against Beam's own GroupByKey and keys.bucket."""

from __future__ import annotations

import os
import random
import typing

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.documents import keys
from pipelines.errors import PrepError
from pipelines.shuffle import (
    GroupByKeyViaFiles,
    GroupIntoRanges,
    Scratch,
    payload,
    runs,
)


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(runs, "_BLOCK_BYTES", 200)  # many blocks per run, so range reads skip some


def write_run(directory: str, records: list[tuple[int, bytes, bytes]], stream: str = "s") -> runs.RunInfo:
    writer = runs.RunWriter(directory, stream)
    for pos, key, value in records:
        writer.add(pos, key, value, size=len(value))
    return writer.flush()


def test_a_run_reads_back_sorted_and_by_range(tmp_path, small_blocks):
    rng = random.Random(0)
    records = [(rng.getrandbits(64), rng.choice([b"", b"k1", b"k2"]), os.urandom(rng.randrange(0, 40))) for _ in range(500)]
    run = write_run(str(tmp_path), records)
    assert run.rows == 500 and run.size == sum(len(r[2]) for r in records) and len(run.blocks) > 10
    assert list(runs.read_range(run, 0, 1 << 64)) == sorted(records, key=lambda r: (r[0], r[1]))
    lo, hi = sorted(rng.getrandbits(64) for _ in range(2))
    assert list(runs.read_range(run, lo, hi)) == sorted((r for r in records if lo <= r[0] < hi), key=lambda r: (r[0], r[1]))


def test_merge_of_runs_is_the_sorted_union(tmp_path, small_blocks):
    rng = random.Random(1)
    parts = [[(rng.getrandbits(64), b"", str(i).encode()) for i in range(n)] for n in (0, 1, 100, 250)]
    written = [write_run(str(tmp_path), part) for part in parts if part]
    everything = sorted((r for part in parts for r in part), key=lambda r: (r[0], r[1]))
    assert list(runs.merge_range(written, 0, 1 << 64)) == everything
    runs.remove(written)
    runs.remove(written)  # already gone is fine
    assert not any(name.endswith(".run") for name in os.listdir(tmp_path))


@pytest.mark.parametrize("count", [1, 2, 3, 7, 1000])
def test_range_bounds_are_exactly_the_keys_that_bucket_maps_there(count):
    rng = random.Random(count)
    edges = [0, 1, (1 << 64) - 1] + [b for i in range(count) for b in runs.range_bounds(i, count) if b < 1 << 64]
    for pos in edges + [rng.getrandbits(64) for _ in range(200)]:
        for p in (pos - 1, pos, pos + 1):
            if 0 <= p < 1 << 64:
                lo, hi = runs.range_bounds(keys.bucket(p, count), count)
                assert lo <= p < hi
    assert runs.range_bounds(0, count)[0] == 0 and runs.range_bounds(count - 1, count)[1] == 1 << 64


def options():
    return PipelineOptions(["--runner=FnApiRunner"])


def test_group_by_key_via_files_equals_beam_group_by_key(tmp_path):
    rng = random.Random(2)
    pairs = [(rng.choice(["a", "b", ("t", 1), ("t", 2), b"raw"]), rng.randrange(1000)) for _ in range(3000)]
    expected = {}
    for k, v in pairs:
        expected.setdefault(k, []).append(v)
    scratch = Scratch(str(tmp_path / "runs"), spill_bytes=2000)  # dozens of runs per bundle
    with test_pipeline.TestPipeline(options=options()) as p:
        grouped = p | beam.Create(pairs) | GroupByKeyViaFiles(scratch, rows_per_partition=700)  # 5 readers
        assert_that(grouped | beam.MapTuple(lambda k, vs: (k, sorted(vs))),
                    equal_to([(k, sorted(vs)) for k, vs in expected.items()]))
    left = [f for _, _, files in os.walk(tmp_path) for f in files]
    assert left == [], "every run is removed once read"


def test_group_into_ranges_places_by_bucket_and_keeps_empty_ranges(tmp_path):
    rng = random.Random(3)
    # 40 values in stream x, 1 in stream y; ranges: ceil(rows / 6) for x (7), 3 for y (two of them empty)
    records = [("x", rng.getrandbits(63), i, 1) for i in range(40)] + [("y", rng.getrandbits(63), "lone", 5)]
    def ranges(stream, rows, size):
        assert (rows, size) == ((40, 40) if stream == "x" else (1, 5)), "a stream's totals reach its rule"
        return -(-rows // 6) if stream == "x" else 3

    with test_pipeline.TestPipeline(options=options()) as p:
        out = p | beam.Create(records) | GroupIntoRanges(Scratch(str(tmp_path), spill_bytes=300), ranges)
        expected = {("x", i, 7): [] for i in range(7)} | {("y", i, 3): [] for i in range(3)}
        for stream, pos, value, _ in sorted(records, key=lambda r: r[1]):
            count = 7 if stream == "x" else 3
            expected[(stream, keys.bucket(pos, count), count)].append(value)
        assert_that(out, equal_to(list(expected.items())))


def test_group_into_ranges_streams_to_a_consumer_with_side_inputs(tmp_path):
    def consume(work, values, suffix):
        yield f"{work[1]}/{work[2]}:{sum(values)}{suffix}"

    def record(k):
        return "s", (k * 0x9E3779B97F4A7C15) % (1 << 64), k, 0

    records = [record(k) for k in range(1, 101)]
    with test_pipeline.TestPipeline(options=options()) as p:
        suffix = p | "Suffix" >> beam.Create(["!"])
        # positions reach 2**64: typed Any, or Beam infers an int coder for them, which stops at 2**63
        out = p | beam.Create(range(1, 101)) | beam.Map(record).with_output_types(typing.Any) | GroupIntoRanges(
            Scratch(str(tmp_path)), lambda *_: 2, beam.pvalue.AsSingleton(suffix), consume=consume)
        halves = [sum(k for _, pos, k, _ in records if keys.bucket(pos, 2) == i) for i in range(2)]
        assert_that(out, equal_to([f"0/2:{halves[0]}!", f"1/2:{halves[1]}!"]))


def test_payloads_round_trip_every_record_type():
    import numpy as np

    from pipelines.documents.records import Doc, Drop, RawDoc, TokenizedDoc

    values = [Doc("s", "p", "id", ("One.", "Two.")), TokenizedDoc("s", "p", "id", ((1, 2), (3,))), RawDoc("s", "p", 3, "id", "t"),
              Drop("p", "too_short", 2, "x"), {"tokens_a": b"\x01\x00", "is_random_next": True, "num_tokens": 4, "doc_id": "d"},
              ("t", 1), "near", b"raw", 2**64 - 1, None, 1.5]
    for value in values:
        assert payload.decode(payload.encode(value)) == value
    doc_id, signature = payload.decode(payload.encode(("d", np.arange(4, dtype=np.uint64))))
    assert doc_id == "d" and signature.dtype == np.uint64 and signature.tolist() == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="cannot carry a object"):
        payload.encode(object())


class _RunsCode:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # what a crafted pickle would do: touch the marker file


def test_a_tampered_run_file_is_a_one_line_error_and_runs_no_code(tmp_path):
    import pickle

    marker = tmp_path / "executed"
    run = write_run(str(tmp_path), [(5, b"", pickle.dumps(_RunsCode(str(marker))))])
    [(_, _, crafted)] = runs.read_range(run, 0, 1 << 64)
    with pytest.raises(PrepError) as err:
        payload.decode(crafted)
    assert "\n" not in str(err.value) and "not a record this version of prep wrote" in str(err.value)
    assert not marker.exists()
    with open(run.path, "r+b") as f:  # garbage over the compressed block
        f.write(b"\x00" * 8)
    with pytest.raises(PrepError, match=rf"^{run.path}: shuffle run file damaged at byte 0 "):
        list(runs.read_range(run, 0, 1 << 64))
