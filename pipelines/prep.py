"""`clozeforge prep` / `python -m pipelines.prep`: raw corpora → clean/, vocab/, pairs/ and report.json.

In:  --input [NAME=]GLOB (repeatable), --output DIR, the project's flags (pipelines/config.py) and any
     Beam pipeline options (--runner, --direct_num_workers, Dataflow's --project, ...), split apart with
     parse_known_args.
Out: DIR/clean/*.parquet, DIR/vocab/{vocab.txt,tokenizer.json,vocab_config.json,token_counts.txt},
     DIR/pairs/*.arrow + manifest.json, DIR/report.json. Without --runner, Beam's FnApiRunner is used
     (the DirectRunner's engine, minus the attempt to fetch the Prism binary).

    ReadCorpus ─ CleanDocuments ─ Deduplicate ─┬─ WriteCleanDocs ─ (clean/ shards) ─┐
                                               └─ CountWords ─ LearnWordPiece ──────┴─ Tokenize ─ MakeNspPairs ─ WriteShards ─ Finalize

Tokenize reads the documents back from clean/ once the vocabulary exists, rather than Beam holding them
until then, and every shuffle of documents or pairs goes through run files under DIR/.tmp-<id>/
(pipelines/shuffle.py), removed as each is read: a run's memory does not grow with the corpus.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import posixpath
import sys
import uuid

import apache_beam as beam
import fsspec
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from pipelines import config as prep_config
from pipelines import wordpiece
from pipelines.clean_documents import CleanDocuments
from pipelines.deduplicate import Deduplicate
from pipelines.errors import PrepError, prep_error_in, quiet_workers
from pipelines.filters import FilterConfig
from pipelines.learn_vocab import CountWords, LearnWordPiece, ReuseVocab
from pipelines.make_pairs import MakeNspPairs, TokenizeFn, merge_stats, sum_token_counts
from pipelines.normalize import NormalizeConfig
from pipelines.read_corpus import ReadCorpus, count_drops, count_kept
from pipelines.report import build_report
from pipelines.shuffle import Scratch
from pipelines.write_shards import WriteCleanDocs, WriteShards, put_atomically, read_clean_shard
from schemas import Manifest


def finalize(_, *, config: prep_config.PrepConfig, temp: str, shards, vocab, tallies, stats, token_counts) -> dict:
    """Write token counts, the manifest (last: its presence marks pairs/ complete) and the report; remove
    the shuffles' temporary directory (its run files are gone already, directories may remain)."""
    out = config.output
    fs, temp_path = fsspec.core.url_to_fs(temp)
    if fs.exists(temp_path):
        fs.rm(temp_path, recursive=True)
    vocab_dir = posixpath.join(out, "vocab")
    put_atomically(posixpath.join(vocab_dir, "token_counts.txt"), "".join(f"{c}\n" for c in token_counts.tolist()).encode())
    with fsspec.open(posixpath.join(vocab_dir, "vocab.txt"), "r", encoding="utf-8") as f:
        tokens = f.read().splitlines()
    index = {t: i for i, t in enumerate(tokens)}
    shards = sorted(shards, key=lambda s: s.path)
    manifest = Manifest(
        vocab={
            "file": "../vocab/vocab.txt",
            "sha256": vocab["sha256"],
            "size": vocab["size"],
            "lowercase": vocab["lowercase"],
            "token_counts": "../vocab/token_counts.txt",
        },
        special_tokens={t: index[t] for t in wordpiece.SPECIAL_TOKENS},
        max_seq_len=config.max_seq_len,
        shards=tuple(shards),
        seed=config.seed,
        config={k: v for k, v in config.to_dict().items() if k != "output"},  # where it went is not what it is
    )
    manifest.write(posixpath.join(out, "pairs"))
    report = build_report(sorted(tallies), pairs=merge_stats(stats), shards=shards, vocab=vocab, config=config.to_dict())
    put_atomically(posixpath.join(out, "report.json"), (json.dumps(report, indent=2) + "\n").encode())
    return report


