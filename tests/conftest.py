"""Shared fixtures: a small real corpus (the built-in docstrings plus deliberately broken records) and one
prep run over it, reused by the tests that need pair shards. Shared helpers are in tests/helpers.py."""

from __future__ import annotations

import json

import pytest

from process import cpu_sharing
from tests.helpers import run_cli

# This process and every run it starts (CLI runs, 2-rank DeepSpeed jobs) get clozeforge's OpenMP defaults; here,
# before a test module imports torch (process/cpu_sharing.py).
cpu_sharing.apply()

# The slowest files (multi-rank trainings, the demo's stages) first. The suite runs on every core with whole files
# handed out in collection order (pyproject.toml: -n logical --dist loadfile --no-loadscope-reorder), and a long
# file handed out last would run alone at the end; the order is the durations of a 2-worker run on 2 cores.
SLOWEST_FIRST = ("trainer/test_faults.py", "trainer/test_elastic.py", "trainer/test_loop.py", "demo/test_signals.py",
                 "trainer/test_init_from_training.py", "end_to_end/test_bert.py", "pipelines/test_prep.py", "process/test_precision.py", "trainer/test_resume.py",
                 "demo/test_demo.py", "deploy/test_launch.py", "pipelines/test_make_pairs.py", "pipelines/test_portable.py",
                 "pipelines/test_runners.py")


def pytest_collection_modifyitems(config, items) -> None:
    rank = {f"tests/{name}": i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep their order


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
