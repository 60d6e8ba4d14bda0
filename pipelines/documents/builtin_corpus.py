"""The built-in corpus: docstrings of the Python modules installed in the running environment.

In:  nothing (the interpreter's sys.path, read as source files with `ast`; no module is imported).
Out: JSON-lines files of {"id": <module path>, "text": <docstrings joined by blank lines>}, one document
     per module, capped at `max_bytes` of text so the demo stays fast.

Docstrings are real English technical prose with paragraphs, lists and code, which makes them a fair
stand-in for a pre-training corpus when no download is possible. The walk is sorted and starts with the
standard library, so one Python version yields the same corpus up to the size of its standard library's
docstrings, whatever packages are installed and wherever.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

DEFAULT_MAX_BYTES = 4_000_000
_MIN_DOC_CHARS = 200
# Tests, caches, and the packages installed beside the standard library (walked from their own root, and
# only after it: they differ between machines).
_SKIP_DIRS = {"__pycache__", "test", "tests", "site-packages", "dist-packages"}


def _roots() -> list[Path]:
    """The standard library first, then the installed packages: a corpus smaller than the standard library's
    docstrings (every size the tests and the demo use) is the same for every environment of one Python
    version, wherever its virtualenv lies and whatever else it has installed."""
    paths = sysconfig.get_paths()
    roots: list[Path] = []
    for key in ("stdlib", "purelib", "platlib"):
        root = Path(paths[key]) if key in paths else None
        if root is not None and root.is_dir() and root not in roots:
            roots.append(root)
    return roots


def _module_docstrings(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    docs = []
    for node in nodes:
        doc = ast.get_docstring(node, clean=True)
        if doc and len(doc) >= 40:
            docs.append(doc)
    return docs


def iter_documents(max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[dict[str, str]]:
    """Yield {"id", "text"} per module with enough docstring text, until `max_bytes` of text is out."""
    total = 0
    for root in _roots():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                path = Path(dirpath) / name
                try:
                    source = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                text = "\n\n".join(_module_docstrings(source))
                if len(text) < _MIN_DOC_CHARS:
                    continue
                yield {"id": str(path.relative_to(root)), "text": text}
                total += len(text.encode("utf-8"))
                if total >= max_bytes:
                    return


def write_builtin_corpus(directory: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES, files: int = 4) -> list[str]:
    """Write the corpus as `files` JSON-lines files under `directory`; return their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"docstrings-{i:02d}.jsonl" for i in range(files)]
    handles = [p.open("w", encoding="utf-8") for p in paths]
    try:
        for i, doc in enumerate(iter_documents(max_bytes)):
            handles[i % files].write(json.dumps(doc, ensure_ascii=False) + "\n")
    finally:
        for h in handles:
            h.close()
    return [str(p) for p in paths]


if __name__ == "__main__":  # python -m pipelines.documents.builtin_corpus DIR [MAX_BYTES]
    print("\n".join(write_builtin_corpus(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MAX_BYTES)))
