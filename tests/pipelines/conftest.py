"""What the runner tests share (test_runners.py, test_portable.py): a small corpus of real text, the prep flags
that cut it into several files, buckets and shards, and one run of it on the default runner to compare with."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import digest_tree

PREP_FLAGS = ("--vocab-size", "300", "--max-seq-len", "64", "--validation-fraction", "0.2", "--bucket-docs", "12",
              "--rows-per-shard", "30", "--batch-rows", "16", "--progress", "never")
"""Several input files, buckets, and shards per split: something for a split, a retry or a second worker to cut."""


@pytest.fixture(scope="session")
def paragraphs_dir(tmp_path_factory) -> str:
    """120 paragraphs of the built-in docstrings (one a document) in 4 JSON-lines files, one paragraph twice (a
    duplicate_exact drop) and a file of 2 broken records (bad_json, null_text)."""
    from pipelines.documents.builtin_corpus import iter_documents

    found = (p.strip() for d in iter_documents(max_bytes=300_000) for p in d["text"].split("\n\n"))
    paragraphs = list(dict.fromkeys(p for p in found if len(p) >= 200 and ". " in p))[:120]  # docstrings repeat
    assert len(paragraphs) == 120
    directory = tmp_path_factory.mktemp("paragraphs")
    for i in range(4):
        docs = paragraphs[i::4] + ([paragraphs[0]] if i == 3 else [])
        (directory / f"part-{i}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    (directory / "broken.jsonl").write_text('{"text": "cut short\n{"text": null}\n')
    return str(directory)


def prep_argv(corpus: str, out, *extra: str) -> list[str]:
    return ["--input", f"docs={corpus}/*.jsonl", "--output", str(out), *PREP_FLAGS, *extra]


def comparable(report: dict) -> dict:
    """report.json without the flags that say where and how, not what: --output, --shuffle, --ended-job."""
    return {**report, "config": {k: v for k, v in report["config"].items() if k not in ("output", "shuffle", "ended_job")}}


def temporaries(out) -> list[str]:
    """Every temporary under `out`: a `.tmp-*` directory or a `*.tmp-*` file."""
    return sorted(os.path.relpath(os.path.join(folder, name), out) for folder, dirs, files in os.walk(out)
                  for name in dirs + files if ".tmp-" in name)


@pytest.fixture(scope="session")
def default_run(paragraphs_dir, tmp_path_factory) -> tuple[str, dict, dict[str, str]]:
    """(output, report, digests) of prep on the default runner (FnApiRunner, run files)."""
    from pipelines import prep

    out = str(tmp_path_factory.mktemp("default-run"))
    report = prep.run(prep_argv(paragraphs_dir, out))
    digests = digest_tree(out)
    assert report["total"]["dropped"] == {"bad_json": 1, "duplicate_exact": 1, "null_text": 1}
    assert sum(k.startswith("pairs/train-") for k in digests) >= 3 and sum(k.startswith("pairs/validation-") for k in digests) >= 1
    return out, report, digests
