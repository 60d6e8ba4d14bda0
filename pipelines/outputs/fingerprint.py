"""Whether a prep output stands for a rerun of the same prep: a fingerprint of what made it, and of what it holds.

In:  the --input globs (any fsspec URL), the prep flags as typed (the settings), and the --output directory.
Out: `inputs_fingerprint(...)`: sha256 over every matched file's name and bytes, the settings, and the source of
     the code prep runs (pipelines/ and schemas/); `record(stamp, output, fingerprint)` writes it beside the
     digest of the output's files (clean/, vocab/, pairs/, report.json) once prep has finished; `stale(stamp,
     output, fingerprint)` says why that output cannot be reused (None when it can).

`clozeforge demo` reruns prep only when this says so: the corpus, the settings and the code give the same bytes
(prep is deterministic, DESIGN.md contract 2), so a byte-identical input and configuration with an output that
still hashes as recorded is the same output. Anything else (an edited corpus file, another flag, an output
touched or half rewritten by an interrupted prep, a changed prep module) redoes it. No Beam import.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath

import fsspec

from pipelines.outputs.ownership import AREAS, REPORT_FILE

_CODE = ("pipelines", "schemas")
"""Packages whose source decides what prep writes."""


def _code_digest() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    h = hashlib.sha256()
    for package in _CODE:
        for folder, dirs, files in sorted(os.walk(os.path.join(root, package))):
            dirs.sort()
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def inputs_fingerprint(patterns: list[str], settings: list[str]) -> str:
    """sha256 of the files the globs match (names and bytes, in order), `settings` and prep's code."""
    h = hashlib.sha256(json.dumps({"settings": settings, "code": _code_digest()}, sort_keys=True).encode())
    for pattern in patterns:
        h.update(b"\0pattern\0" + pattern.encode())
        for handle in sorted(fsspec.open_files(pattern, "rb"), key=lambda f: f.path):
            if not handle.fs.isfile(handle.path):
                continue
            h.update(b"\0file\0" + handle.path.encode() + b"\0")
            with handle as f:
                while block := f.read(1 << 20):
                    h.update(block)
    return h.hexdigest()


def output_digest(output: str) -> str | None:
    """sha256 of every file prep wrote under `output` (names and bytes); None when it has no report.json."""
    if not os.path.isfile(os.path.join(output, REPORT_FILE)):
        return None
    h = hashlib.sha256()
    paths = [REPORT_FILE]
    for area in AREAS:
        for folder, dirs, files in os.walk(os.path.join(output, area)):
            dirs.sort()
            paths += sorted(os.path.relpath(os.path.join(folder, f), output) for f in files)
    for rel in sorted(paths):
        h.update(rel.replace(os.sep, "/").encode() + b"\0")
        with open(os.path.join(output, rel), "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def record(stamp: str, output: str, fingerprint: str) -> None:
    """After a prep that finished: what made `output` and what it holds, in the JSON file `stamp`."""
    body = json.dumps({"inputs": fingerprint, "output": output_digest(output)}, indent=1)
    partial = f"{stamp}.tmp-{os.getpid()}"
    with open(partial, "w", encoding="utf-8") as f:
        f.write(body + "\n")
    os.replace(partial, stamp)


def forget(stamp: str) -> None:
    """Before a prep runs: an output being rewritten stands for nothing until it is recorded again."""
    if os.path.exists(stamp):
        os.remove(stamp)


def stale(stamp: str, output: str, fingerprint: str) -> str | None:
    """Why `output` is not the output of a prep with `fingerprint` (None: it is, verified byte for byte)."""
    try:
        with open(stamp, encoding="utf-8") as f:
            recorded = json.load(f)
    except FileNotFoundError:
        return "no finished prep recorded"
    except (OSError, ValueError):
        return "its record is unreadable"
    if not isinstance(recorded, dict) or recorded.get("inputs") != fingerprint:
        return "the corpus, the prep settings or prep's code changed"
    found = output_digest(output)
    if found is None:
        return f"{posixpath.join(output, REPORT_FILE)} is missing"
    if recorded.get("output") != found:
        return "its files changed since it was written"
    return None
