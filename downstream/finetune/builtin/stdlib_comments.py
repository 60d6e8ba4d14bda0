"""Which standard-library package a source comment comes from (topic classification over 8 packages); the demo's
first downstream task, now kept out of its score as a held-out check.

In:  nothing (the running interpreter's standard library, read as text with `tokenize`; nothing is imported).
Out: train.jsonl, validation.jsonl, test.jsonl of {"text": comment block, "label": package} under a directory,
     and the list of classes.

The demo pretrains on the *docstrings* of the same installation (pipelines/documents/builtin_corpus.py); the
comments (`# ...` blocks) were never in that corpus, so the task is new text from a familiar domain. The classes
are the `classes` standard-library packages with the most comment blocks (one Python version gives the same task on
every machine); each comment block of at least `min_words` words is one example. Few labels per class
(`train_per_class`) is where a pretrained encoder shows what it learnt: with thousands, a model trained from scratch
catches up (see experiments/README.md "finetune").
"""

from __future__ import annotations

import io
import json
import os
import random
import sysconfig
import tokenize
from pathlib import Path

from downstream.finetune.builtin.common import BuiltinTask

_SKIP = ("!", " -*-", "-*-", " noqa", " type:", " pragma", " Copyright", " Licensed", " fmt:", " pylint")


def comment_blocks(source: str, min_words: int) -> list[str]:
    """Runs of consecutive comment lines, joined, with at least `min_words` words."""
    blocks, current, last_line = [], [], -2
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            text = token.string[1:]
            if text.startswith(_SKIP):
                continue
            if token.start[0] != last_line + 1 and current:
                blocks.append(" ".join(current))
                current = []
            current.append(text.strip())
            last_line = token.start[0]
    except (tokenize.TokenError, SyntaxError, ValueError):
        pass
    if current:
        blocks.append(" ".join(current))
    return [" ".join(b.split()) for b in blocks if len(b.split()) >= min_words]


def package_comments(min_words: int = 6) -> dict[str, list[str]]:
    """{top-level standard-library package: its comment blocks}, in sorted file order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out: dict[str, list[str]] = {}
    for package in sorted(p for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        if package.name in ("test", "site-packages", "lib2to3", "idlelib", "turtledemo", "encodings"):  # tests, apps, codec tables
            continue
        blocks = []
        for path in sorted(package.rglob("*.py")):
            if "test" in path.relative_to(package).parts[:-1] or path.name.startswith("test"):
                continue
            try:
                blocks += comment_blocks(path.read_text(encoding="utf-8"), min_words)
            except (OSError, UnicodeDecodeError):
                continue
        if blocks:
            out[package.name] = sorted(set(blocks), key=blocks.index)  # drop repeated boilerplate, keep order
    return out


def write_task(directory: str, *, classes: int = 8, train_per_class: int = 32, validation_per_class: int = 40,
               test_per_class: int = 80, seed: int = 0, min_words: int = 6) -> list[str]:
    """Write the three splits (disjoint comment blocks) under `directory`; return the class names."""
    by_package = package_comments(min_words)
    need = train_per_class + validation_per_class + test_per_class
    chosen = sorted(sorted(by_package, key=lambda p: (-len(by_package[p]), p))[:classes])
    splits: dict[str, list[dict]] = {"train": [], "validation": [], "test": []}
    rng = random.Random(seed)
    for name in chosen:
        blocks = by_package[name][:]
        rng.shuffle(blocks)
        blocks = blocks[:need]
        n_test = min(test_per_class, max(len(blocks) - train_per_class - validation_per_class, len(blocks) // 3))
        n_valid = min(validation_per_class, (len(blocks) - n_test) // 2)
        parts = {"test": blocks[:n_test], "validation": blocks[n_test:n_test + n_valid],
                 "train": blocks[n_test + n_valid:n_test + n_valid + train_per_class]}
        for split, texts in parts.items():
            splits[split] += [{"text": t, "label": name} for t in texts]
    os.makedirs(directory, exist_ok=True)
    for split, rows in splits.items():
        rng.shuffle(rows)
        with open(os.path.join(directory, f"{split}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return chosen


def write(task: BuiltinTask, directory: str, seed: int = 0) -> list[str]:
    """The row's writer: this task keeps the split it had as the demo's first task (per class, shuffled blocks cut
    into test, validation and train), so its rows stay what they were."""
    return write_task(directory, seed=seed, min_words=task.min_words)