def build(p: beam.Pipeline, config: prep_config.PrepConfig) -> None:
    out = config.output
    temp = posixpath.join(out, f".tmp-{uuid.uuid4().hex[:12]}")
    scratch = Scratch(temp, spill_bytes=config.spill_mb << 20)
    read = p | "ReadCorpus" >> ReadCorpus(config.inputs, config.read)
    cleaned = read["docs"] | "CleanDocuments" >> CleanDocuments(
        NormalizeConfig(unicode_form=config.unicode_form, html_to_text=config.html_to_text),
        dataclasses.replace(FilterConfig.preset(config.filters), language=config.language),
    )
    deduped = cleaned["docs"] | "Deduplicate" >> Deduplicate(
        config.dedup, threshold=config.near_threshold, scratch=scratch.sub("dedup")
    )
    docs = deduped["docs"]
    clean_shards = docs | "WriteCleanDocs" >> WriteCleanDocs(posixpath.join(out, "clean"), scratch=scratch.sub("clean"))

    vocab_dir = posixpath.join(out, "vocab")
    if config.vocab:
        vocab = p | "ReuseVocab" >> ReuseVocab(config.vocab, vocab_dir)
    else:
        vocab_config = wordpiece.VocabConfig(
            vocab_size=config.vocab_size,
            lowercase=config.lowercase,
            num_unused=config.num_unused,
            min_frequency=config.min_frequency,
        )
        vocab = (
            docs
            | "CountWords" >> CountWords(config.lowercase)
            | "LearnWordPiece" >> LearnWordPiece(vocab_config, vocab_dir)
        )

    tokenized = (
        clean_shards
        | "ReadCleanDocs" >> beam.FlatMap(read_clean_shard)
        | "Tokenize" >> beam.ParDo(TokenizeFn(config.word_cache), beam.pvalue.AsSingleton(vocab)).with_outputs("token_counts", main="docs")
    )
    made = tokenized.docs | "MakeNspPairs" >> MakeNspPairs(
        max_seq_len=config.max_seq_len,
        short_seq_prob=config.short_seq_prob,
        dupe_factor=config.dupe_factor,
        bucket_docs=config.bucket_docs,
        validation_fraction=config.validation_fraction,
        seed=config.seed,
        vocab=vocab,
        scratch=scratch.sub("buckets"),
    )
    shards = made["pairs"] | "WriteShards" >> WriteShards(
        posixpath.join(out, "pairs"),
        rows_per_shard=config.rows_per_shard,
        bytes_per_shard=config.bytes_per_shard,
        batch_rows=config.batch_rows,
        vocab=vocab,
        scratch=scratch.sub("pairs"),
    )
    token_counts = tokenized.token_counts | "SumTokenCounts" >> beam.CombineGlobally(
sum_token_counts)

    drops = (read["drops"], cleaned["drops"], deduped["drops"]) | "AllDrops" >> beam.Flatten()
    tallies = (
        (
            read["accounting"],
            drops | count_drops("Drops"),
            docs | count_kept("Kept"),
        )
        | "AllTallies" >> beam.Flatten()
        | "CountTallies" >> beam.combiners.Count.PerElement()
    )
    _ = (
        p
        | "FinalizeTrigger" >> beam.Create([None])
        | "Finalize"
        >> beam.Map(
            lambda _, **kw: finalize(_, config=config, temp=temp, **kw),
            shards=beam.pvalue.AsList(shards),
            vocab=beam.pvalue.AsSingleton(vocab),
            tallies=beam.pvalue.AsList(tallies),
            stats=beam.pvalue.AsList(made["stats"]),
            token_counts=beam.pvalue.AsSingleton(token_counts),
        )
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="clozeforge prep",
        description="Clean, deduplicate and split corpora, learn a WordPiece vocabulary and write NSP pair shards. "
        "Unrecognised flags are passed to Apache Beam (e.g. --runner, --direct_num_workers).",
    )
    prep_config.add_arguments(ap)
    return ap


def check_output(output: str) -> None:
    """Create `output` and write and remove a probe file in it, so that an unwritable --output fails now,
    in one line, instead of after the whole corpus has been read."""
    try:
        fs, path = fsspec.core.url_to_fs(output)
        fs.makedirs(path, exist_ok=True)
        probe = posixpath.join(path, f".clozeforge-probe-{uuid.uuid4().hex}")
        with fs.open(probe, "wb") as f:
            f.write(b"probe")
        fs.rm(probe)
    except Exception as e:  # OSError locally; each object store's client has its own errors
        raise PrepError(f"--output {output}: cannot write there ({type(e).__name__}: {e})") from None


def run(argv: list[str] | None = None) -> dict:
    """Run prep; returns the report. Raises PrepError for user errors."""
    args, beam_args = parser().parse_known_args(argv)
    config = prep_config.from_args(args)
    check_output(config.output)
    if not any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        beam_args = ["--runner=FnApiRunner", *beam_args]
    options = PipelineOptions(beam_args, save_main_session=False)
    # NOTE: Beam's SDK harness prints a failed bundle's traceback straight to stderr (sdk_worker.py), from
    # a subprocess under multi_processing; a logger level cannot quiet that, so fd 2 is held for those modes.
    multi_worker = options.view_as(DirectOptions).direct_running_mode in ("multi_threading", "multi_processing")
    with quiet_workers(hold_stderr=multi_worker):
        try:
            with beam.Pipeline(options=options) as p:
                build(p, config)
        except Exception as e:
            message = prep_error_in(e)
            if message is None:
                raise
            raise PrepError(message) from None
    with fsspec.open(posixpath.join(config.output, "report.json"), "r") as f:
        return json.load(f)


def summarize(report: dict, output: str) -> str:
    t = report["total"]
    dropped = ", ".join(f"{k} {v}" for k, v in sorted(t["dropped"].items(), key=lambda kv: -kv[1])) or "none"
    lines = [
        f"records: read {t['read']}, kept {t['kept']}, dropped {sum(t['dropped'].values())} ({dropped})",
        f"vocab:   {report['vocab'].get('size')} tokens -> {posixpath.join(output, 'vocab')}",
    ]
    for split, stats in report["pairs"].items():
        rows = stats.get("rows", 0)
        rnd = stats.get("random_next", 0)
        lines.append(f"pairs:   {split}: {rows} in {stats.get('shards', 0)} shards, random-next {rnd / max(rows, 1):.3f}")
    if t["events"]:
        lines.append("events:  " + ", ".join(f"{k} {v}" for k, v in sorted(t["events"].items(), key=lambda kv: -kv[1])))
    lines.append(f"report:  {posixpath.join(output, 'report.json')}")
    if report["unbalanced"]:
        lines.append(f"ACCOUNTING MISMATCH in {report['unbalanced']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        report = run(argv)
    except PrepError as e:
        print(f"clozeforge prep: error: {e}", file=sys.stderr)
        return 2
    output = prep_config.from_args(parser().parse_known_args(argv)[0]).output
    print(summarize(report, output))
    if report["unbalanced"]:
        return 1
    if not any(stats.get("rows", 0) for stats in report["pairs"].values()):
        kept = report["total"]["kept"]
        why = "no document survived reading and cleaning" if not kept else f"the {kept} kept documents made no pair (too short?)"
        print(f"clozeforge prep: error: {why}; nothing to train on (see {posixpath.join(output, 'report.json')})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
