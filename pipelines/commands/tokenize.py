"""`clozeforge tokenize`: encode text files with a prep vocabulary, one JSON line of ids per text.

In:  --vocab DIR (a vocab/ directory written by prep, any tokenizer kind, or a tokenizer directory transformers saved
     for BERT, RoBERTa or XLM-R: schemas/vocab.py, schemas/tokenizer_formats.py), one or more
     --input URL globs (.txt, .jsonl, optionally .gz / .zst; any fsspec protocol), --per line|document,
     --text-field NAME for JSON lines.
Out: --output FILE (any fsspec URL): {"ids": [...]} per text, in input order, without special tokens ([CLS]/[SEP],
     <s>/</s>); the ids are those transformers' AutoTokenizer gives for the directory.

What a "text" is: with --per line (the default), each line of a .txt file, an empty line included (so
output line i belongs to input line i); with --per document, each whole .txt file. A .jsonl line is one
text either way (the value of --text-field). User errors (no vocabulary, a glob matching nothing, a bad
JSON line, bytes that are not UTF-8, a binary file) print one line on stderr and exit with status 2, and
leave an existing --output as it was: the output is written to a temporary and renamed once whole. Ctrl-C
and SIGTERM do the same (status 130 and 143), removing the temporary. One tokenize writes an --output at a
time (a lock beside it, `.NAME.lock`, process/lock.py), and it removes the temporaries a dead run of it (kill
-9) left there. An --input glob that matches --output, its lock or its temporaries leaves them out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import posixpath
import signal
import sys
import threading
import time
from collections.abc import Iterator

import fsspec

from pipelines.errors import PrepError
from pipelines.outputs.atomic import open_atomically
from pipelines.tokenizer_kinds import TOKENIZER_KINDS
from process import lock
from schemas.jsonl import json_objects
from schemas.tokenizer_formats import format_of

PER_CHOICES = ("line", "document")


class UsageError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


def _is_jsonl(path: str) -> bool:
    name = path.lower()
    for suffix in (".gz", ".zst", ".zstd"):
        name = name.removesuffix(suffix)
    return name.endswith((".jsonl", ".json", ".ndjson"))


def _lock_name(path: str) -> str:
    return f".{posixpath.basename(path)}.lock"


def _ours(path: str, out_path: str) -> bool:
    """`path` is the output, its lock, or one of its temporaries (`<output>.tmp-<id>`, pipelines/outputs/atomic.py)."""
    lock_path = posixpath.join(posixpath.dirname(out_path), _lock_name(out_path))
    return path in (out_path, lock_path) or path.startswith(f"{out_path}.tmp-")


def input_files(patterns: list[str], output: str | None = None) -> list[fsspec.core.OpenFile]:
    """The files matching each pattern (sorted within a pattern), less `output`, its lock and its temporaries (a
    command never reads what it writes); a pattern that matches nothing else is an error."""
    files = []
    out_fs, out_path = fsspec.core.url_to_fs(output) if output else (None, None)
    for pattern in patterns:
        # NOTE: newline="\n": only a line feed ends a line, so a lone carriage return stays inside its line
        # (the encoder treats it as whitespace) and output line i is input line i. open_files also returns
        # a handle for a plain path that does not exist, hence the isfile check.
        try:
            matched = fsspec.open_files(pattern, mode="rt", compression="infer", encoding="utf-8", newline="\n")
            matched = [h for h in matched if h.fs.isfile(h.path)]
        except (ImportError, ValueError, OSError) as e:
            raise UsageError(f"--input {pattern}: {e}") from None
        matched = [h for h in matched if not (type(h.fs) is type(out_fs) and _ours(h.path, out_path))]
        if not matched:
            raise UsageError(f"--input {pattern}: no file matches" + (" other than --output" if output else ""))
        files.extend(sorted(matched, key=lambda h: h.path))
    return files


def iter_texts(patterns: list[str], *, per: str = "line", text_field: str = "text", output: str | None = None) -> Iterator[str]:
    """Every text of the files matching `patterns`, in order (see the module docstring for what a text is)."""
    if per not in PER_CHOICES:
        raise UsageError(f"--per must be one of {', '.join(PER_CHOICES)}, got {per!r}")
    for handle in input_files(patterns, output):
        try:
            with handle as f:
                if _is_jsonl(handle.path):
                    texts = _jsonl_texts(f, handle.path, text_field)
                elif per == "document":
                    texts = iter([f.read()])
                else:
                    texts = (line.removesuffix("\n") for line in f)
                for number, text in enumerate(texts, 1):
                    if "\x00" in text:  # UTF-8 can hold NUL bytes; text does not
                        raise UsageError(f"{handle.path}:{number}: a NUL byte: a binary file, not text")
                    yield text
        except UnicodeDecodeError as e:
            raise UsageError(f"{handle.path}: not UTF-8 text ({e.reason} at byte {e.start} of a block); "
                             "convert it first (iconv -f latin1 -t utf-8, say)") from None
        except (OSError, EOFError) as e:  # a truncated .gz / .zst, a file that vanished
            raise UsageError(f"{handle.path}: cannot read ({type(e).__name__}: {e})") from None


def _jsonl_texts(f, path: str, text_field: str) -> Iterator[str]:
    try:
        for number, record in json_objects(f, path):
            text = record.get(text_field)
            if not isinstance(text, str):
                raise UsageError(f"{path}:{number}: no string field {text_field!r} (set --text-field)")
            yield text
    except ValueError as e:  # a line that is not a JSON object
        raise UsageError(str(e)) from None


@contextlib.contextmanager
def owned_output(url: str) -> Iterator[list[str]]:
    """Hold the lock of output `url` for the block (UsageError when a live tokenize holds it) and remove the
    temporaries of dead runs beside it, which no live run can own while we hold the lock; yields their names."""
    directory = posixpath.dirname(url) or "."
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(lock.held(directory, _lock_name(url),
                                         log=lambda line: print(f"clozeforge tokenize: {line}", file=sys.stderr)))
            fs, path = fsspec.core.url_to_fs(url)
            leftovers = sorted(fs.glob(f"{path}.tmp-*"))
            for leftover in leftovers:
                fs.rm(leftover)
        except lock.Locked as e:
            raise UsageError(f"--output {url}: being written by tokenize {lock.describe(e.owner)}") from None
        except OSError as e:
            raise UsageError(f"--output {url}: cannot write there ({type(e).__name__}: {e})") from None
        yield [posixpath.basename(p) for p in leftovers]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge tokenize", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", required=True, help="vocabulary directory written by prep (its vocab/), or a tokenizer directory transformers saved "
                    "(BERT, RoBERTa, XLM-R)")
    ap.add_argument("--input", action="append", required=True, help="input file or URL glob; repeat for several")
    ap.add_argument("--output", required=True, help="output JSON-lines file (local path or fsspec URL)")
    ap.add_argument("--per", choices=PER_CHOICES, default="line", help=".txt files: one text per line (default) or per file")
    ap.add_argument("--text-field", default="text", help="field of a JSON line holding the text (default: text)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    started = time.perf_counter()
    texts = tokens = chars = 0
    stopped_by: list[int] = []

    def stop(signum, _frame) -> None:
        stopped_by.append(signum)
        raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the temporary is removed on the way out (open_atomically)

    # only the main thread may set a handler (a test may call main() from another)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if main_thread else None
    try:
        try:
            encoder = TOKENIZER_KINDS[format_of(args.vocab).name].encoder(args.vocab)
        except (OSError, ValueError, KeyError) as e:  # ContractError is a ValueError
            raise UsageError(f"--vocab {args.vocab}: {e}") from None
        input_files(args.input, args.output)  # fail on a glob that matches nothing before creating the output
        # The output is written under a temporary name and renamed once complete: a bad input, a full disk,
        # Ctrl-C or SIGTERM half-way leaves an existing output as it was (and no temporary).
        with owned_output(args.output) as leftovers, open_atomically(args.output) as out:
            if leftovers:
                print(f"clozeforge tokenize: removed {len(leftovers)} leftovers of an interrupted run: {', '.join(leftovers[:3])}"
                      f"{' ...' if len(leftovers) > 3 else ''}", file=sys.stderr)
            for text in iter_texts(args.input, per=args.per, text_field=args.text_field, output=args.output):
                ids = encoder.encode(text)
                out.write((json.dumps({"ids": ids}) + "\n").encode())
                texts, tokens, chars = texts + 1, tokens + len(ids), chars + len(text)
    except (UsageError, PrepError) as e:  # PrepError: open_atomically's one line for a write that failed
        print(f"clozeforge tokenize: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        name = "SIGTERM" if stopped_by else "interrupted"
        print(f"clozeforge tokenize: {name}; {args.output} is as it was before", file=sys.stderr)
        return 143 if stopped_by else 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    seconds = time.perf_counter() - started
    summary = f"{texts} texts, {chars} characters -> {tokens} tokens in {seconds:.1f}s -> {args.output}"
    print(f"clozeforge tokenize: {summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
