"""The demo's built-in corpus: documentation already on the machine, read as text (nothing is imported or run).

In:  a directory, a size in bytes, a corpus of CORPORA: "docstrings" (the running Python's module docstrings, read
     with `ast`) or "documentation" (those docstrings, the English man pages under /usr/share/man and the GNU info
     manuals under /usr/share/info, each its share of the size).
Out: DIR/SOURCE-*.jsonl, one JSON line {"id", "text"} per module, page or info node; `inputs` names them as prep's
     --input NAME=GLOB, so report.json counts every source on its own.

The man pages and manuals are the text the demo's built-in tasks are made from: the demo's prep drops every
document that shares a 13-word n-gram with a task's validation or test file (`prep --decontaminate`), so no
scored text is pretrained on (experiments/README.md "race" measures what the extra sources buy, on tasks from the
standard library's source too). A source the machine lacks (no man pages in a slim container) writes nothing and
the others still make the corpus.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Callable


def _docstrings(directory: str, max_bytes: int) -> int:
    from pipelines.documents.builtin_corpus import write_builtin_corpus

    return sum(os.path.getsize(p) for p in write_builtin_corpus(directory, max_bytes))


def _man_pages(directory: str, max_bytes: int) -> int:
    from downstream.finetune.builtin.man_sections import write_pages

    return write_pages(os.path.join(directory, "man-00.jsonl"), max_bytes)


def _info_nodes(directory: str, max_bytes: int) -> int:
    from downstream.finetune.builtin.info_pairs import write_nodes

    return write_nodes(os.path.join(directory, "info-00.jsonl"), max_bytes)


@dataclasses.dataclass(frozen=True)
class Source:
    name: str
    """prep's --input name, and the files' prefix."""
    share: float
    """Its part of the corpus size."""
    write: Callable[[str, int], int]
    """(directory, bytes) -> bytes written."""


@dataclasses.dataclass(frozen=True)
class Corpus:
    sources: tuple[Source, ...]
    megabytes: float
    """The demo's corpus size for this kind (demo --corpus-mb's default)."""
    says: str
    """What the demo prints of it."""


CORPORA = {
    "docstrings": Corpus((Source("docstrings", 1.0, _docstrings),), 6.0, "docstrings of this environment's Python modules"),
    "documentation": Corpus((Source("docstrings", 0.4, _docstrings), Source("man", 0.4, _man_pages), Source("info", 0.2, _info_nodes)),
                            15.0, "this machine's documentation: Python docstrings, man pages, GNU manuals"),
}
"""Each built-in corpus by its --builtin-corpus name: its sources, size and what the demo says of it. documentation:
the info manuals' share is about all this machine has (3 MB of prose at 15 MB); the man pages hold ten times what it
reads."""


def write(directory: str, max_bytes: int, kind: str = "docstrings") -> dict[str, int]:
    """Write the corpus of `kind` under `directory`: {source: bytes written}."""
    os.makedirs(directory, exist_ok=True)
    written = {s.name: s.write(directory, int(max_bytes * s.share)) for s in CORPORA[kind].sources}
    for path in glob.glob(os.path.join(directory, "*.jsonl")):
        if os.path.getsize(path) == 0:  # a source this machine lacks: no empty input for prep
            os.remove(path)
    return written


def inputs(directory: str, kind: str = "docstrings") -> list[str]:
    """prep's --input flags for the corpus in `directory` (the sources that wrote something)."""
    return [flag for s in CORPORA[kind].sources if glob.glob(os.path.join(directory, f"{s.name}-*.jsonl"))
            for flag in ("--input", f"{s.name}={os.path.join(directory, s.name)}-*.jsonl")]


def decontaminate_flags(task_directories) -> list[str]:
    """prep's --decontaminate flags for built-in tasks written under these directories: each one's validation and test
    file (their text is what the tasks score; the train split may be pretrained on)."""
    return [flag for directory in task_directories for split in ("validation", "test")
            for flag in ("--decontaminate", os.path.join(directory, f"{split}.jsonl"))]
