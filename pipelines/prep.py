"""`clozeforge prep` / `python -m pipelines.prep`: raw corpora → clean/, vocab/, pairs/ and report.json.

In:  --input [NAME=]GLOB (repeatable), --output DIR, the project's flags (pipelines/config.py) and any
     Beam pipeline options (--runner, --direct_num_workers, Dataflow's --project, ...), told apart by
     pipelines/arguments.py: any other argument is a one-line error.
Out: DIR/clean/*.parquet, DIR/vocab/ (schemas/vocab.py), DIR/pairs/*.arrow + manifest.json, DIR/report.json;
     the stages between them are pipelines/graph.py's. Without --runner, Beam's FnApiRunner is used (the
     DirectRunner's engine, minus the attempt to fetch the Prism binary).
Order: flags, then the inputs (matched; an object store must answer) and --vocab, then --output, then the
corpus: a user error is one line before any work. SIGINT / SIGTERM end the run in one line (exit 130 / 143).
A job on a runner that is not local (pipelines/runners.py) goes on without this process: --output's run file
records it from its submission until prep sees it end, a stop says so and how to cancel it, and a rerun waits
for --ended-job (pipelines/outputs/ownership.py); --no_wait_until_finish is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import posixpath
import shutil
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator

import apache_beam as beam
import fsspec
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
)

from pipelines import arguments, runners
from pipelines import config as prep_config
from pipelines.documents.decontaminate import match_files
from pipelines.errors import PrepError, os_error_in, prep_error_in, quiet_workers
from pipelines.graph import build
from pipelines.outputs import ownership, progress
from pipelines.stages.learn_vocabulary import check_vocab
from pipelines.stages.read_corpus import expand_inputs, matched_files
from process.exits import fail
from schemas.pairs import NSP_PAIRS, PACKINGS, TLM_PAIRS


def parser() -> argparse.ArgumentParser:
    ap = arguments.PrepArgumentParser(
        prog="clozeforge prep",
        allow_abbrev=False,  # a prefix of a flag is not that flag: it could be a Beam option's
        description="Clean, deduplicate and split corpora, learn a vocabulary (WordPiece, byte-level BPE or Unigram) and "
        "write NSP pair shards (or RoBERTa's packed rows, or XLM's translation pairs: --packing). "
        "Apache Beam's pipeline options are accepted too (e.g. --runner, --direct_num_workers, Dataflow's "
        "--project); any other argument is an error.",
    )
    prep_config.add_arguments(ap)
    return ap


def check_output(output: str) -> None:
    """Create `output` and write and remove a probe file in it, so that an unwritable --output fails now,
    in one line, instead of after the whole corpus has been read."""
    try:
        fs, path = fsspec.core.url_to_fs(output)
        fs.makedirs(path, exist_ok=True)
        probe = posixpath.join(path, f"{ownership.PROBE_PREFIX}{uuid.uuid4().hex}")
        with fs.open(probe, "wb") as f:
            f.write(b"probe")
        fs.rm(probe)
    except Exception as e:  # OSError locally; each object store's client has its own errors  # noqa: BLE001
        raise PrepError(f"--output {output}: cannot write there ({type(e).__name__}: {e})") from None


def parse(argv: list[str] | None = None) -> tuple[prep_config.PrepConfig, list[str]]:
    """(the PrepConfig, Beam's options) from argv; PrepError for a bad or unknown argument."""
    args, beam_args = arguments.parse(parser(), argv)
    return prep_config.from_args(args), beam_args


def input_bytes(config: prep_config.PrepConfig) -> int | None:
    """The inputs' total size, when it measures their text (plain text and JSON lines); else None (no ETA)."""
    total = 0
    for _, url in expand_inputs(config.inputs, config.output):
        if not url.lower().endswith((".txt", ".jsonl", ".json")):
            return None
        fs, path = fsspec.core.url_to_fs(url)
        total += fs.size(path)
    return total


@contextlib.contextmanager
def beam_logs(verbose: bool) -> Iterator[None]:
    """Beam's log lines (start-up notes, warnings about options) kept off the terminal unless --verbose; its
    errors still pass, and prep's own messages say what a user needs."""
    beam_logger = logging.getLogger("apache_beam")
    level = beam_logger.level
    if not verbose:
        beam_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        beam_logger.setLevel(level)


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Beam's options for prep (FnApiRunner unless --runner says otherwise); a PrepError for one prep cannot honour."""
    if not any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        beam_args = ["--runner=FnApiRunner", *beam_args]
    options = PipelineOptions(beam_args, save_main_session=False)
    if options.view_as(StandardOptions).no_wait_until_finish:
        raise PrepError("--no_wait_until_finish: prep waits for its job to end, to record in --output that the job no "
                        "longer writes there and to print its report; to leave it running unattended, start prep in the "
                        "background (nohup, tmux, a scheduler)")
    return options


def _run_pipeline(config: prep_config.PrepConfig, options: PipelineOptions, claim: ownership.Claim) -> None:
    # NOTE: Beam's SDK harness prints a failed bundle's traceback straight to stderr (sdk_worker.py), from
    # a subprocess under multi_processing; a logger level cannot quiet that, so fd 2 is held for those modes.
    direct = options.view_as(DirectOptions)
    multi_worker = direct.direct_running_mode in ("multi_threading", "multi_processing")
    if (direct.direct_num_workers or 1) != 1 and not multi_worker:  # said here in one line, Beam's warning hidden
        print(f"clozeforge prep: note: --direct_num_workers {direct.direct_num_workers} has no effect without "
              "--direct_running_mode multi_threading or multi_processing", file=sys.stderr)
    show = config.progress == "always" or (config.progress == "auto" and sys.stderr.isatty())
    progress_dir = tempfile.mkdtemp(prefix="clozeforge-progress-") if show and runners.kind_of(options).local else None
    try:
        # the reporter writes to the terminal's stderr as it was before quiet_workers holds fd 2
        reporter = progress.Reporter(progress_dir, input_bytes(config)) if progress_dir else contextlib.nullcontext()
        with reporter, quiet_workers(hold_stderr=multi_worker), beam_logs(config.verbose):
            try:
                _run_job(config, options, claim, progress_dir)
            except Exception as e:
                message = prep_error_in(e) or os_error_in(e, config.output)
                if message is None:
                    raise
                raise PrepError(message) from None
    finally:
        if progress_dir:
            shutil.rmtree(progress_dir, ignore_errors=True)


def _run_job(config: prep_config.PrepConfig, options: PipelineOptions, claim: ownership.Claim, progress_dir: str | None) -> None:
    """Build, submit and wait for the job; a remote job is recorded in --output's run file from its submission to
    the moment this process sees it end (pipelines/outputs/ownership.py)."""
    p = beam.Pipeline(options=options)
    build(p, config, claim.leftovers, progress_dir)
    result = p.run()
    claim.job_submitted(runners.job_record(result, options))
    try:
        state = result.wait_until_finish()
    finally:
        if claim.job is not None:  # a failure, or an interrupt: record the end only if the job has ended
            with contextlib.suppress(Exception):  # the runner may not answer: then the job may still run
                if runners.ended(result.state):
                    claim.job_ended(str(result.state))
    if str(state) != "DONE":
        raise PrepError(f"the job ended in state {state}, not DONE: --output {config.output} holds no complete run")


def check_inputs(config: prep_config.PrepConfig) -> None:
    """Match every --input (an object store that does not answer fails here, in seconds) and check --vocab, before
    --output is touched; say in one line when a glob reaches into --output (what prep wrote there is not read)."""
    _, _, skipped = matched_files(config.inputs, config.output)
    if skipped:
        shown = sorted({posixpath.relpath(p, fsspec.core.url_to_fs(config.output)[1]).split("/")[0] for p in skipped})
        shown = shown[:8] + (["..."] if len(shown) > 8 else [])
        print(f"clozeforge prep: note: --input reaches into --output {config.output}: its {len(skipped)} files of prep's "
              f"own ({', '.join(shown)}) are not read as documents", file=sys.stderr)
    if config.vocab:
        check_vocab(config.vocab, config.tokenizer)
    if config.decontaminate:
        match_files(config.decontaminate)  # a glob matching nothing fails here, in one line


def run(argv: list[str] | None = None) -> dict:
    """Run prep; returns the report. Raises PrepError for user errors."""
    config, beam_args = parse(argv)
    options = pipeline_options(beam_args)
    check_inputs(config)
    check_output(config.output)
    with ownership.owned(config.output, config.settings(), overwrite=config.overwrite, ended_job=config.ended_job) as claim:
        _run_pipeline(config, options, claim)
    with fsspec.open(posixpath.join(config.output, "report.json"), "r") as f:
        return json.load(f)


def summarize(report: dict, output: str) -> str:
    t = report["total"]
    dropped = ", ".join(f"{k} {v}" for k, v in sorted(t["dropped"].items(), key=lambda kv: -kv[1])) or "none"
    lines = [
        f"records: read {t['read']}, kept {t['kept']}, dropped {sum(t['dropped'].values())} ({dropped})",
        f"vocab:   {report['vocab'].get('size')} {report['vocab'].get('tokenizer', 'wordpiece')} tokens -> {posixpath.join(output, 'vocab')}",
    ]
    nsp = PACKINGS[report.get("packing", {}).get("mode", "nsp")].row_format == NSP_PAIRS
    for split, stats in report["pairs"].items():
        rows = stats.get("rows", 0)
        rnd = f", random-next {stats.get('random_next', 0) / max(rows, 1):.3f}" if nsp else ""
        figures = f", {stats['tokens_per_row']:.1f} tokens a row, padding {stats['padding_fraction']:.3f}" if rows else ""
        label = "pairs:" if nsp else "rows:"
        lines.append(f"{label:<9}{split}: {rows} in {stats.get('shards', 0)} shards{rnd}{figures}")
    if report.get("packing", {}).get("row_format") == TLM_PAIRS.kind:
        lines.append(f"rows:    translation pairs (--packing tlm) in {', '.join(report['packing']['languages'])}; the documents "
                     "went to clean/ and the vocabulary only")
    if "parallel" in report:
        par = report["parallel"]["total"]
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(par["dropped"].items(), key=lambda kv: -kv[1]))
        lines.append(f"parallel: {par['kept']} of {par['read']} translation pairs kept ({len(report['parallel']['directions'])} "
                     f"directions{'; dropped: ' + dropped if dropped else ''}) -> {posixpath.join(output, 'parallel')}")
    if t["events"]:
        lines.append("events:  " + ", ".join(f"{k} {v}" for k, v in sorted(t["events"].items(), key=lambda kv: -kv[1])))
    housekeeping = report.get("output", {})
    if housekeeping.get("leftovers_removed"):
        removed = ownership.Leftovers(tuple(housekeeping["leftovers_removed"]), housekeeping.get("leftover_bytes", 0))
        lines.append(f"output:  {removed.describe()}")
    if housekeeping.get("replaced_files_removed"):
        lines.append(f"output:  removed {len(housekeeping['replaced_files_removed'])} files of the run this one replaced")
    lines.extend(f"WARNING: {warning}" for warning in report.get("warnings", []))
    undecodable = t["dropped"].get("invalid_utf8", 0)
    if undecodable:
        encoding = report.get("config", {}).get("read", {}).get("encoding", "utf-8")
        lines.append(f"hint:    {undecodable} records are not {encoding} text and were dropped; if they are latin-1 or "
                     "Windows text, rerun with --encoding cp1252 (or the files' own codec)")
    lines.append(f"report:  {posixpath.join(output, 'report.json')}")
    if report["unbalanced"]:
        lines.append(f"ACCOUNTING MISMATCH in {report['unbalanced']}")
    return "\n".join(lines)


