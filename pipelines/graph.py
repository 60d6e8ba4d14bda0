"""The prep graph: which Beam stage feeds which (pipelines/stages/, in the order below).

    ReadCorpus ─ (IdentifyLanguage) ─ CleanDocuments ─ Deduplicate ─ (Decontaminate) ─┬─ WriteCleanDocs ─ (clean/) ─┐
                                                                                     ├─ CountWords ─ LearnVocabulary ─┴─ Tokenize ─ ...
                                                                                     └─ CountScripts ─ Finalize
    ... ─ MakeNspPairs (--packing nsp) | MakePackedRows (full-sentences, doc-sentences) ─ WriteShards ─ Finalize
    (clean/) ─ (LanguageVocabStats) ─ Finalize
    (ReadParallel ─ WriteParallel) ─ Finalize   (--parallel: translation pairs → parallel/)
    (WriteParallel ─ MakeTlmRows ─ WriteShards) ─ Finalize   (--packing tlm: the pairs, not the documents, are the rows)

With --packing tlm the documents (if any: --vocab makes --input optional) go to clean/ and learn the vocabulary, and
no Tokenize runs: MakeTlmRows encodes the kept translation pairs, and its ids are vocab/token_counts.txt.

The stages in parentheses run only with their flag: IdentifyLanguage and LanguageVocabStats with
--identify-languages (then every record is also tallied under its language), Decontaminate with --decontaminate.
CountScripts sums the kept documents' letters per script, for report.json's `scripts` table and the warning (or
--strict's refusal) when uncased normalisation would delete a script's letters. CountWords and LearnVocabulary ask
the --tokenizer kind's row (pipelines/tokenizer_kinds.py) how to split text into words and learn; Tokenize asks the
vocabulary's. Tokenize reads the documents back from the clean shards once the vocabulary exists, rather than Beam holding them until then,
and every shuffle of documents, word counts or pairs goes, on the local runners, through run files under
DIR/.tmp-<id>/ (pipelines/shuffle), removed as each is read: a run's memory does not grow with the corpus. On any
other runner (Dataflow, Flink, Spark, the portable Job API) the same transforms use Beam's GroupByKey instead
(--shuffle; pipelines/shuffle/README.md). Every drop of every stage is tallied in one place
(pipelines/stages/accounting.py) for report.json.

Nothing under clean/, vocab/ or pairs/ is written before Finalize: the shard and vocabulary writers write each
attempt's files under DIR/.tmp-<id>/ and pass on their Staged records, and Finalize, which sees only the
committed attempts' records, renames those files into place (pipelines/outputs/attempts.py). A runner that
retries, duplicates or splits a bundle, or recomputes a stage, leaves the same outputs.
"""

from __future__ import annotations

import dataclasses
import posixpath
import uuid

import apache_beam as beam

from pipelines.config import PrepConfig
from pipelines.documents.decontaminate import match_files
from pipelines.documents.normalize import NormalizeConfig
from pipelines.documents.parallel import parse_spec
from pipelines.documents.readers import keeps_meta
from pipelines.filters import FilterConfig
from pipelines.outputs.ownership import Leftovers
from pipelines.outputs.progress import ProgressFn
from pipelines.shuffle import Scratch, shuffle_via_runner
from pipelines.stages.accounting import (
    count_drops,
    count_kept,
    count_keys,
    count_languages,
    count_parallel,
)
from pipelines.stages.clean_documents import CleanDocuments
from pipelines.stages.count_scripts import CountScripts
from pipelines.stages.count_words import CountWords
from pipelines.stages.decontaminate import Decontaminate
from pipelines.stages.deduplicate import Deduplicate
from pipelines.stages.finalize import Finalize
from pipelines.stages.identify_language import IdentifyLanguage
from pipelines.stages.language_vocab_stats import LanguageVocabStats
from pipelines.stages.learn_vocabulary import LearnVocabulary, ReuseVocab
from pipelines.stages.make_nsp_pairs import MakeNspPairs
from pipelines.stages.make_packed_rows import MakePackedRows
from pipelines.stages.make_tlm_rows import MakeTlmRows
from pipelines.stages.read_corpus import ReadCorpus
from pipelines.stages.read_parallel import ReadParallel
from pipelines.stages.tokenize import Tokenize
from pipelines.stages.write_clean_docs import WriteCleanDocs
from pipelines.stages.write_parallel import WriteParallel
from pipelines.stages.write_shards import WriteShards
from pipelines.tokenizer_kinds import TOKENIZER_KINDS
from schemas.pairs import NSP_PAIRS, PACKINGS, TLM_PAIRS


