"""`clozeforge demo`, the README's first command, end to end on a small built-in corpus.

It runs with what the `prep` and `train` extras install and nothing of `dev`: transformers is hidden from
every process of the run (a sitecustomize on PYTHONPATH puts None in sys.modules, which makes `import
transformers` fail and importlib.util.find_spec return None), as on a machine that installed only those.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers import HANG_S, run_cli

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)


def test_demo_runs_end_to_end_without_dev_packages(tmp_path):
    shadow = tmp_path / "no-transformers"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text("import sys\nsys.modules['transformers'] = None\n")
    work = tmp_path / "demo"
    result = run_cli("demo", "--workdir", str(work), "--corpus-mb", "0.4", "--steps", "12", "--ranks-check-steps", "4",
                     env={"PYTHONPATH": str(shadow)}, timeout=HANG_S)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "transformers is not installed" in result.stdout
    assert "[MASK] 1:" in result.stdout  # the fill-mask example ran on the export
    assert "precision: " in result.stdout  # the trainer said which arithmetic it chose
    for path in ("prep/report.json", "prep/pairs/manifest.json", "run/metrics.jsonl", "run/curves.png", "run-2-ranks/metrics.jsonl",
                 "hf/config.json", "hf/model.safetensors", "hf/tokenizer.json"):
        assert os.path.exists(work / path), path
