"""The integrity record of a checkpoint: every file's size and sha256, written last inside its step directory.

In:  a step directory that DeepSpeed has finished writing (every rank past the barrier).
Out: STEP_DIR/integrity.json ({"format": 1, "files": {relative path: {"bytes", "sha256"}}}), written to a
     temporary name, fsync'ed and renamed, so a directory that has one is complete; `problem(STEP_DIR)`
     says, in a few words, why a directory cannot be trusted (no record, a file missing, truncated or
     altered), or returns None when every recorded file matches.

A record detects damage (a truncated copy, a bad disk, a save cut short), not an attacker: one who can
write the files can rewrite the record, which is why loading never runs code either (trainer/checkpoint/safe_load.py).
"""

from __future__ import annotations

import hashlib
import json
import os

RECORD = "integrity.json"
FORMAT = 1


def _sha256(path: str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _files(folder: str) -> list[str]:
    out = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), folder)
            if rel != RECORD and not rel.endswith(".tmp"):
                out.append(rel)
    return sorted(out)


def write_record(folder: str) -> None:
    files = {rel: {"bytes": os.path.getsize(os.path.join(folder, rel)), "sha256": _sha256(os.path.join(folder, rel))}
             for rel in _files(folder)}
    path = os.path.join(folder, RECORD)
    with open(f"{path}.tmp", "w") as f:
        json.dump({"format": FORMAT, "files": files}, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f"{path}.tmp", path)


def problem(folder: str) -> str | None:
    """None when every file the record lists is there with its size and sha256; else what is wrong."""
    try:
        with open(os.path.join(folder, RECORD)) as f:
            record = json.load(f)
        files = record["files"]
        if record.get("format") != FORMAT or not isinstance(files, dict) or not files:
            return f"{RECORD} is not a format-{FORMAT} record"
    except FileNotFoundError:
        return f"no {RECORD} (the save did not finish)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{RECORD} is unreadable ({type(e).__name__})"
    for rel, want in sorted(files.items()):
        path = os.path.normpath(os.path.join(folder, rel))
        if not isinstance(want, dict) or os.path.isabs(rel) or not path.startswith(os.path.join(os.path.normpath(folder), "")):
            return f"{RECORD} names {rel!r}, outside the checkpoint"
        try:
            size = os.path.getsize(path)
        except OSError:
            return f"{rel} is missing"
        if size != want.get("bytes"):
            return f"{rel} has {size} bytes, the record says {want.get('bytes')}"
        if _sha256(path) != want.get("sha256"):
            return f"{rel} differs from the record (sha256)"
    return None