def build(p: beam.Pipeline, config: PrepConfig, leftovers: Leftovers | None = None, progress: str | None = None) -> None:
    """Add prep's stages to `p`; `leftovers` (what the start of the run removed) goes into report.json, and
    with `progress` (a local directory) the stages report their counts there (pipelines/outputs/progress.py)."""
    out = config.output
    temp = posixpath.join(out, f".tmp-{uuid.uuid4().hex[:12]}")  # the run's: run files, and the attempts' staged files
    scratch = Scratch(temp, spill_bytes=config.spill_mb << 20, via_runner=shuffle_via_runner(config.shuffle, p.options))
    corpus = ReadCorpus(config.inputs, config.read, output=config.output)
    read = p | "ReadCorpus" >> corpus
    raw_docs, identified = read["docs"], None
    if config.languages.identify_languages:
        identified = raw_docs | "IdentifyLanguage" >> IdentifyLanguage(config.languages)
        raw_docs = identified["docs"]
    cleaned = raw_docs | "CleanDocuments" >> CleanDocuments(
        NormalizeConfig(unicode_form=config.unicode_form, html_to_text=config.html_to_text),
        dataclasses.replace(FilterConfig.preset(config.filters), language=config.language),
    )
    deduped = cleaned["docs"] | "Deduplicate" >> Deduplicate(
        config.dedup, threshold=config.near_threshold, scratch=scratch.sub("dedup")
    )
    docs = deduped["docs"]
    eval_files = match_files(config.decontaminate) if config.decontaminate else []
    decontaminated = docs | "Decontaminate" >> Decontaminate(eval_files) if eval_files else None
    if decontaminated is not None:
        docs = decontaminated["docs"]
    clean_shards = docs | "WriteCleanDocs" >> WriteCleanDocs(posixpath.join(out, "clean"), scratch=scratch.sub("clean"),
                                                         meta=keeps_meta(path for _, path in corpus.files))

    vocab_dir = posixpath.join(out, "vocab")
    if config.vocab:
        vocab = p | "ReuseVocab" >> ReuseVocab(config.vocab, vocab_dir, staging=scratch.sub("vocab").directory)
    else:
        kind = TOKENIZER_KINDS[config.tokenizer]
        settings = kind.settings(config)
        vocab = (
            docs
            | "CountWords" >> CountWords(kind.words(settings), config.vocab_max_words, scratch.sub("words"),
                                         characters=kind.counts_characters)
            | "LearnVocabulary" >> LearnVocabulary(kind.name, settings, vocab_dir, staging=scratch.sub("vocab").directory)
        )

    strips_accents = not config.vocab and TOKENIZER_KINDS[config.tokenizer].strips_accents(config)
    scripts = docs | "CountScripts" >> CountScripts(strips_accents=strips_accents, strict=config.read.strict)

    packing = PACKINGS[config.packing]
    doc_count = docs | "CountDocs" >> beam.combiners.Count.Globally()  # the validation share; LanguageVocabStats' too
    parallel = _parallel(p, config, scratch) if config.parallel else None
    if packing.row_format == TLM_PAIRS:  # the rows are the translation pairs; the documents fed clean/ and the vocabulary
        made = parallel["kept"] | "MakeTlmRows" >> MakeTlmRows(
            max_seq_len=config.max_seq_len, seed=config.seed, validation_fraction=config.validation_fraction,
            validation_min_docs=config.validation_min_docs, vocab=vocab, cache_size=config.word_cache,
            pair_count=parallel["kept"] | "CountPairs" >> beam.combiners.Count.Globally())
        token_counts = made["token_counts"]
    else:
        tokenized = clean_shards | "Tokenize" >> Tokenize(vocab, config.word_cache)
        common = dict(max_seq_len=config.max_seq_len, bucket_docs=config.bucket_docs, validation_fraction=config.validation_fraction,
                      validation_min_docs=config.validation_min_docs, doc_count=doc_count,
                      seed=config.seed, vocab=vocab, scratch=scratch.sub("buckets"))
        if packing.row_format == NSP_PAIRS:
            made = tokenized["docs"] | "MakeNspPairs" >> MakeNspPairs(
                short_seq_prob=config.short_seq_prob, dupe_factor=config.dupe_factor, **common)
        else:
            made = tokenized["docs"] | "MakePackedRows" >> MakePackedRows(packing, **common)
        token_counts = tokenized["token_counts"]
    shards = made["pairs"] | "WriteShards" >> WriteShards(
        posixpath.join(out, "pairs"),
        rows_per_shard=config.rows_per_shard,
        bytes_per_shard=config.bytes_per_shard,
        batch_rows=config.batch_rows,
        vocab=vocab,
        scratch=scratch.sub("pairs"),
        row_format=packing.row_format,
    )

    tallies = (
        (
            read["accounting"] | count_keys("Read"),
            read["drops"] | count_drops("ReadDrops"),
            *([identified["drops"] | count_drops("IdentifyDrops")] if identified is not None else []),
            cleaned["drops"] | count_drops("CleanDrops"),
            deduped["drops"] | count_drops("DedupDrops"),
            *([decontaminated["drops"] | count_drops("DecontaminateDrops")] if decontaminated is not None else []),
            docs | count_kept("Kept"),
        )
        | "AllTallies" >> beam.Flatten()
        | "SumTallies" >> beam.CombinePerKey(sum)
    )
    languages = None
    if identified is not None:
        language_tallies = (
            read["drops"] | count_languages("Read", "read_and_dropped"),
            identified["docs"] | count_languages("Identified", "read"),
            identified["drops"] | count_languages("Identify", "read_and_dropped"),
            cleaned["drops"] | count_languages("Clean", "dropped"),
            deduped["drops"] | count_languages("Dedup", "dropped"),
            *([decontaminated["drops"] | count_languages("Decontaminate", "dropped")] if decontaminated is not None else []),
            docs | count_languages("Kept", "kept"),
        )
        languages = {
            "tallies": language_tallies | "AllLanguageTallies" >> beam.Flatten() | "SumLanguageTallies" >> beam.CombinePerKey(sum),
            "vocab": clean_shards | "LanguageVocabStats" >> LanguageVocabStats(
                vocab, doc_count, seed=config.seed, fraction=config.validation_fraction, min_docs=config.validation_min_docs),
        }
    if progress:
        _ = read["accounting"] | "ProgressRead" >> beam.ParDo(ProgressFn(progress, "read", keep=lambda kv: kv[1] == "read"))
        _ = read["docs"] | "ProgressText" >> beam.ParDo(ProgressFn(progress, "read", count=False, measure=lambda d: len(d.text)))
        _ = docs | "ProgressKept" >> beam.ParDo(ProgressFn(progress, "kept"))
        _ = made["pairs"] | "ProgressPairs" >> beam.ParDo(ProgressFn(progress, "pairs"))
    _ = p | "Finalize" >> Finalize(
        config, temp, leftovers=leftovers or Leftovers(), shards=shards, vocab=vocab, tallies=tallies, stats=made["stats"],
        token_counts=token_counts, clean_shards=clean_shards, eval_files=eval_files, scripts=scripts,
        languages=languages, parallel=parallel and {"staged": parallel["staged"], "tallies": parallel["tallies"]},
        row_languages=made.get("languages"),
    )


def _parallel(p: beam.Pipeline, config: PrepConfig, scratch: Scratch) -> dict:
    """--parallel: read, clean and deduplicate the translation pairs → {"kept": the Pairs parallel/ gets, "staged": its
    shards, "tallies": their accounting}."""
    read_pairs = p | "ReadParallel" >> ReadParallel(
        tuple(parse_spec(s) for s in config.parallel), strict=config.read.strict,
        normalize=NormalizeConfig(unicode_form=config.unicode_form, html_to_text=config.html_to_text))
    written = read_pairs["pairs"] | "WriteParallel" >> WriteParallel(
        posixpath.join(config.output, "parallel"), seed=config.seed, scratch=scratch.sub("parallel"))
    return {
        "kept": written["pairs"],
        "staged": written["staged"],
        "tallies": (
            read_pairs["records"] | count_parallel("Read", "read"),
            read_pairs["drops"] | count_parallel("Clean", "dropped"),
            written["drops"] | count_parallel("Dedup", "dropped"),
            written["pairs"] | count_parallel("Kept", "kept"),
        ) | "AllParallelTallies" >> beam.Flatten() | "SumParallelTallies" >> beam.CombinePerKey(sum),
    }
