"""JSON as files hold it: one object a line (JSON lines, blank lines skipped), or one object a file (standard library
only); every message one line naming the file (and the line).

In:  an iterable of text lines and the name of their file; or a file's bytes, its name, and the error to raise.
Out: `json_objects` → (line number, object) pairs, ValueError naming file, line and column for a line that is not
     JSON or not an object; shared by the commands that read a user's JSON lines outside Beam (tokenize, and
     through schemas/tables.py finetune and embed, which count such a line as a drop with `JsonLineError.reason`).
     `file_object` → the object a whole JSON file holds (a manifest, a vocabulary's config, a model's config.json,
     a user's DeepSpeed JSON), or the caller's error: "<where>: not valid JSON (...)" / "expected a JSON object".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any


class JsonLineError(ValueError):
    """A line that is not a JSON object; `reason` is its drop reason (prep's names: bad_json, not_an_object)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def json_object(line: str, where: str, number: int) -> dict[str, Any]:
    """The object on one line (line `number` of file `where`, for the message)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:  # a 100,000-deep array raises RecursionError
        detail = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else "nested too deep"
        raise JsonLineError(f"{where}:{number}: not JSON ({detail})", "bad_json") from None
    if not isinstance(record, dict):
        raise JsonLineError(f"{where}:{number}: expected a JSON object, got {type(record).__name__}", "not_an_object")
    return record


def file_object(raw: bytes | str, where: str, error: type[Exception] = ValueError) -> dict[str, Any]:
    """The object of a whole JSON file; `error(one line)` when it is not JSON or not an object. `where` names the
    file as the user knows it (a path, or a flag and its value)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise error(f"{where}: not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise error(f"{where}: expected a JSON object, got {type(body).__name__}")
    return body


def json_objects(lines: Iterable[str], where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield number, json_object(line, where, number)
