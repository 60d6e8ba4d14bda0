"""What a run directory can hand the trainer: checkpoint files checked against their record, loaded with no
code run, and a lock that a second trainer cannot take but a dead one's successor can. Fast: no training."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
import torch

from trainer.checkpoint import integrity
from trainer.checkpoint.safe_load import (
    UntrustedCheckpoint,
    load,
    only_weights,
    refusal,
)
from trainer.run import lock as run_lock


class Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_pickle_is_refused_before_anything_runs(tmp_path):
    marker, path = tmp_path / "MARKER", tmp_path / "model_states.pt"
    torch.save({"module": {"w": torch.ones(2)}, "x": Payload(str(marker))}, path)
    with pytest.raises(UntrustedCheckpoint, match=r"model_states.pt: refused to load: .*\(unsupported GLOBAL posix.system\); nothing in it was run$"):
        load(path)
    assert refusal(str(path)).endswith("(unsupported GLOBAL posix.system); nothing in it was run")
    with only_weights(), pytest.raises(UntrustedCheckpoint):  # what DeepSpeed's own loaders call, weights_only=False or not
        torch.load(path, weights_only=False)
    assert not marker.exists()
    assert torch.load is not load  # restored after the block


def test_deepspeeds_own_classes_load(tmp_path):
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    path = tmp_path / "optim_states.pt"
    torch.save({"loss_scaler": LossScaler(1.0), "zero_stage": ZeroStageEnum.gradients, "t": torch.zeros(3)}, path)
    back = load(path)
    assert refusal(str(path)) is None
    assert back["zero_stage"] is ZeroStageEnum.gradients and back["loss_scaler"].cur_scale == 1.0


def test_integrity_record_names_what_is_wrong(tmp_path):
    folder = tmp_path / "step_00000002"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.pt").write_bytes(b"a" * 100)
    (folder / "sub" / "b.pt").write_bytes(b"b" * 10)
    assert integrity.problem(str(folder)) == "no integrity.json (the save did not finish)"
    integrity.write_record(str(folder))
    assert integrity.problem(str(folder)) is None
    (folder / "a.pt").write_bytes(b"a" * 99 + b"x")
    assert integrity.problem(str(folder)) == "a.pt differs from the record (sha256)"
    (folder / "a.pt").write_bytes(b"a" * 50)
    assert integrity.problem(str(folder)) == "a.pt has 50 bytes, the record says 100"
    (folder / "sub" / "b.pt").unlink()
    (folder / "a.pt").write_bytes(b"a" * 100)
    assert integrity.problem(str(folder)) == os.path.join("sub", "b.pt") + " is missing"
    record = json.loads((folder / "integrity.json").read_text())
    record["files"]["../../etc/passwd"] = {"bytes": 1, "sha256": "0"}
    (folder / "integrity.json").write_text(json.dumps(record))
    assert "outside the checkpoint" in integrity.problem(str(folder))


def test_a_second_trainer_is_refused_and_the_lock_released(tmp_path):
    with run_lock.held(str(tmp_path)):
        body = json.loads((tmp_path / run_lock.LOCK_NAME).read_text())
        assert body["pid"] == os.getpid() and body["host"] == socket.gethostname()
        with pytest.raises(run_lock.RunLocked, match=rf"is in use by another trainer \(pid {os.getpid()} on "):
            run_lock.acquire(str(tmp_path))
    assert not (tmp_path / run_lock.LOCK_NAME).exists()


def test_a_dead_owners_lock_is_taken_over(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True)
    dead = int(gone.stdout)
    (tmp_path / run_lock.LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(), "pid": dead, "started": "then"}))
    said = []
    path = run_lock.acquire(str(tmp_path), log=said.append)
    assert said == [f"{tmp_path}: took over a stale lock (pid {dead} on {socket.gethostname()} since then: pid {dead} on this host is gone)"]
    with open(path) as f:
        assert json.load(f)["pid"] == os.getpid()
    run_lock.release(path)


def test_a_silent_other_hosts_lock_goes_stale_by_its_heartbeat(tmp_path):
    lock = tmp_path / run_lock.LOCK_NAME
    lock.write_text(json.dumps({"host": "elsewhere", "pid": 1, "started": "then"}))
    with pytest.raises(run_lock.RunLocked):
        run_lock.acquire(str(tmp_path), stale_seconds=60)
    old = time.time() - 120
    os.utime(lock, (old, old))
    said = []
    run_lock.release(run_lock.acquire(str(tmp_path), stale_seconds=60, log=said.append))
    assert len(said) == 1 and re.search(r"its heartbeat is 12\d s old\)$", said[0])
