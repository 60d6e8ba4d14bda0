"""JSON lines as user files hold them: one object a line, blank lines skipped (standard library only).

In:  an iterable of text lines and the name of their file (for messages).
Out: (line number, object) pairs; ValueError naming file, line and column for a line that is not JSON or not an
     object. Shared by the commands that read a user's JSON lines outside Beam (tokenize, finetune).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any


def json_objects(lines: Iterable[str], where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}:{number}: not JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{where}:{number}: expected a JSON object, got {type(record).__name__}")
        yield number, record
