"""I/O errors (a full disk, a permission, an object store's refusal) are one line naming the path and the cause."""

from __future__ import annotations

import errno

import pytest

from pipelines.errors import os_error_in, write_failed
from pipelines.outputs.atomic import put_atomically
from tests.helpers import run_cli, tmpfs


def test_write_failed_names_the_file_and_the_cause():
    e = OSError(errno.ENOSPC, "No space left on device")
    assert str(write_failed("/o/pairs/x.arrow", e)) == "/o/pairs/x.arrow: cannot write (no space left on device, ENOSPC)"


def test_an_error_quoted_by_a_worker_becomes_one_line():
    quoted = RuntimeError("Traceback (most recent call last):\n  File ...\nOSError: [Errno 13] Permission denied: "
                          "'/o/x' [while running 'WriteShards/GlobalShuffle/Spill']")
    assert os_error_in(quoted, "/o") == ("--output /o: I/O error in step WriteShards/GlobalShuffle/Spill: "
                                         "[Errno 13] Permission denied: '/o/x'")
    inner = PermissionError(errno.EACCES, "Permission denied", "/o/report.json")
    try:
        raise RuntimeError("wrapped") from inner
    except RuntimeError as chained:
        assert os_error_in(chained, "/o") == "/o/report.json: cannot write (permission denied, EACCES)"
    assert os_error_in(RuntimeError("something else"), "/o") is None


def test_an_atomic_write_into_a_file_path_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(Exception, match=r"afile/out\.json: cannot write \(.*\)$") as err:
        put_atomically(str(tmp_path / "afile" / "out.json"), b"{}")
    assert "\n" not in str(err.value)


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs with about 32 KiB left; skipped where tmpfs cannot be mounted (needs root or CAP_SYS_ADMIN)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    with tmpfs(disk, "1m"):
        (disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 32 * 1024))
        yield disk


@pytest.mark.integration  # runs the CLI
def test_a_full_disk_is_one_line_naming_the_file(corpus_dir, full_disk):
    out = full_disk / "out"
    result = run_cli("prep", "--input", f"{corpus_dir}/part-0.jsonl", "--output", str(out), "--vocab-size", "500")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"clozeforge prep: error: {out}/") and line.endswith(": cannot write (no space left on device, ENOSPC)")
