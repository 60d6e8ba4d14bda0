"""What several test modules share: the repository root, the CLI as a user runs it, a free port, the default
masker for a manifest, the training pairs of a prep output, and the identity of a batch's rows. Fixtures live in conftest.py; helpers here."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


HANG_S = 3600
"""How long a child process may run before a test calls it hung: a guard against hangs, never a speed
limit (a busy machine makes everything slower, and no test may fail for that)."""


def run_cli(*args: str, timeout: int = HANG_S, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m clozeforge ARGS` the way a user would; the output is kept for assertions."""
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    return subprocess.run([sys.executable, "-m", "clozeforge", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=full_env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def masker_for(manifest):
    """The default BERT masker for a manifest's vocabulary."""
    from trainer.masking import Masker, MaskingConfig

    return Masker.for_vocabulary(MaskingConfig(), manifest.read_vocab_tokens(), manifest.special_tokens["[MASK]"])


def row_keys(batch: dict) -> list[tuple]:
    """An identity for each row of a masked batch: its unmasked ids ([CLS] A [SEP] B [SEP]), the masked
    positions put back from the labels."""
    ids = batch["input_ids"].clone()
    for row in range(ids.shape[0]):
        keep = batch["mlm_labels"][row] != -100
        ids[row, batch["mlm_positions"][row][keep]] = batch["mlm_labels"][row][keep]
    return [tuple(r[m.bool()].tolist()) for r, m in zip(ids, batch["attention_mask"])]


def train_rows(url: str, source: str | None = None) -> Counter:
    """The training pairs of the prep output at `url` (of one named source, or all) as the rows the trainer
    feeds the model ([CLS] A [SEP] B [SEP]), counted."""
    import fsspec
    import pyarrow as pa

    from schemas import Manifest

    manifest, rows = Manifest.read(url), Counter()
    s = manifest.special_tokens
    for shard in manifest.split_shards("train"):
        with fsspec.open(manifest.resolve(shard.path), "rb") as f:
            table = pa.ipc.open_file(pa.BufferReader(f.read())).read_all()
        for a, b, src in zip(*(table.column(n).to_pylist() for n in ("tokens_a", "tokens_b", "source"))):
            if source is None or src == source:
                rows[(s["[CLS]"], *a, s["[SEP]"], *b, s["[SEP]"])] += 1
    return rows


@contextlib.contextmanager
def tmpfs(path, size: str):
    """A tmpfs of `size` (mount's spelling: 1m, 16m) mounted at the existing directory `path` for the block, to
    fill as a full disk; the test is skipped, with the reason, where one cannot be mounted (needs root or
    CAP_SYS_ADMIN)."""
    import pytest

    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or 'not root'}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def wait_for(condition, proc: subprocess.Popen, what: str, bound_s: float = HANG_S, poll_s: float = 0.2) -> None:
    """Poll `condition()` until it holds; fail loudly, naming `what`, if `proc` exits first or `bound_s` passes
    (a guard against hangs, as HANG_S: the test itself is bounded by steps)."""
    import time

    deadline = time.monotonic() + bound_s
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the process exited with status {proc.returncode} before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {bound_s:.0f} s")
        time.sleep(poll_s)
