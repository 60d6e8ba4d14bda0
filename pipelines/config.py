"""PrepConfig: every setting of a prep run, typed and validated, built from `clozeforge prep` flags.

In:  command-line flags (the project's own; Beam's options are split off by the caller).
Out: a frozen PrepConfig whose `to_dict()` is recorded in the manifest and the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from pipelines.errors import PrepError
from pipelines.filters import LANGUAGES
from pipelines.readers import TXT_MODES, UTF8_POLICIES, ReadConfig

DEDUP_MODES = ("none", "exact", "near")
FILTER_PRESETS = ("none", "bert", "c4", "gopher")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrepConfig:
    inputs: tuple[tuple[str, str], ...]
    """(name, URL glob) per --input; `wiki=gs://b/*.jsonl.zst` names it 'wiki', an unnamed input gets 'input<i>'."""
    output: str
    """Output directory URL: clean/, vocab/, pairs/ and report.json go under it."""
    read: ReadConfig = ReadConfig()
    unicode_form: str = "NFC"
    """Unicode normalization of every document: NFC (keeps compatibility characters) or NFKC."""
    html_to_text: bool = False
    """Strip HTML markup (scripts, styles, tags) before cleaning."""
    filters: str = "bert"
    """Quality-filter preset: none, bert (light length bounds), c4 or gopher (see pipelines/filters.py)."""
    language: str | None = None
    """Keep only documents in this language (a code of filters.LANGUAGES, by stop-word score), on top of the preset."""
    dedup: str = "exact"
    """Deduplication: none, exact (normalized-text hash) or near (MinHash LSH over word 5-grams, plus exact)."""
    near_threshold: float = 0.8
    """--dedup near: estimated Jaccard similarity at which the larger-id document of a candidate pair goes.
    Candidates come from 14 x 8 LSH bands (pipelines/minhash.py), which find 92% of pairs at 0.8 but 5%
    at 0.5: a threshold below ~0.7 confirms more candidates, it does not find many more."""
    vocab: str | None = None
    """An existing vocabulary directory to reuse instead of learning one."""
    vocab_size: int = 30522
    """Size of the learned WordPiece vocabulary, special and [unused] tokens included."""
    lowercase: bool = True
    """Uncased (lowercase and strip accents, as bert-base-uncased) or cased vocabulary."""
    num_unused: int = 0
    """[unusedN] tokens reserved after [PAD] (99 reproduces bert-base's ids: [UNK]=100 ... [MASK]=103)."""
    min_frequency: int = 2
    """Word pieces seen fewer times than this are not merged into the vocabulary."""
    max_seq_len: int = 128
    """Longest pair, [CLS] and two [SEP] included."""
    short_seq_prob: float = 0.1
    """Probability of a shorter random target length for a pair (BERT's short_seq_prob)."""
    dupe_factor: int = 1
    """How many times each document is turned into pairs (with different cuts); 1 since masking is online."""
    bucket_docs: int = 1000
    """Documents per random bucket; random-next segments come from other documents of the same bucket."""
    validation_fraction: float = 0.01
    """Share of documents held out (whole documents) for the validation split."""
    rows_per_shard: int = 100_000
    """Target pairs per Arrow shard (shards are filled by a uniform random key, so sizes vary a little)."""
    bytes_per_shard: int | None = None
    """Target uncompressed token bytes per shard instead of rows_per_shard (ids are 2 bytes when the vocabulary fits uint16)."""
    batch_rows: int = 1024
    """Rows per Arrow record batch inside a shard: the unit the trainer reads and shuffles."""
    seed: int = 12345
    """Seed of every random choice (buckets, splits, pair cuts, shuffle)."""
    spill_mb: int = 64
    """MiB of records a worker buffers before it writes a sorted run file of a shuffle (pipelines/shuffle.py)."""
    word_cache: int = 500_000
    """Words whose word pieces the encoder keeps (cleared when full); with spill_mb, what bounds a worker's memory."""

    def __post_init__(self) -> None:
        if not self.inputs:
            raise PrepError("--input is required (a file, a glob or name=glob; repeat for several)")
        checks = [
            (self.unicode_form in ("NFC", "NFKC"), f"--unicode-form must be NFC or NFKC, got {self.unicode_form!r}"),
            (self.filters in FILTER_PRESETS, f"--filters must be one of {', '.join(FILTER_PRESETS)}, got {self.filters!r}"),
            (self.language is None or self.language in LANGUAGES,
             f"--language must be one of {', '.join(LANGUAGES)}, got {self.language!r}"),
            (self.dedup in DEDUP_MODES, f"--dedup must be one of {', '.join(DEDUP_MODES)}, got {self.dedup!r}"),
            (0.0 < self.near_threshold <= 1.0, f"--near-threshold must be in (0, 1], got {self.near_threshold}"),
            (self.vocab_size >= 100, f"--vocab-size must be at least 100, got {self.vocab_size}"),
            (0 <= self.num_unused < self.vocab_size // 2, f"--num-unused out of range: {self.num_unused}"),
            (16 <= self.max_seq_len <= 65535, f"--max-seq-len must be in [16, 65535], got {self.max_seq_len}"),
            (0.0 <= self.short_seq_prob <= 1.0, f"--short-seq-prob must be in [0, 1], got {self.short_seq_prob}"),
            (self.dupe_factor >= 1, f"--dupe-factor must be >= 1, got {self.dupe_factor}"),
            (self.bucket_docs >= 2, f"--bucket-docs must be >= 2, got {self.bucket_docs}"),
            (0.0 <= self.validation_fraction < 1.0, f"--validation-fraction must be in [0, 1), got {self.validation_fraction}"),
            (self.rows_per_shard >= 1, f"--rows-per-shard must be >= 1, got {self.rows_per_shard}"),
            (self.batch_rows >= 1, f"--batch-rows must be >= 1, got {self.batch_rows}"),
            (self.spill_mb >= 1, f"--spill-mb must be >= 1, got {self.spill_mb}"),
            (self.word_cache >= 1, f"--word-cache must be >= 1, got {self.word_cache}"),
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


def parse_input(spec: str, index: int) -> tuple[str, str]:
    """`name=glob` or a bare glob (named input<index>); a URL's own '=' (in a query) is left alone."""
    name, sep, glob = spec.partition("=")
    if sep and name.isidentifier():
        return name, glob
    return f"input{index}", spec


def typed_input(name: str, glob: str, index: int) -> str:
    """The --input value as the user typed it (parse_input's inverse), for error messages."""
    return glob if name == f"input{index}" else f"{name}={glob}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = PrepConfig.__dataclass_fields__
    r = ReadConfig()
    add = parser.add_argument
    add("--input", action="append", required=True, metavar="[NAME=]GLOB", help="corpus files (fsspec URL glob); repeatable")
    add("--output", required=True, metavar="DIR", help="output directory (local path or fsspec URL)")
    add("--text-field", default=r.text_field, help="JSON/parquet text field (default: %(default)s)")
    add("--id-field", default=r.id_field, help="JSON/parquet id field (default: %(default)s)")
    add("--txt-mode", default=r.txt_mode, choices=TXT_MODES, help=".txt documents: whole file, paragraph or line")
    add("--invalid-utf8", default=r.invalid_utf8, choices=UTF8_POLICIES, help="replace bad bytes (counted) or drop the record")
    add("--strict", action="store_true", help="stop at the first bad record, naming file and line")
    add("--max-record-bytes", type=int, default=r.max_record_bytes, metavar="N",
        help="longer records are dropped as record_too_long, unbuffered (default: %(default)s = 64 MiB)")
    add("--unicode-form", default="NFC", choices=("NFC", "NFKC"))
    add("--html-to-text", action="store_true", help="strip HTML markup first")
    add("--filters", default=d["filters"].default, choices=FILTER_PRESETS, help="quality-filter preset (default: %(default)s)")
    add("--language", default=None, choices=LANGUAGES, metavar="CODE",
        help=f"keep only this language ({', '.join(LANGUAGES)}; stop-word score), with any --filters preset")
    add("--dedup", default=d["dedup"].default, choices=DEDUP_MODES, help="deduplication (default: %(default)s)")
    add("--near-threshold", type=float, default=d["near_threshold"].default, metavar="J",
        help="--dedup near: Jaccard similarity that makes a near duplicate (default: %(default)s)")
    add("--vocab", default=None, metavar="DIR", help="reuse this vocabulary instead of learning one")
    add("--vocab-size", type=int, default=d["vocab_size"].default)
    add("--cased", action="store_true", help="learn a cased vocabulary (default: uncased)")
    add("--num-unused", type=int, default=d["num_unused"].default, help="[unusedN] tokens to reserve")
    add("--min-frequency", type=int, default=d["min_frequency"].default)
    add("--max-seq-len", type=int, default=d["max_seq_len"].default)
    add("--short-seq-prob", type=float, default=d["short_seq_prob"].default)
    add("--dupe-factor", type=int, default=d["dupe_factor"].default)
    add("--bucket-docs", type=int, default=d["bucket_docs"].default)
    add("--validation-fraction", type=float, default=d["validation_fraction"].default)
    add("--rows-per-shard", type=int, default=d["rows_per_shard"].default)
    add("--bytes-per-shard", type=int, default=None, help="size shards by uncompressed token bytes instead of rows")
    add("--batch-rows", type=int, default=d["batch_rows"].default)
    add("--seed", type=int, default=d["seed"].default)
    add("--spill-mb", type=int, default=d["spill_mb"].default, metavar="MIB",
        help="records a worker buffers before writing a shuffle run file (default: %(default)s)")
    add("--word-cache", type=int, default=d["word_cache"].default, metavar="WORDS",
        help="words the encoder remembers the pieces of (default: %(default)s)")


def from_args(args: argparse.Namespace) -> PrepConfig:
    read = ReadConfig(
        text_field=args.text_field,
        id_field=args.id_field,
        txt_mode=args.txt_mode,
        invalid_utf8=args.invalid_utf8,
        strict=args.strict,
        max_record_bytes=args.max_record_bytes,
    )
    return PrepConfig(
        inputs=tuple(parse_input(spec, i) for i, spec in enumerate(args.input)),
        output=_absolute(args.output),
        read=read,
        unicode_form=args.unicode_form,
        html_to_text=args.html_to_text,
        filters=args.filters,
        language=args.language,
        dedup=args.dedup,
        near_threshold=args.near_threshold,
        vocab=_absolute(args.vocab) if args.vocab else None,
        vocab_size=args.vocab_size,
        lowercase=not args.cased,
        num_unused=args.num_unused,
        min_frequency=args.min_frequency,
        max_seq_len=args.max_seq_len,
        short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor,
        bucket_docs=args.bucket_docs,
        validation_fraction=args.validation_fraction,
        rows_per_shard=args.rows_per_shard,
        bytes_per_shard=args.bytes_per_shard,
        batch_rows=args.batch_rows,
        seed=args.seed,
        spill_mb=args.spill_mb,
        word_cache=args.word_cache,
    )


def _absolute(url: str) -> str:
    """Local paths become absolute (Beam workers may run elsewhere); URLs with a protocol are kept."""
    return url if "://" in url else os.path.abspath(url)
