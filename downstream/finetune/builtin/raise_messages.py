"""Which exception a standard-library error message is raised with (ValueError, TypeError or RuntimeError).

In:  the running interpreter's standard library as source text, parsed with `ast` (nothing is imported or run):
     every `raise NAME("message" ...)` whose message is a string literal, an f-string (its fields become "{}")
     or the left side of a `%` / `+`.
Out: rows {"text": the message, "label": the exception's name}; one source file is one group, a message is kept
     once (the first file that raises it).

Telling "expected a str, got {}" (TypeError) from "must be positive" (ValueError) asks for the meaning of short
technical sentences. String literals are neither docstrings (the demo's pretraining corpus) nor comments.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from pathlib import Path

from downstream.finetune.builtin.common import BuiltinTask, Grouped

EXCEPTIONS = ("ValueError", "TypeError", "RuntimeError")
_SKIP = {"test", "tests", "idlelib", "lib2to3", "turtledemo", "site-packages", "dist-packages", "__pycache__"}


def message_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return message_of(node.left)
    return None


def raised_messages(source: str) -> list[tuple[str, str]]:
    """(exception name, message) of each `raise Name(message, ...)` in `source`."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        call = node.exc if isinstance(node, ast.Raise) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.args:
            message = message_of(call.args[0])
            if message is not None:
                out.append((call.func.id, " ".join(message.split())))
    return out


def grouped(task: BuiltinTask, rng: random.Random) -> Grouped:
    root = Path(task.root or sysconfig.get_paths()["stdlib"])
    out: Grouped = {}
    seen: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        if _SKIP.intersection(path.relative_to(root).parts[:-1]) or path.name.startswith("test_"):
            continue
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for exception, message in raised_messages(source):
            if exception in EXCEPTIONS and len(message.split()) >= task.min_words and message not in seen:
                seen.add(message)
                out.setdefault(exception, []).append((str(path.relative_to(root)), {"text": message, "label": exception}))
    return out
