"""LanguageVocabStats: each language's held-out documents → how well the vocabulary fits it (prep --identify-languages).

A shared vocabulary over many languages serves some worse than others: a language it fits badly is cut into more
pieces per word (longer rows, less context) and into more unknown tokens (text the model never sees). For every
language, over its documents of the validation split (the same seeded per-document coin as MakeNspPairs', so these
are documents the vocabulary still learned from, but the model never trains on), this counts words (white-space
words, each Han or kana character one word, as the filters count them), pieces (the vocabulary's encoding of each
sentence, as Tokenize encodes it) and unknown pieces. datatrove's per-language statistics count the same way. As
each Han and kana character is a word, a Japanese or Chinese text can have fewer pieces than words (a kana run the
vocabulary holds whole is one piece).

In:  the staged clean/ shards, the vocabulary summary (side input), the corpus's document count (side input: the
     validation share), the run's seed and validation settings.
Out: ((language, stat), count) sums, stat in words, pieces, unknown; report.json's `languages.<code>.vocab`.
"""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipelines.filters import word_count
from pipelines.outputs.shards import read_clean_shard
from pipelines.stages.make_nsp_pairs import split_of, validation_share
from pipelines.tokenizer_kinds import TOKENIZER_KINDS
from schemas import vocab as vocab_files
from schemas.tokenizer_formats import TOKENIZER_FORMATS


@beam.typehints.with_output_types(tuple[tuple[str, str], int])  # ((language, figure), count)
class LanguageVocabStatsFn(beam.DoFn):
    def __init__(self, *, seed: int, fraction: float, min_docs: int):
        self.seed, self.fraction, self.min_docs = seed, fraction, min_docs
        self._loaded_from = None

    def start_bundle(self):
        self.counts: Counter = Counter()

    def process(self, doc, vocab: dict, doc_count: int):
        if not doc.language:
            return
        if split_of(doc.doc_id, self.seed, validation_share(self.fraction, self.min_docs, doc_count)) != "validation":
            return
        if self._loaded_from != vocab["sha256"]:
            kind = vocab.get("tokenizer", "wordpiece")
            self._encoder = TOKENIZER_KINDS[kind].encoder(vocab["directory"])
            tokens = vocab_files.read_tokens(vocab["directory"])
            self._unknown = tokens.index(TOKENIZER_FORMATS[kind].roles["unk_token"])
            self._loaded_from = vocab["sha256"]
        encoded = self._encoder.encode_batch(list(doc.sentences))
        self.counts[doc.language, "docs"] += 1
        self.counts[doc.language, "words"] += sum(word_count(s) for s in doc.sentences)
        self.counts[doc.language, "pieces"] += sum(len(ids) for ids in encoded)
        self.counts[doc.language, "unknown"] += sum(ids.count(self._unknown) for ids in encoded)

    def finish_bundle(self):
        for key, count in self.counts.items():
            yield GlobalWindows.windowed_value((key, count))
        self.counts = Counter()


def vocab_figures(tallies) -> dict:
    """{language: {docs, words, pieces, unknown, pieces_per_word, unknown_rate}} from the summed tallies."""
    table: dict[str, Counter] = {}
    for (language, stat), count in tallies:
        table.setdefault(language, Counter())[stat] += count
    return {language: {"held_out_docs": c["docs"], "words": c["words"], "pieces": c["pieces"], "unknown": c["unknown"],
                       "pieces_per_word": round(c["pieces"] / max(c["words"], 1), 4),
                       "unknown_rate": round(c["unknown"] / max(c["pieces"], 1), 6)}
            for language, c in sorted(table.items())}


class LanguageVocabStats(beam.PTransform):
    """Staged clean shards → ((language, stat), count) sums (see the module docstring)."""

    def __init__(self, vocab, doc_count, *, seed: int, fraction: float, min_docs: int):
        super().__init__()
        self.vocab, self.doc_count = vocab, doc_count
        self.settings = dict(seed=seed, fraction=fraction, min_docs=min_docs)

    def expand(self, clean_shards):
        return (
            clean_shards
            | "ReadCleanDocs" >> beam.FlatMap(lambda staged: read_clean_shard(staged.attempt))
            | "Count" >> beam.ParDo(LanguageVocabStatsFn(**self.settings), beam.pvalue.AsSingleton(self.vocab),
                                    beam.pvalue.AsSingleton(self.doc_count))
            | "Sum" >> beam.CombinePerKey(sum)
        )
