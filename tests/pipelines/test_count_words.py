"""CountWords' word bound: at most --vocab-max-words words reach the learner, the same ones through run files
and through Beam's GroupByKey, and below the bound the vocabulary is the one learned from every word."""

from __future__ import annotations

import json
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import wordpiece
from pipelines.documents.records import Doc
from pipelines.shuffle import Scratch
from pipelines.stages.count_words import CountWords
from pipelines.tokenizer_kinds import BasicWords
from pipelines.wordpiece.prune import word_bound


def test_the_bound_keeps_whole_counts_and_never_more_than_asked():
    histogram = {1: 50, 2: 20, 3: 5, 9: 1}
    assert word_bound(histogram, 100).to_dict() == {"words_distinct": 76, "words_kept": 76, "words_pruned": 0, "words_min_count": 1}
    assert word_bound(histogram, 26) == word_bound(histogram, 30)  # 26 = 1 + 5 + 20: count 2 fits, count 1 does not
    bound = word_bound(histogram, 30)
    assert (bound.min_count, bound.kept, bound.pruned) == (2, 26, 50)
    bound = word_bound(histogram, 25)  # count 2's 20 words do not all fit: none of them is kept
    assert (bound.min_count, bound.kept, bound.pruned) == (3, 6, 70)
    assert word_bound({4: 10}, 3).kept == 0
    assert word_bound({}, 3).to_dict()["words_distinct"] == 0


def _docs() -> list[Doc]:
    # word "w<i>" appears i times (1..40) and "x<i>" once, spread over documents so that bundles see parts
    words = [f"w{i}" for i in range(1, 41) for _ in range(i)] + [f"x{i}" for i in range(30)]
    return [Doc(source="s", path="f", doc_id=str(k), sentences=(" ".join(words[k::7]),)) for k in range(7)]


def _expected(max_words: int) -> tuple[list[tuple[str, int]], dict]:
    counts = Counter(w for d in _docs() for s in d.sentences for w in wordpiece.basic_words(s, lowercase=True))
    bound = word_bound(Counter(counts.values()), max_words)
    return sorted((w, c) for w, c in counts.items() if c >= bound.min_count), bound.to_dict()


@pytest.mark.parametrize("via_runner", [False, True], ids=["run-files", "group-by-key"])
@pytest.mark.parametrize("max_words", [1_000_000, 25, 3])
def test_count_words_prunes_to_the_bound_on_either_shuffle(tmp_path, via_runner, max_words):
    kept, bound = _expected(max_words)
    assert len(kept) <= max_words and bound["words_kept"] == len(kept)
    # a small spill makes several runs per bundle, so sums cross run files
    scratch = Scratch(str(tmp_path / "scratch"), spill_bytes=128 * 8, via_runner=via_runner)
    with test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        counted = p | beam.Create(_docs()) | CountWords(BasicWords(lowercase=True), max_words=max_words, scratch=scratch)
        assert_that(counted["counts"], equal_to(kept), label="Kept")
        assert_that(counted["bound"], equal_to([bound]), label="Bound")
    if max_words < 1_000_000:
        assert bound["words_pruned"] > 0


@pytest.mark.integration
def test_below_the_bound_prep_learns_the_vocabulary_of_every_word(corpus_dir, tmp_path):
    """The test corpus's vocabulary is the one the learner makes from all its words (as before the bound);
    with a bound below its distinct words, report.json says how many were pruned and the learner got no more."""
    from pipelines import prep
    from schemas import vocab as vocab_files

    common = ["--input", f"{corpus_dir}/part-*.jsonl", "--vocab-size", "800", "--validation-fraction", "0"]
    report = prep.run([*common, "--output", str(tmp_path / "default")])
    vocab = report["vocab"]
    assert vocab["words_pruned"] == 0 and vocab["words_kept"] == vocab["words_distinct"] > 0

    counts: Counter = Counter()
    for name in ("part-0.jsonl", "part-1.jsonl"):
        with open(f"{corpus_dir}/{name}") as f:
            docs = [json.loads(line) for line in f]
        for d in docs:
            counts.update(wordpiece.basic_words(d["text"], lowercase=True))
    # prep counts words per sentence of cleaned text: the same words whenever cleaning changed no word
    unbounded = wordpiece.learn_wordpiece(sorted(counts.items()), wordpiece.VocabConfig(vocab_size=800))
    assert vocab_files.read_tokens(str(tmp_path / "default" / "vocab")) == unbounded

    bound = vocab["words_distinct"] // 3
    small = prep.run([*common, "--output", str(tmp_path / "bounded"), "--vocab-max-words", str(bound)])["vocab"]
    assert small["words_distinct"] == vocab["words_distinct"]
    assert 0 < small["words_kept"] <= bound and small["words_pruned"] == small["words_distinct"] - small["words_kept"]


def test_a_bad_bound_names_its_flag(tmp_path):
    from pipelines import config as prep_config
    from pipelines import prep
    from pipelines.errors import PrepError

    args = prep.parser().parse_known_args(["--input", "x", "--output", str(tmp_path), "--vocab-max-words", "0"])[0]
    with pytest.raises(PrepError, match=r"^--vocab-max-words must be >= 1, got 0$"):
        prep_config.from_args(args)
