"""Console progress of a local prep run: stage, records, MB read, rate and (where the input size is known) ETA.

In:  taps on the graph's PCollections (ProgressFn: records read, text read, documents kept, pairs made),
     run in the workers of a local runner (in-process, or processes of this machine), which write their
     running totals to a small file each under a local directory, at most once a second; the launcher's
     Reporter sums those files every second and prints one line to stderr.
Out: lines such as `prep: read 120,000 records, 34.1 of 96.0 MB (2.1 MB/s, ETA 30s) | kept 80,000 docs |
     pairs 0`. On Dataflow the workers are elsewhere: Beam's counters (pipelines/stages/accounting.py) are
     the progress there, in the Dataflow console, and no tap is added.

MB read counts the characters of the documents read, against the input files' sizes: an ETA is given only
when every input is uncompressed text or JSON lines, where the two agree up to non-ASCII characters.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Self

import apache_beam as beam

_WRITE_EVERY_S = 1.0


_STATE: dict[str, dict] = {}  # per process and progress directory: its file, totals and last write
_LOCK = threading.Lock()


class ProgressFn(beam.DoFn):
    """Adds one per element (with `count`) and `measure(element)` bytes to a stage's totals in this process,
    which go to this process's file under `directory` at most once a second and at every bundle's end."""

    def __init__(self, directory: str, stage: str, *, count: bool = True, measure: Callable | None = None,
                 keep: Callable | None = None):
        self.directory, self.stage, self.count, self.measure, self.keep = directory, stage, count, measure, keep

    def process(self, element):
        if self.keep is not None and not self.keep(element):
            return
        with _LOCK:
            state = _STATE.setdefault(self.directory, {"file": None, "totals": {}, "written": 0.0})
            entry = state["totals"].setdefault(self.stage, [0, 0])
            entry[0] += self.count
            if self.measure is not None:
                entry[1] += self.measure(element)
            due = time.monotonic() - state["written"] >= _WRITE_EVERY_S
        if due:
            self._write()

    def finish_bundle(self):
        self._write()

    def _write(self) -> None:
        with _LOCK:
            state = _STATE.get(self.directory)
            if state is None:
                return
            if state["file"] is None:
                state["file"] = os.path.join(self.directory, f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
            body, path = json.dumps(state["totals"]), state["file"]
            state["written"] = time.monotonic()
        with contextlib.suppress(OSError):  # progress is best effort: never fail a run for it
            with open(path + ".part", "w") as f:
                f.write(body)
            os.replace(path + ".part", path)


def read_totals(directory: str) -> dict[str, list[int]]:
    totals: dict[str, list[int]] = {}
    for name in os.listdir(directory):
        if not name.endswith(".json"):
            continue
        with contextlib.suppress(OSError, ValueError), open(os.path.join(directory, name)) as f:
            for stage, (records, size) in json.load(f).items():
                entry = totals.setdefault(stage, [0, 0])
                entry[0] += records
                entry[1] += size
    return totals


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else (
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s")


def describe(totals: dict[str, list[int]], elapsed: float, input_bytes: int | None, done: bool = False) -> str:
    """One progress line from summed totals, `elapsed` seconds into the run (no ETA once `done`)."""
    records, text = totals.get("read", [0, 0])
    mb = text / 1e6
    read = f"read {records:,} records, {mb:,.1f}"
    if input_bytes:
        read += f" of {input_bytes / 1e6:,.1f}"
    read += " MB"
    rate = mb / elapsed if elapsed > 0 else 0.0
    detail = [f"{rate:.2f} MB/s"]
    if input_bytes and rate > 0 and text < input_bytes and not done:
        detail.append(f"ETA {_duration((input_bytes - text) / 1e6 / rate)}")
    parts = [f"{read} ({', '.join(detail)})", f"kept {totals.get('kept', [0])[0]:,} docs",
             f"pairs {totals.get('pairs', [0])[0]:,}"]
    return "prep: " + " | ".join(parts)


class Reporter:
    """Prints a progress line to stderr every `every` seconds while the run goes, and one at the end."""

    def __init__(self, directory: str, input_bytes: int | None, every: float = 1.0, stream=None):
        self.directory, self.input_bytes, self.every = directory, input_bytes, every
        # a stream of its own on the process's stderr, so that it stays the terminal while fd 2 is held
        self.stream = stream or os.fdopen(os.dup(sys.stderr.fileno()), "w")
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="prep-progress", daemon=True)
        self.live = self.stream.isatty()

    def line(self, done: bool = False) -> str:
        return describe(read_totals(self.directory), time.monotonic() - self.started, self.input_bytes, done)

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            text = self.line()
            self.stream.write(("\r\033[K" + text) if self.live else text + "\n")
            self.stream.flush()

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        if exc[0] is None:
            self.stream.write(("\r\033[K" if self.live else "") + self.line(done=True) + "\n")
            self.stream.flush()
        elif self.live:
            self.stream.write("\r\033[K")
        self.stream.flush()
