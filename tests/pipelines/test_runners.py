"""Prep under what production runners do to a job (issue 48): retry a failed bundle, split a bundle while it runs,
run the final step twice at once; the counters under retries. Each run's outputs are compared, byte for byte,
with the same flags on the default runner (conftest.py's default_run); report.json too.

Failures are injected in this process: BundleBasedDirectRunner (Beam's local runner that retries a failed bundle,
up to 4 attempts) and the FnApiRunner with its in-process gRPC worker run the DoFns here, and each hook below is a
module attribute the step looks up when it runs."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import threading

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import prep
from pipelines.stages import accounting
from schemas import Manifest
from tests.helpers import digest_tree
from tests.pipelines.conftest import comparable, prep_argv, temporaries

pytestmark = pytest.mark.integration  # several prep runs


class InjectedFailure(RuntimeError):
    pass


class Faults:
    """Failures to raise once per point, shared by every attempt (threads of this process)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.pending: set[str] = set()
        self.fired: collections.Counter = collections.Counter()
        self.failed_kept = 0  # records the failed attempt of a kept-documents tally had counted

    def once(self, point: str) -> None:
        with self.lock:
            if point in self.pending:
                self.pending.discard(point)
                self.fired[point] += 1
                raise InjectedFailure(f"injected once: {point}")


FAULTS = Faults()


def _after(real, point):
    """`real`, then a failure at `point` the first time: the attempt did its side effect and died before committing."""
    def wrapped(*args, **kwargs):
        result = real(*args, **kwargs)
        FAULTS.once(point(*args) if callable(point) else point)
        return result
    return wrapped


SHUFFLES = ("dedup/exact", "clean", "words", "buckets", "pairs")
"""Every run-file shuffle of a default prep run, by its directory under .tmp-<id>/."""


def inject_everywhere(monkeypatch) -> None:
    """A failure after the side effect of each side-effecting step: the pair and clean shard writers, every
    shuffle's run-file spill, the vocabulary writer, the final step, and the kept-documents tally."""
    from pipelines import wordpiece
    from pipelines.shuffle import runs
    from pipelines.stages import finalize, write_clean_docs, write_shards

    monkeypatch.setattr(write_shards, "write_pairs", _after(write_shards.write_pairs, "pair shard"))
    monkeypatch.setattr(write_clean_docs, "write_clean_docs", _after(write_clean_docs.write_clean_docs, "clean shard"))
    monkeypatch.setattr(runs.RunWriter, "flush", _after(runs.RunWriter.flush,
                                                        lambda writer: "spill " + writer.directory.split("/.tmp-", 1)[1].split("/", 1)[1]))
    monkeypatch.setattr(wordpiece, "write_vocab", _after(wordpiece.write_vocab, "vocabulary"))
    monkeypatch.setattr(finalize, "sweep", _after(finalize.sweep, "final step"))
    finish = accounting.TallyFn.finish_bundle

    def tally_then_fail(self):
        kept = sum(self.counts.values()) if self.key_of is accounting._kept_key else 0
        yield from finish(self)
        if kept:
            with FAULTS.lock:
                FAULTS.failed_kept = FAULTS.failed_kept or (kept if "kept tally" in FAULTS.pending else 0)
            FAULTS.once("kept tally")

    monkeypatch.setattr(accounting.TallyFn, "finish_bundle", tally_then_fail)
    FAULTS.pending = {"pair shard", "clean shard", "vocabulary", "final step", "kept tally", *(f"spill {s}" for s in SHUFFLES)}


@pytest.fixture(scope="module")
def retried_run(paragraphs_dir, tmp_path_factory):
    """prep on BundleBasedDirectRunner with one failure injected into every side-effecting step; (out, report,
    counters as {name: (attempted, committed)})."""
    results = []
    with pytest.MonkeyPatch.context() as mp:
        inject_everywhere(mp)
        real_run = beam.Pipeline.run

        def keep_result(self, *args, **kwargs):
            results.append(real_run(self, *args, **kwargs))
            return results[-1]

        mp.setattr(beam.Pipeline, "run", keep_result)
        out = str(tmp_path_factory.mktemp("retried"))
        report = prep.run(prep_argv(paragraphs_dir, out, "--runner=BundleBasedDirectRunner"))
    counters = {}
    for c in results[0].metrics().query(MetricsFilter().with_namespace(accounting.NAMESPACE))["counters"]:
        attempted, committed = counters.get(c.key.metric.name, (0, 0))
        counters[c.key.metric.name] = (attempted + c.attempted, committed + c.committed)
    return out, report, counters


