"""PrepConfig: every setting of a prep run, typed and validated; its flags are generated from it (schemas/config.py).

In:  command-line flags (the project's own; Beam's options are split off by the caller).
Out: a frozen PrepConfig whose `to_dict()` is recorded in the manifest and the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Any

from pipelines.documents.languages import LanguageConfig
from pipelines.documents.parallel import parse_spec
from pipelines.documents.readers import ReadConfig
from pipelines.errors import PrepError
from pipelines.filters import LANGUAGES
from pipelines.tokenizer_kinds import TOKENIZER_KINDS
from pipelines.wordpiece.config import VocabConfig
from schemas.config import Config, add_flags, check_choices, flag, from_flags
from schemas.pairs import NSP_PAIRS, PACKINGS, TLM_PAIRS

DEDUP_MODES = ("none", "exact", "near")
SHUFFLE_MODES = ("auto", "files", "runner")
FILTER_PRESETS = ("none", "bert", "c4", "gopher")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrepConfig(Config):
    inputs: tuple[tuple[str, str], ...] = flag((), name="--input", metavar="[NAME=]GLOB", convert=lambda specs: parse_inputs(specs))
    """Corpus files (fsspec URL glob; repeat for several): `wiki=gs://b/*.jsonl.zst` names the input 'wiki', an
    unnamed one is 'input<i>'. Quote a glob, so that prep expands it, not the shell. Required, except for --packing
    tlm with --vocab."""
    output: str = flag(metavar="DIR", convert=lambda url: absolute(url))
    """Output directory (local path or fsspec URL): clean/, vocab/, pairs/ (parallel/ with --parallel) and report.json
    go under it."""
    read: ReadConfig = ReadConfig()  # noqa: RUF009  (frozen: one shared default is safe)
    unicode_form: str = flag("NFC", choices=("NFC", "NFKC"))
    """Unicode normalization of every document: NFC (keeps compatibility characters) or NFKC."""
    html_to_text: bool = False
    """Strip HTML markup (scripts, styles, tags) before cleaning."""
    filters: str = flag("bert", choices=FILTER_PRESETS)
    """Quality-filter preset: none, bert (light length bounds), c4 or gopher (see pipelines/filters/)."""
    language: str | None = flag(None, choices=LANGUAGES, metavar="CODE")
    """Keep only documents in this language (one of en, de, fr, es, it, pt, nl, by stop-word score), with any
    --filters preset."""
    languages: LanguageConfig = LanguageConfig()  # noqa: RUF009  (frozen: one shared default is safe)
    parallel: tuple[str, ...] = flag((), metavar="[SRC-TGT=]GLOB")
    """Translation pairs (repeat for several): gettext catalogs (`/usr/share/locale/*/LC_MESSAGES/*.mo`, .po too:
    English msgid → the catalog's language), `en-fr=GLOB` TSV files of source<TAB>target, or `en-fr=A,B` two
    line-aligned files; cleaned, deduplicated and counted (report.json's `parallel`) into DIR/parallel/."""
    dedup: str = flag("exact", choices=DEDUP_MODES)
    """Deduplication: none, exact (normalized-text hash) or near (MinHash LSH over word 5-grams, plus exact)."""
    near_threshold: float = flag(0.8, metavar="J")
    """--dedup near: estimated Jaccard similarity at which the larger-id document of a candidate pair goes.
    Candidates come from 14 x 8 LSH bands (pipelines/documents/minhash.py), which find 92% of pairs at 0.8
    but 5% at 0.5: a threshold below ~0.7 confirms more candidates, it does not find many more."""
    decontaminate: tuple[str, ...] = flag((), metavar="GLOB", convert=lambda globs: tuple(absolute(g) for g in globs))
    """Evaluation files (fsspec URL glob; repeat for several: a benchmark's validation and test files, JSON, JSON
    lines, TSV or CoNLL columns): drop every document that shares a 13-word n-gram with their text, case and
    punctuation ignored (GPT-3's test), counted as `contaminated`; report.json lists the files with their sha256."""
    tokenizer: str = flag("wordpiece", choices=tuple(TOKENIZER_KINDS))
    """The vocabulary's kind (pipelines/tokenizer_kinds.py): wordpiece (BERT's), bpe (byte-level BPE as GPT-2 and
    RoBERTa: no unknown token, cased) or unigram (SentencePiece's Unigram as XLM-R: NFKC, '▁' word marks, cased). Each
    writes the vocab/ directory transformers' AutoTokenizer loads as BertTokenizerFast, RobertaTokenizerFast or
    XLMRobertaTokenizerFast."""
    character_coverage: float = flag(1.0, metavar="SHARE")
    """--tokenizer unigram: share of the corpus's characters (by count, the most frequent first) kept as pieces; the
    rest encode as <unk>. 1.0 keeps every character of the corpus (XLM-R's tokenizer has no byte fallback)."""
    vocab: str | None = flag(None, metavar="DIR", convert=lambda url: absolute(url))
    """An existing vocabulary directory to reuse instead of learning one: a prep run's vocab/, or any tokenizer
    directory transformers saved for BERT, RoBERTa or XLM-R (tokenizer.json alone will do), of the --tokenizer kind."""
    wordpiece: VocabConfig = VocabConfig()  # noqa: RUF009  (frozen: one shared default is safe)
    vocab_max_words: int = flag(500_000, metavar="WORDS")
    """Most distinct words the vocabulary learner gets: the rarest are pruned by count (every word of a kept
    count is kept), so its one worker's memory is bounded whatever the corpus; report.json says how many were
    pruned. Ordinary corpora have fewer distinct words, and their vocabulary is unchanged."""
    packing: str = flag("nsp", choices=tuple(PACKINGS))
    """What a row holds: nsp (BERT's sentence pairs with a next-sentence label), full-sentences (RoBERTa: whole
    sentences packed up to --max-seq-len, crossing into the next document after a separator token) or
    doc-sentences (the same, never crossing a document). The last two write single-segment rows
    (pipelines/stages/make_packed_rows.py). tlm: XLM's translation pairs, a row per --parallel pair
    (pipelines/stages/make_tlm_rows.py); --input documents then only go to clean/ and the vocabulary they learn (none
    are needed with --vocab)."""
    max_seq_len: int = 128
    """Longest row, its special tokens included ([CLS] and two [SEP] for a pair; two for a packed row)."""
    short_seq_prob: float = 0.1
    """Probability of a shorter random target length for a pair (BERT's short_seq_prob; --packing nsp only)."""
    dupe_factor: int = 1
    """How many times each document is turned into pairs (with different cuts); 1 since masking is online."""
    bucket_docs: int = 1000
    """Documents per random bucket; random-next segments come from other documents of the same bucket."""
    validation_fraction: float = 0.01
    """Share of documents held out (whole documents) for the validation split; 0: no validation split."""
    validation_min_docs: int = 100
    """Hold out at least this many documents (a larger share than --validation-fraction on a small corpus, up
    to 20%), so that validation pairs have other documents to draw random-next segments from."""
    validation_min_pairs: int = 1000
    """Fewer validation pairs than this is reported as a warning (console and report.json): an accuracy over n
    pairs has a standard error of up to 0.5/sqrt(n)."""
    rows_per_shard: int = 100_000
    """Target pairs per Arrow shard (shards are filled by a uniform random key, so sizes vary a little)."""
    bytes_per_shard: int | None = None
    """Target uncompressed token bytes per shard instead of --rows-per-shard (ids are 2 bytes when the
    vocabulary fits uint16)."""
    batch_rows: int = 1024
    """Rows per Arrow record batch inside a shard: the unit the trainer reads and shuffles."""
    seed: int = 12345
    """Seed of every random choice (buckets, splits, pair cuts, shuffle)."""
    spill_mb: int = flag(64, metavar="MIB")
    """MiB of records a worker buffers before it writes a sorted run file of a shuffle (pipelines/shuffle/):
    with --word-cache, what bounds a worker's memory."""
    word_cache: int = flag(500_000, metavar="WORDS")
    """Words whose word pieces the encoder keeps (cleared when full)."""
    shuffle: str = flag("auto", choices=SHUFFLE_MODES)
    """How prep's shuffles move data: 'runner' (Beam's GroupByKey: for Dataflow, Flink and Spark, whose shuffle
    is disk-backed), 'files' (sorted run files under --output: for the local runners, whose shuffle is in
    memory) or 'auto' (by --runner). pipelines/shuffle/README.md has the costs behind it."""
    progress: str = flag("auto", choices=("auto", "always", "never"))
    """Progress lines on stderr for a local run (stage, records, MB read, rate, ETA): auto shows them when
    stderr is a terminal. On Dataflow, Beam's counters are the progress."""
    overwrite: bool = False
    """Replace the outputs of another run in --output (files the new run does not write are removed);
    without it, such a directory is refused. A rerun with the same settings needs no --overwrite."""
    ended_job: str | None = flag(None, metavar="JOB_ID")
    """The job on a remote runner (Dataflow, a Flink or Spark job server) that --output's run file records as still
    running has ended: you cancelled it, or saw it finish or fail. Without this, prep refuses such a directory, since
    the job would go on writing there (its launcher's Ctrl-C or lost terminal does not stop it)."""
    verbose: bool = False
    """Show Apache Beam's own log lines (warnings, start-up messages) on stderr; without it only errors pass."""

    def __post_init__(self) -> None:
        check_choices(self, PrepError)
        tlm = PACKINGS[self.packing].row_format == TLM_PAIRS
        if tlm and not self.parallel:
            raise PrepError("--packing tlm makes its rows from translation pairs: give --parallel [SRC-TGT=]GLOB")
        if tlm and not self.inputs and not self.vocab:
            raise PrepError("--packing tlm needs a vocabulary for its --parallel pairs: --vocab DIR (an earlier prep "
                            "run's vocab/) or --input documents to learn one from")
        if not self.inputs and not tlm:
            raise PrepError("--input is required (a file, a glob or name=glob; repeat for several)")
        for spec in self.parallel:
            parse_spec(spec)
        TOKENIZER_KINDS[self.tokenizer].check(self)
        checks = [
            (0.0 < self.near_threshold <= 1.0, f"--near-threshold must be in (0, 1], got {self.near_threshold}"),
            (16 <= self.max_seq_len <= 65535, f"--max-seq-len must be in [16, 65535], got {self.max_seq_len}"),
            (0.0 <= self.short_seq_prob <= 1.0, f"--short-seq-prob must be in [0, 1], got {self.short_seq_prob}"),
            (self.dupe_factor >= 1, f"--dupe-factor must be >= 1, got {self.dupe_factor}"),
            (self.dupe_factor == 1 or PACKINGS[self.packing].row_format == NSP_PAIRS, f"--dupe-factor is for --packing nsp (whose cuts are random); "
             f"--packing {self.packing} packs a document one way, so its copies would be the same rows"),
            (self.bucket_docs >= 2, f"--bucket-docs must be >= 2, got {self.bucket_docs}"),
            (0.0 <= self.validation_fraction < 1.0, f"--validation-fraction must be in [0, 1), got {self.validation_fraction}"),
            (self.validation_min_docs >= 0, f"--validation-min-docs must be >= 0, got {self.validation_min_docs}"),
            (self.validation_min_pairs >= 0, f"--validation-min-pairs must be >= 0, got {self.validation_min_pairs}"),
            (self.rows_per_shard >= 1, f"--rows-per-shard must be >= 1, got {self.rows_per_shard}"),
            (self.batch_rows >= 1, f"--batch-rows must be >= 1, got {self.batch_rows}"),
            (self.spill_mb >= 1, f"--spill-mb must be >= 1, got {self.spill_mb}"),
            (self.word_cache >= 1, f"--word-cache must be >= 1, got {self.word_cache}"),
            (self.vocab_max_words >= 1, f"--vocab-max-words must be >= 1, got {self.vocab_max_words}"),
            (0 <= self.seed < 1 << 63, f"--seed must be in [0, 2**63), got {self.seed}"),  # numpy seeds are >= 0
            (self.bytes_per_shard is None or self.bytes_per_shard >= 1024, f"--bytes-per-shard must be >= 1024, got {self.bytes_per_shard}"),
        ]
        for ok, message in checks:
            if not ok:
                raise PrepError(message)
        names = [name for name, _ in self.inputs]
        if len(set(names)) != len(names):
            raise PrepError(f"--input names must be unique, got {names}")

    def to_dict(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        body["inputs"] = {name: glob for name, glob in self.inputs}
        return body

    def settings(self) -> dict[str, Any]:
        """What the outputs depend on, as JSON would give it back: not where they go, how they were shuffled,
        --overwrite, --ended-job, --progress or --verbose."""
        body = {k: v for k, v in self.to_dict().items()
                if k not in ("output", "overwrite", "ended_job", "progress", "shuffle", "verbose")}
        return json.loads(json.dumps(body))


def parse_input(spec: str, index: int) -> tuple[str, str]:
    """`name=glob` or a bare glob (named input<index>); a URL's own '=' (in a query) is left alone."""
    name, sep, glob = spec.partition("=")
    if sep and name.isidentifier():
        return name, glob
    return f"input{index}", spec


def typed_input(name: str, glob: str, index: int) -> str:
    """The --input value as the user typed it (parse_input's inverse), for error messages."""
    return glob if name == f"input{index}" else f"{name}={glob}"


def parse_inputs(specs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple(parse_input(spec, i) for i, spec in enumerate(specs))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, PrepConfig)


def from_args(args: argparse.Namespace) -> PrepConfig:
    try:
        return from_flags(PrepConfig, args)
    except ValueError as e:  # a nested config (VocabConfig) rejected a flag value
        raise PrepError(str(e)) from None


def absolute(url: str) -> str:
    """Local paths become absolute (Beam workers may run elsewhere); URLs with a protocol are kept."""
    return url if "://" in url else os.path.abspath(url)
