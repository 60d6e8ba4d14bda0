"""Shared fixtures: a small real corpus (the built-in docstrings plus deliberately broken records) and one
prep run over it, reused by the tests that need pair shards. Shared helpers are in tests/helpers.py."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli
from trainer import cpu_sharing

# This process and every run it starts (CLI runs, 2-rank DeepSpeed jobs) get clozeforge's OpenMP defaults; here,
# before a test module imports torch (trainer/cpu_sharing.py).
cpu_sharing.apply()

BROKEN_LINES = ['{"text": "unterminated', '["not", "an", "object"]', '{"text": null}', '{"text": "   "}']


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> str:
    from pipelines.documents.builtin_corpus import iter_documents

    directory = tmp_path_factory.mktemp("corpus")
    docs = list(iter_documents(max_bytes=400_000))
    for i in range(2):
        with open(directory / f"part-{i}.jsonl", "w") as f:
            for doc in docs[i::2]:
                f.write(json.dumps(doc) + "\n")
    with open(directory / "broken.jsonl", "w") as f:
        f.write("\n".join(BROKEN_LINES) + "\n")
    return str(directory)


@pytest.fixture(scope="session")
def prepped(corpus_dir, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("prep"))
    result = run_cli(
        "prep", "--input", f"docs={corpus_dir}/*.jsonl", "--output", out, "--vocab-size", "1000",
        "--validation-fraction", "0.1", "--rows-per-shard", "400", "--batch-rows", "64",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out