@contextlib.contextmanager
def stop_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM raise KeyboardInterrupt, as Ctrl-C does, and are recorded in the yielded list: Beam
    re-raises an interrupt from inside a stage as a RuntimeError quoting it, so the record, not the exception's
    type, says the run was stopped. Only the main thread can set handlers; elsewhere nothing changes."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def stop(signum, _frame):
        received.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _after_stop(argv: list[str] | None) -> str:
    """What a stopped launcher leaves: nothing running, or a remote job that goes on and how to stop it."""
    with contextlib.suppress(Exception):  # stopped before --output was checked: there is no job
        job = ownership.running_job(parse(argv)[0].output)
        if job is not None:
            hint = runners.cancel_hint(job)
            return (f"{runners.describe(job)} goes on without it and writes --output until it ends"
                    f"{'; to stop it: ' + hint if hint else ''}; once it has ended, rerun with --ended-job {job['id']}")
    return "no output is complete until report.json is written: rerun the same command to start again"


def main(argv: list[str] | None = None) -> int:
    with stop_signals() as received:
        try:
            report = run(argv)
        except PrepError as e:
            return fail("prep", str(e))
        except BaseException:
            if not received:
                raise
            # NOTE: nothing is final before report.json: the rerun finds this run's settings in its run file,
            # removes its temporaries (.tmp-*) and writes every output again. A remote job, though, goes on.
            name = signal.Signals(received[0]).name
            print(f"clozeforge prep: stopped by {name}; {_after_stop(argv)}", file=sys.stderr)
            return 128 + received[0]  # 130 for Ctrl-C, 143 for SIGTERM, as a shell reports them
    output = parse(argv)[0].output
    print(summarize(report, output))
    if report["unbalanced"]:
        return 1
    if not any(stats.get("rows", 0) for stats in report["pairs"].values()):
        kept = report["total"]["kept"]
        why = "no document survived reading and cleaning" if not kept else f"the {kept} kept documents made no pair (too short?)"
        if report.get("packing", {}).get("row_format") == TLM_PAIRS.kind:
            why = "no translation pair made a row"
        return fail("prep", f"{why}; nothing to train on (see {posixpath.join(output, 'report.json')})", status=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
