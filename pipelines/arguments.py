"""prep's command line: every argument is one of prep's flags, one of Beam's pipeline options, or an error.

In:  argv (prep's flags from pipelines/config.py, and Beam/Dataflow options such as --runner or --project).
Out: the parsed prep namespace and the list of Beam options, checked against every option that Beam's
     PipelineOptions classes declare (the parser Beam itself builds in PipelineOptions.get_all_options).
     Anything else is a PrepError, one line: an unknown flag with a "did you mean", or a stray positional
     argument, which is what a glob the shell expanded leaves behind (`--input data/*.jsonl` becomes
     `--input data/a.jsonl data/b.jsonl ...`, and only the first would be read).
"""

from __future__ import annotations

import argparse
import difflib

from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

from pipelines.errors import PrepError


def _raise(message: str):
    raise PrepError(message)


class PrepArgumentParser(argparse.ArgumentParser):
    """argparse, but a user error is a PrepError (one line, exit 2 from prep.main) instead of usage + exit."""

    def error(self, message: str):
        _raise(message)


def beam_parser() -> argparse.ArgumentParser:
    """A parser of every Beam pipeline option, built as Beam builds it (PipelineOptions.get_all_options)."""
    parser = _BeamArgumentParser(allow_abbrev=False)
    parser.error = _raise  # a bad value of a Beam option (--direct_num_workers x) is one line too
    seen: dict[str, type] = {}
    pending = list(PipelineOptions.__subclasses__())
    while pending:
        cls = pending.pop()
        if str(cls) in seen:
            continue
        seen[str(cls)] = cls
        pending.extend(cls.__subclasses__())
    for cls in seen.values():
        try:
            cls._add_argparse_args(parser)  # Beam's own way to list its options
        except argparse.ArgumentError:
            pass  # a user-defined subclass repeating an option Beam already declares
    return parser


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def _did_you_mean(flag: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(flag, candidates, n=1, cutoff=0.75)
    if not close:  # --vocab_size for --vocab-size: compare with '_' and '-' made equal
        alike = {c.replace("_", "-"): c for c in candidates}
        close = [alike[c] for c in difflib.get_close_matches(flag.replace("_", "-"), list(alike), n=1, cutoff=0.75)]
    return f" (did you mean {close[0]}?)" if close else ""


def parse(prep_parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """(prep's namespace, Beam's options) from argv; PrepError for an argument that is neither."""
    args, rest = prep_parser.parse_known_args(argv)
    beam = beam_parser()
    _, unknown = beam.parse_known_args(rest)
    for arg in unknown:
        if arg == "--":
            continue
        if arg.startswith("-"):
            flag = arg.split("=", 1)[0]
            raise PrepError(f"unknown flag {flag}{_did_you_mean(flag, _options(prep_parser) + _options(beam))} "
                            "(not a prep flag nor a Beam pipeline option; see clozeforge prep --help)")
        raise PrepError(f"unexpected argument {arg!r}: each --input takes one file or glob; if the shell expanded "
                        "a glob, quote it (--input 'data/*.jsonl') or repeat --input for each file")
    return args, rest