def test_a_runner_that_retries_leaves_the_outputs_of_a_clean_run(default_run, retried_run):
    """Every injected failure fired once, the runner retried each, and the outputs, report.json and every
    sha256 are the clean run's, with no temporary left (before: an attempt's shard renamed into pairs/ beside
    the one the manifest describes; a failed final step left manifest.json.tmp)."""
    out, report, _ = retried_run
    assert FAULTS.fired == {point: 1 for point in FAULTS.fired} and set(FAULTS.fired) == {
        "pair shard", "clean shard", "vocabulary", "final step", "kept tally", *(f"spill {s}" for s in SHUFFLES)}
    assert not FAULTS.pending
    assert digest_tree(out) == default_run[2]
    assert comparable(report) == comparable(default_run[1])
    assert temporaries(out) == []
    manifest = Manifest.read(os.path.join(out, "pairs"))
    for shard in manifest.shards:
        with open(manifest.resolve(shard.path), "rb") as f:
            data = f.read()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (shard.bytes, shard.sha256), shard.path


def test_the_counters_count_attempts_and_report_json_counts_records(default_run, retried_run):
    """Fault 5: accounting.py said Beam's counters equal the report's totals. Under retries they do not: the kept
    tally's failed attempt counted its records too (attempted, and committed as this runner reports it), while
    report.json, which counts through the data, is the clean run's."""
    _, report, counters = retried_run
    total = report["total"]
    assert total == default_run[1]["total"]
    assert FAULTS.failed_kept > 0
    assert counters["records_kept"] == (total["kept"] + FAULTS.failed_kept,) * 2
    for reason, count in total["dropped"].items():  # no failure there: equal
        assert counters[f"dropped_{reason}"] == (count, count)
    doc = accounting.__doc__
    assert "so Beam's counters equal the report's totals" not in doc
    assert "attempted" in doc and "committed" in doc and "report.json is the figure" in doc


# -- forced bundle splits ------------------------------------------------------------------------------------


class Gate:
    """Holds the first element a split stage processes until the runner has asked for its split."""

    def __init__(self):
        self.armed, self.entered, self.released = False, threading.Event(), threading.Event()

    def arm(self) -> None:
        self.entered.clear()
        self.released.clear()
        self.armed = True

    def enter(self) -> None:
        if self.armed:
            self.armed = False
            self.entered.set()
            self.released.wait(60)


GATE = Gate()
SPLITS: collections.Counter = collections.Counter()


def _gated(real):
    def wrapped(*args, **kwargs):
        GATE.enter()
        return real(*args, **kwargs)
    return wrapped


def halving(stage: str):
    """A split manager (fn_runner.split_manager): while the first element of a bundle of 2+ is processed, the rest
    of the bundle is split in half, and again, until that element is all the bundle holds; the runner calls the
    manager again for each split-off part. Every element ends up in a bundle of its own: n - 1 splits."""
    def manager(num_elements):
        if num_elements < 2:
            return
        GATE.arm()
        yield  # the runner sends the elements
        if GATE.entered.wait(60):
            left = num_elements  # the running element and those after it in this bundle
            while left > 1:
                result = yield 0.5
                if result is None or not result.channel_splits:
                    break
                SPLITS[stage] += 1
                left = result.channel_splits[0].last_primary_element + 1
        GATE.armed = False
        GATE.released.set()
    return manager


SPLIT_STAGES = ("ReadCorpus/ReadFiles/ParDo(ReadFileFn)", "MakeNspPairs/GroupBuckets/Ranges/Read/ParDo(_ReadRangeFn)",
                "WriteShards/GlobalShuffle/Ranges/Read/ParDo(_ReadRangeFn)")
"""Reading the input files (and behind it the tallies and the dedup spill), making pairs from the buckets (and the
pair spill), writing the pair shards."""


