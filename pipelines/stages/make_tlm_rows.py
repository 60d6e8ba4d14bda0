"""MakeTlmRows: translation pairs → XLM's TLM rows (--packing tlm), placed for WriteShards' global shuffle.

In:  the Pairs WriteParallel kept (cleaned, deduplicated: the pairs parallel/ holds), the vocabulary summary and the
     kept pairs' count (side inputs).
Each pair is one row: both sides encoded with the run's vocabulary by its kind's encoder (the one Tokenize encodes
documents with, so the ids are AutoTokenizer's: DESIGN.md contract 3), each side as one text, and truncated to
--max-seq-len less 3 as pipelines/documents/tlm.py says. A pair is held out for validation by the documents' rule
(make_nsp_pairs.split_of, with validation_share over the pairs, --validation-min-docs counting pairs), its seeded coin
and shuffle key drawn from its direction and text (tlm.pair_unit), so its split and place do not depend on the
runner, the worker count or where its file lies.

Out: `pairs`: (split, shuffle_key, row, ids) with `row` in the tlm_pairs schema's column order (schemas/pairs.py;
     ids as packed bytes of the id type) and `ids` len(a) + len(b); `stats`: ((split, stat), count) sums:
     translation_pairs (the pairs assigned to the split), no_tokens (dropped: tlm.DROP_REASONS), truncated_pairs,
     truncated_ids, row_tokens (Σ num_tokens); `token_counts`: the rows' ids counted (one int64 array of vocabulary
     size: vocab/token_counts.txt, for the trainer's random-token draws); `languages`: the rows' language codes, once
     each (the manifest's packing.languages). A split's translation_pairs = its shards' rows + its drops: Finalize
     checks it against the rows WriteShards counted.
"""

from __future__ import annotations

from array import array
from collections import Counter

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipelines import wordpiece
from pipelines.documents import keys
from pipelines.documents.records import Pair
from pipelines.documents.tlm import pair_unit, tlm_row
from pipelines.errors import PrepError
from pipelines.outputs.shards import ids_dtype
from pipelines.stages.accounting import NAMESPACE, SumPerKey
from pipelines.stages.make_nsp_pairs import _typecode, split_of, validation_share
from pipelines.stages.tokenize import sum_token_counts
from pipelines.tokenizer_kinds import TOKENIZER_KINDS
from schemas.pairs import TLM_PAIRS


def check_tlm_languages(languages: list[str], parallel: dict) -> None:
    """A PrepError, before anything is committed, when the rows hold fewer than two languages (a manifest's tlm
    `packing.languages` lists two or more: schemas/manifest_checks.check_packing): no pair made a row, or all are of one
    language. `parallel` is report.json's parallel total, to say where the pairs went."""
    if len(languages) >= 2:
        return
    dropped = ", ".join(f"{k} {v}" for k, v in sorted(parallel["dropped"].items(), key=lambda kv: -kv[1])) or "none"
    held = f"only {languages[0]}" if languages else "no language"
    raise PrepError(f"--packing tlm: the rows hold {held}, and translation pairs need two: {parallel['kept']} of "
                    f"{parallel['read']} --parallel pairs were kept (dropped: {dropped}), and a pair whose side encodes to "
                    "no id makes no row")


class EncodePairsFn(beam.DoFn):
    """Pair → a placed tlm row (or a counted drop); per bundle, its stats, id counts and languages (tagged)."""

    def __init__(self, *, max_seq_len: int, seed: int, validation_fraction: float, validation_min_docs: int,
                 cache_size: int = wordpiece.DEFAULT_CACHE_SIZE):
        self.budget = max_seq_len - TLM_PAIRS.special_tokens
        self.seed, self.fraction, self.min_docs, self.cache_size = seed, validation_fraction, validation_min_docs, cache_size
        self._encoder, self._loaded_from = None, None

    def start_bundle(self):
        self.stats: Counter = Counter()
        self.languages: set[str] = set()
        self.ids: list[int] = []  # the bundle's row ids, counted at its end (as TokenizeFn counts, in bulk)
        self.size = 0

    def process(self, pair: Pair, vocab: dict, pairs: int):
        if self._loaded_from != vocab["sha256"]:
            self._encoder = TOKENIZER_KINDS[vocab.get("tokenizer", "wordpiece")].encoder(vocab["directory"], cache_size=self.cache_size)
            self._loaded_from, self.typecode = vocab["sha256"], _typecode(ids_dtype(vocab["size"]))
        self.size = vocab["size"]
        unit = pair_unit(pair)
        split = split_of(unit, self.seed, validation_share(self.fraction, self.min_docs, pairs))
        self.stats[split, "translation_pairs"] += 1
        ids_a, ids_b = self._encoder.encode_batch([pair.source, pair.target])
        row = tlm_row(pair, ids_a, ids_b, self.budget)
        if isinstance(row, str):
            self.stats[split, row] += 1
            Metrics.counter(NAMESPACE, f"tlm_dropped_{row}").inc()
            return
        self.stats[split, "row_tokens"] += row.num_tokens
        if row.cut:
            self.stats[split, "truncated_pairs"] += 1
            self.stats[split, "truncated_ids"] += row.cut
        self.languages.update((row.language_a, row.language_b))
        self.ids.extend(row.tokens_a)
        self.ids.extend(row.tokens_b)
        packed = (array(self.typecode, row.tokens_a).tobytes(), array(self.typecode, row.tokens_b).tobytes(),
                  row.language_a, row.language_b, row.num_tokens, row.source, row.doc_id)
        yield split, keys.key64(self.seed, "shuffle", f"{unit}:tlm"), packed, row.num_tokens - TLM_PAIRS.special_tokens

    def finish_bundle(self):
        for key, count in self.stats.items():
            yield beam.pvalue.TaggedOutput("stats", GlobalWindows.windowed_value((key, count)))
        for code in sorted(self.languages):
            yield beam.pvalue.TaggedOutput("languages", GlobalWindows.windowed_value(code))
        if self.size:
            counts = np.bincount(np.asarray(self.ids, dtype=np.int64), minlength=self.size)
            yield beam.pvalue.TaggedOutput("token_counts", GlobalWindows.windowed_value(counts))


class MakeTlmRows(beam.PTransform):
    """Pair → {"pairs": placed rows, "stats", "token_counts", "languages"} (see the module docstring)."""

    def __init__(self, *, max_seq_len: int, seed: int, validation_fraction: float, validation_min_docs: int, vocab,
                 pair_count, cache_size: int = wordpiece.DEFAULT_CACHE_SIZE):
        super().__init__()
        self.encode = EncodePairsFn(max_seq_len=max_seq_len, seed=seed, validation_fraction=validation_fraction,
                                    validation_min_docs=validation_min_docs, cache_size=cache_size)
        self.vocab, self.pair_count = vocab, pair_count  # singleton PCollections

    def expand(self, pairs):
        made = pairs | "EncodePairs" >> beam.ParDo(
            self.encode, beam.pvalue.AsSingleton(self.vocab), beam.pvalue.AsSingleton(self.pair_count),
        ).with_outputs("stats", "token_counts", "languages", main="pairs")
        return {
            "pairs": made.pairs,
            "stats": made.stats | "SumTlmStats" >> SumPerKey(tuple[str, str]),  # ((split, name), count)
            "token_counts": made.token_counts | "SumTlmTokenCounts" >> beam.CombineGlobally(sum_token_counts),
            "languages": made.languages | "Codes" >> beam.Map(lambda code: code).with_output_types(str)
            | "DistinctLanguages" >> beam.Distinct(),
        }
