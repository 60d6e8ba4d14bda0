"""Does the second paragraph follow the first in the same GNU manual, or come from another manual? (pair task)

In:  the GNU info manuals under /usr/share/info (gzipped; a manual split over name.info-1.gz, -2.gz is one manual).
Out: rows {"text": the end of paragraph A, "text_pair": the start of paragraph B, "label": "next" | "other"};
     "next": B is the paragraph after A in the same node; "other": B is a paragraph of another manual. Each side
     keeps SIDE_WORDS words (A's last, B's first: the words where the two paragraphs meet), so that a pair fits
     the 64 to 128 tokens a small model is pretrained on. One node is one group, and the
     "other" paragraph of a row is drawn from nodes of the same split, so no paragraph is seen in two splits.

Licence appendices, indexes, menus and tables (lines starting with "*" or holding runs of dots or spaces) are left out; what
remains is the manuals' prose. The demo pretrains on these manuals (demo/corpus.py, `write_nodes`) less every node that
shares a 13-word n-gram with this task's validation or test split.
"""

from __future__ import annotations

import gzip
import os
import random
import re

from downstream.finetune.builtin.common import (
    SPLITS,
    BuiltinTask,
    Grouped,
    Sizes,
    paragraphs_of,
    split_by_group,
    write_splits,
)

_NOT_PROSE = re.compile(r"^\s*\*|\.\.\.\.|\S\s{4,}\S|^\s*[-=]{3,}|^File: ")
_NOT_MANUAL = re.compile(r"Node: [^,\n]*(Licen[cs]e|Copying|Index)")


def manuals(root: str) -> dict[str, list[str]]:
    """{manual: its info text}, the parts of a split manual joined in order."""
    parts: dict[str, list[str]] = {}
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return {}
    for name in names:
        found = re.fullmatch(r"(.+)\.info(?:-(\d+))?\.gz", name)
        if not found:
            continue
        try:
            with gzip.open(os.path.join(root, name), "rt", encoding="utf-8") as f:
                parts.setdefault(found.group(1), []).append((int(found.group(2) or 0), f.read()))
        except (OSError, UnicodeDecodeError, EOFError):
            continue
    return {manual: [text for _, text in sorted(texts)] for manual, texts in parts.items()}


def node_paragraphs(text: str, min_words: int) -> list[list[str]]:
    """The prose paragraphs of each node (nodes are separated by the 0x1f byte)."""
    nodes = []
    for node in text.split("\x1f"):
        if _NOT_MANUAL.search(node[:300]):  # the licence appendices and the indexes: not this manual's prose
            continue
        lines = [line for line in node.splitlines() if not _NOT_PROSE.search(line)]
        found = paragraphs_of(lines, min_words)
        if found:
            nodes.append(found)
    return nodes


def write_nodes(path: str, max_bytes: int, root: str = "/usr/share/info") -> int:
    """A pretraining corpus of GNU manuals (the demo's built-in corpus, demo/corpus.py): one JSON line {"id": manual/node,
    "text": its prose paragraphs, one a line} per node, manuals in name order, up to `max_bytes`; returns the bytes
    written. A node is one document so that prep's --decontaminate drops only the nodes the info-pairs task scores
    on (a whole manual shares a 13-word n-gram with nearly every task split)."""
    import json

    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for manual, texts in manuals(root).items():
            for k, paragraphs in enumerate(p for text in texts for p in node_paragraphs(text, min_words=6)):
                if written >= max_bytes:
                    return written
                line = json.dumps({"id": f"{manual}/{k}", "text": "\n".join(paragraphs)}, ensure_ascii=False) + "\n"
                out.write(line)
                written += len(line.encode())
    return written


SIDE_WORDS = 24
"""Words kept of each side: A's last, B's first (the words where the two paragraphs meet)."""


def grouped(task: BuiltinTask, rng: random.Random) -> Grouped:
    """Only the "next" candidates, grouped by node; `write` draws each row's label and its "other" paragraph."""
    out: Grouped = {"next": []}
    for manual, texts in manuals(task.root).items():
        for k, paragraphs in enumerate(p for text in texts for p in node_paragraphs(text, task.min_words)):
            for a, b in zip(paragraphs, paragraphs[1:]):
                a, b = " ".join(a.split()[-SIDE_WORDS:]), " ".join(b.split()[:SIDE_WORDS])
                out["next"].append((f"{manual}/{k}", {"text": a, "text_pair": b, "manual": manual}))
    return out


def write(task: BuiltinTask, directory: str, seed: int = 0) -> list[str]:
    rng = random.Random(f"{task.name}:{seed}")
    half = Sizes(train=2 * task.sizes.train, validation=2 * task.sizes.validation, test=2 * task.sizes.test,
                 per_group=task.sizes.per_group)
    candidates = split_by_group(grouped(task, rng), half, rng)["next"]
    if any(len(candidates[s]) < getattr(half, s) for s in SPLITS):
        raise LookupError(f"{task.name}: this machine lacks the text ({task.source}) for the task")
    splits = {}
    for split in SPLITS:
        rows = candidates[split]
        out = []
        for i, row in enumerate(rows):
            if i % 2 == 0:
                out.append({"text": row["text"], "text_pair": row["text_pair"], "label": "next"})
            else:  # B from another manual's paragraph in this split
                others = [r["text_pair"] for r in rows if r["manual"] != row["manual"]]
                out.append({"text": row["text"], "text_pair": rng.choice(others), "label": "other"})
        splits[split] = out
    write_splits(directory, splits, rng)
    return ["next", "other"]