def test_bundles_split_while_they_run_give_the_same_bytes(default_run, paragraphs_dir, tmp_path, monkeypatch):
    """FnApiRunner's split manager halves every bundle of three stages while its first element runs (the
    SDK harness over gRPC, as a distributed runner's dynamic splitting does); the outputs are the default run's."""
    from apache_beam.runners.portability import fn_api_runner
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.transforms import environments

    from pipelines.documents import nsp
    from pipelines.stages import read_corpus, write_shards

    monkeypatch.setattr(read_corpus, "read_file", _gated(read_corpus.read_file))
    monkeypatch.setattr(nsp, "make_pairs", _gated(nsp.make_pairs))
    monkeypatch.setattr(write_shards, "write_pairs", _gated(write_shards.write_pairs))
    out = tmp_path / "split"
    config, _ = prep.parse(prep_argv(paragraphs_dir, out))
    runner = fn_api_runner.FnApiRunner(default_environment=environments.EmbeddedPythonGrpcEnvironment.default())
    managers = [fn_runner.split_manager(stage, halving(stage)) for stage in SPLIT_STAGES]
    for manager in managers:
        manager.__enter__()
    try:
        p = beam.Pipeline(runner=runner, options=PipelineOptions([]))
        prep.build(p, config)
        p.run().wait_until_finish()
    finally:
        for manager in reversed(managers):
            manager.__exit__(None, None, None)
    # every element ended in a bundle of its own: n elements, at least n - 1 splits (the runner bundles the split-off
    # parts together again, which splits more)
    pairs = default_run[1]["pairs"]
    elements = (len(os.listdir(paragraphs_dir)), sum(-(-stats["docs"] // 12) for stats in pairs.values()),
                sum(stats["shards"] for stats in pairs.values()))
    assert elements == (5, 10, 7)
    assert [SPLITS[stage] >= n - 1 for stage, n in zip(SPLIT_STAGES, elements)] == [True] * 3, SPLITS
    assert digest_tree(str(out)) == default_run[2]
    assert comparable(json.loads((out / "report.json").read_text())) == comparable(default_run[1])
    assert temporaries(out) == []


# -- the final step twice at once ----------------------------------------------------------------------------


class Twice:
    """Two attempts of the final step at once: A is held just before it renames its manifest into place while B
    runs whole, then A goes on."""

    def __init__(self):
        self.a_holds, self.b_done = threading.Event(), threading.Event()
        self.outcomes: dict[str, object] = {}


TWICE = Twice()


def _hold_a_before_the_manifest(real_mv):
    def mv(self, path1, path2, *args, **kwargs):
        if threading.current_thread().name == "final-step-a" and str(path2).endswith("/pairs/manifest.json"):
            TWICE.a_holds.set()
            TWICE.b_done.wait(60)
        return real_mv(self, path1, path2, *args, **kwargs)
    return mv


def final_step_twice(_, **kwargs):
    """Stands in for finalize.finalize in the pipeline (a module function, so that the step pickles it by name)."""
    from pipelines.stages import finalize

    def attempt(name):
        try:
            TWICE.outcomes[name] = finalize.REAL_FINALIZE(_, **kwargs)
        except Exception as e:  # noqa: BLE001  (what the attempt ended with is the finding)
            TWICE.outcomes[name] = e

    a = threading.Thread(target=attempt, args=("a",), name="final-step-a")
    a.start()
    assert TWICE.a_holds.wait(60), "attempt A never reached its manifest's rename"
    attempt("b")
    TWICE.b_done.set()
    a.join()
    return TWICE.outcomes["b"]


def test_two_attempts_of_the_final_step_at_once_leave_one_complete_output(default_run, paragraphs_dir, tmp_path, monkeypatch):
    """Fault 4: the manifest went through a fixed manifest.json.tmp, which two attempts of the final step shared:
    B truncated A's file, wrote its own and renamed it, and A's rename then failed (FileNotFoundError). Now each
    attempt's temporaries are its own and the sweep leaves the other's alone: both attempts end well, the
    outputs are the clean run's, and no temporary is left beside report.json."""
    from fsspec.implementations.local import LocalFileSystem

    from pipelines.stages import finalize

    monkeypatch.setattr(LocalFileSystem, "mv", _hold_a_before_the_manifest(LocalFileSystem.mv))
    monkeypatch.setattr(finalize, "REAL_FINALIZE", finalize.finalize, raising=False)
    monkeypatch.setattr(finalize, "finalize", final_step_twice)
    out = tmp_path / "twice"
    report = prep.run(prep_argv(paragraphs_dir, out))
    assert set(TWICE.outcomes) == {"a", "b"}
    assert not isinstance(TWICE.outcomes["a"], Exception), repr(TWICE.outcomes["a"])
    assert TWICE.outcomes["a"] == TWICE.outcomes["b"] and json.loads(json.dumps(TWICE.outcomes["b"])) == report
    assert digest_tree(str(out)) == default_run[2]
    assert comparable(report) == comparable(default_run[1])
    assert temporaries(out) == []
