"""`clozeforge prep` never imports torch; `clozeforge train` never imports apache_beam (checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import HANG_S, ROOT

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)

PROBE = """
import sys, clozeforge
status = clozeforge.main({argv!r})
assert status == 0, status
leaked = sorted(m for m in sys.modules if m == {forbidden!r} or m.startswith({forbidden!r} + "."))
print("LEAKED", leaked)
"""


def probe(argv: list[str], forbidden: str) -> str:
    code = PROBE.format(argv=argv, forbidden=forbidden)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


def test_prep_never_imports_torch(corpus_dir, tmp_path):
    argv = ["prep", "--input", f"{corpus_dir}/part-0.jsonl", "--output", str(tmp_path / "p"), "--vocab-size", "300"]
    assert probe(argv, "torch") == "LEAKED []"


def test_train_never_imports_apache_beam(prepped, tmp_path):
    argv = ["train", "--data", f"{prepped}/pairs", "--output", str(tmp_path / "r"), "--max-steps", "2", "--num-workers", "0", "--batch-size", "4"]
    assert probe(argv, "apache_beam") == "LEAKED []"


def test_schemas_import_only_pyarrow_and_the_standard_library():
    # whatever `import pyarrow` brings itself (numpy, its Cython runtime, cloudpickle where installed: pyarrow 25
    # registers it) is pyarrow's; anything schemas adds beyond it (fsspec, torch, beam) is a leak
    code = (
        "import sys; import pyarrow; before = set(sys.modules); import schemas; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(m for m in new if m not in sys.stdlib_module_names and m != 'schemas'))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
