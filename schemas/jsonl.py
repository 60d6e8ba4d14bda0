"""JSON lines as user files hold them: one object a line, blank lines skipped (standard library only).

In:  an iterable of text lines and the name of their file (for messages).
Out: (line number, object) pairs; ValueError naming file, line and column for a line that is not JSON or not an
     object. Shared by the commands that read a user's JSON lines outside Beam (tokenize, and through
     schemas/tables.py finetune and embed, which count such a line as a drop with `JsonLineError.reason`).
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


def json_objects(lines: Iterable[str], where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield number, json_object(line, where, number)
