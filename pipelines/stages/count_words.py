"""CountWords: cleaned documents → the (word, corpus count) pairs the learner gets, at most `max_words` of them.

In:  Doc records; `words` (a document's sentences → its words: the tokenizer kind's, pipelines/tokenizer_kinds.py);
     `max_words` (--vocab-max-words); a Scratch (where, and through what, to shuffle); `characters`.
Out: {"counts": (word, count) for every kept word, "bound": a singleton WordBound dict (words distinct, kept,
     pruned and the count a kept word needs; pipelines/wordpiece/prune.py)}, and with `characters` "chars": a
     singleton {character: count} over every word counted, the pruned ones too (a dict of at most the corpus's
     distinct characters), so a learner can keep every character of the corpus.

Words are the kind's (BERT's basic tokenization, GPT-2's byte-level words, XLM-R's '▁' words), counted per bundle
(a bundle's counter is emitted and restarted once it holds `spill_bytes / 128` words, so it is bounded too),
then summed per word across bundles, then pruned: a histogram of the summed counts (a few thousand
numbers, whatever the corpus) fixes the smallest count that keeps at most `max_words` words, and only those
words go on. Nothing before the learner holds every distinct word in one place:
  * scratch.via_runner (Dataflow, Flink, Spark: a disk-backed shuffle): CombinePerKey(sum), a combined
    histogram, and a filter with the bound as a side input;
  * otherwise (the local runners, whose shuffle and side-input waits are in memory): the partial counts
    go to sorted run files keyed by the word's hash (pipelines/shuffle/runs.py), and the runs are read
    twice, range by range: once summing each word to build the histogram, once to emit the kept words.
Both paths give the same words and counts, for any number of workers.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipelines.documents.records import Doc
from pipelines.shuffle import Scratch, runs
from pipelines.shuffle.transforms import own_step
from pipelines.stages.accounting import SumPerKey
from pipelines.wordpiece.prune import word_bound

_BYTES_PER_COUNTED_WORD = 128  # a Counter entry of a short str: key, int, hash slot (measured order of magnitude)
ROWS_PER_RANGE = 200_000
"""Partial counts per run-file reader: the parallelism of the summing, not its memory (readers stream)."""
_STREAM = "words"


class CountWordsFn(beam.DoFn):
    """Doc → (word, partial count), a bounded counter per bundle; with `characters`, the characters of the words it
    emits, weighted by their counts, tagged "chars" once per bundle."""

    def __init__(self, words, max_entries: int, characters: bool = False):
        self.words, self.max_entries, self.characters = words, max_entries, characters

    def start_bundle(self):
        self.counts: Counter = Counter()
        self.chars: Counter = Counter()

    def _emit(self):
        if self.characters:
            for word, count in self.counts.items():
                for char in word:
                    self.chars[char] += count
        counts, self.counts = self.counts, Counter()
        return counts.items()

    def process(self, doc: Doc):
        self.counts.update(self.words(doc.sentences))
        if len(self.counts) >= self.max_entries:
            yield from self._emit()

    def finish_bundle(self):
        for word, count in self._emit():
            yield GlobalWindows.windowed_value((word, count))
        if self.characters and self.chars:
            yield beam.pvalue.TaggedOutput("chars", GlobalWindows.windowed_value(dict(self.chars)))
        self.chars = Counter()


class HistogramFn(beam.CombineFn):
    """Counts → {count: number of words}: as many entries as distinct count values, not words."""

    def create_accumulator(self):
        return Counter()

    def add_input(self, histogram, count):
        histogram[count] += 1
        return histogram

    def merge_accumulators(self, histograms):
        merged = Counter()
        for histogram in histograms:
            merged.update(histogram)
        return merged

    def extract_output(self, histogram):
        return dict(histogram)


def _bound(histogram: dict, max_words: int) -> dict:
    return word_bound(histogram, max_words).to_dict()


# -- the run-file path --------------------------------------------------------------------------------------


def _position(word: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(word, digest_size=8).digest(), "big")


class SpillCountsFn(beam.DoFn):
    """(word, partial count) → RunInfo per sorted run written (key: the word's bytes; payload: the count)."""

    def __init__(self, directory: str, max_entries: int):
        self.directory, self.max_entries = directory, max_entries

    def start_bundle(self):
        self.writer = runs.RunWriter(self.directory, _STREAM)

    def process(self, word_count):
        word, count = word_count
        key = word.encode()
        self.writer.add(_position(key), key, count.to_bytes(8, "big"))
        if len(self.writer.records) >= self.max_entries:
            info = self.writer.flush()
            if info is not None:
                yield info

    def finish_bundle(self):
        info = self.writer.flush()
        if info is not None:
            yield GlobalWindows.windowed_value(info)


def summed(spilled: list[runs.RunInfo], index: int, count: int):
    """(word, total count) for the words whose hash falls in the index-th of `count` ranges, in hash order."""
    lo, hi = runs.range_bounds(index, count)
    records = runs.merge_range(spilled, lo, hi)
    for (_, key), group in itertools.groupby(records, key=lambda r: (r[0], r[1])):
        yield key.decode(), sum(int.from_bytes(payload, "big") for _, _, payload in group)


def _ranges(spilled: list[runs.RunInfo]) -> list[tuple[int, int]]:
    rows = sum(run.rows for run in spilled)
    count = max(1, -(-rows // ROWS_PER_RANGE))
    return [(index, count) for index in range(count)]


class _SummedHistogramFn(beam.DoFn):
    def process(self, work, spilled):
        histogram = Counter(count for _, count in summed(spilled, *work))
        yield dict(histogram)


class _KeptWordsFn(beam.DoFn):
    def process(self, work, spilled, bound):
        for word, count in summed(spilled, *work):
            if count >= bound["words_min_count"]:
                yield word, count
        yield beam.pvalue.TaggedOutput("done", work)


def _merge_histograms(histograms):
    merged = Counter()
    for histogram in histograms:
        merged.update(histogram)
    return dict(merged)


class CountWords(beam.PTransform):
    """Doc → {"counts": (word, count) of the kept words, "bound": singleton dict (, "chars": singleton dict)}; see the
    module docstring."""

    def __init__(self, words, max_words: int, scratch: Scratch, characters: bool = False):
        super().__init__()
        self.words, self.max_words, self.scratch, self.characters = words, max_words, scratch, characters

    def expand(self, docs):
        max_entries = max(1, self.scratch.spill_bytes // _BYTES_PER_COUNTED_WORD)
        max_words = self.max_words
        counted = docs | "CountPerBundle" >> beam.ParDo(CountWordsFn(self.words, max_entries, self.characters)).with_outputs(
            "chars", main="counts")
        partial = counted.counts
        extra = {"chars": counted.chars | "SumChars" >> beam.CombineGlobally(_merge_histograms)} if self.characters else {}
        if self.scratch.via_runner:
            totals = partial | "SumCounts" >> SumPerKey(str)  # (word, count)
            bound = (
                totals
                | "Counts" >> beam.Values()
                | "Histogram" >> beam.CombineGlobally(HistogramFn())
                | "Bound" >> beam.Map(_bound, max_words)
            )
            kept = totals | "Prune" >> beam.Filter(lambda wc, b: wc[1] >= b["words_min_count"], beam.pvalue.AsSingleton(bound))
            return {"counts": kept, "bound": bound, **extra}

        spilled = partial | "SpillCounts" >> beam.ParDo(SpillCountsFn(self.scratch.directory, max_entries))
        spilled_list = beam.pvalue.AsList(spilled)
        work = (
            docs.pipeline
            | "RangesTrigger" >> beam.Create([None])
            | "Ranges" >> beam.FlatMap(lambda _, spilled: _ranges(spilled), spilled_list)
            | "SpreadRanges" >> beam.Reshuffle()
        )
        bound = (
            work
            | "SumAndHistogram" >> beam.ParDo(_SummedHistogramFn(), spilled_list)
            | "Histogram" >> beam.CombineGlobally(_merge_histograms)
            | "Bound" >> beam.Map(_bound, max_words)
        )
        kept = work | "SumAndPrune" >> beam.ParDo(_KeptWordsFn(), spilled_list, beam.pvalue.AsSingleton(bound)).with_outputs(
            "done", main="counts"
        )
        _ = (
            docs.pipeline
            | "CleanupTrigger" >> beam.Create([None])
            | "Cleanup" >> beam.Map(lambda _, done, spilled: runs.remove(spilled), beam.pvalue.AsList(own_step(kept.done, "Done")),
                                    spilled_list)
        )
        # typed in a step of its own: Beam types a multi-output step's main output as the union of all its outputs
        counts = kept.counts | "Typed" >> beam.Map(lambda word_count: word_count).with_output_types(tuple[str, int])
        return {"counts": counts, "bound": bound, **extra}
