"""What clusters do to a training job, done for real on CPU with 2 ranks under both launchers (`deepspeed`
and `clozeforge train --nproc-per-node 2`): signals to one rank, to the launcher, kill -9 of the launcher,
two trainers on one --output, damaged and crafted checkpoints, broken data, a full disk.

Each asserts the exit status, the one line a user reads, and, where the run goes on, that the resumed
trajectory equals an uninterrupted run's (1e-5 on each logged loss, as tests/trainer/test_resume.py).
Runs are bounded by steps; the time-outs only stop a hung test."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import psutil
import pytest

from tests import helpers as tests_helpers
from tests.helpers import HANG_S, ROOT, free_port, poll_until, tmpfs, wait_until

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)

STEPS = 60
FLAGS = ["--max-steps", str(STEPS), "--batch-size", "8", "--log-every", "1", "--eval-every", "0", "--num-workers", "1",
         "--warmup-steps", "2", "--lr", "2e-3"]
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}


def command(launcher: str, data: str, run: str, *extra: str) -> list[str]:
    flags = ["--data", data, "--output", run, *FLAGS, *extra]
    if launcher == "deepspeed":
        return [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", str(free_port()),
                "--module", "trainer.pretrain", *flags]
    return [sys.executable, "-m", "clozeforge", "train", "--nproc-per-node", "2", *flags]


def start(launcher: str, data: str, run: str, *extra: str) -> tuple[subprocess.Popen, str]:
    os.makedirs(run + ".logs", exist_ok=True)
    log = os.path.join(run + ".logs", f"{len(os.listdir(run + '.logs'))}")
    with open(log + ".out", "w") as out, open(log + ".err", "w") as err:
        return subprocess.Popen(command(launcher, data, run, *extra), cwd=ROOT, env=ENV, stdout=out, stderr=err), log


def finish(proc: subprocess.Popen, log: str) -> tuple[int, str, str]:
    rc = proc.wait(timeout=HANG_S)
    with open(log + ".out") as out, open(log + ".err") as err:
        return rc, out.read(), err.read()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], check=False, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=HANG_S)


def run_to_end(launcher: str, data: str, run: str, *extra: str) -> tuple[int, str, str]:
    return finish(*start(launcher, data, run, *extra))


def train_losses(run: str) -> dict[int, float]:
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if "split" not in r}  # a re-run step: the last one


def wait_for_steps(run: str, proc: subprocess.Popen, n: int = 2) -> None:
    path = os.path.join(run, "metrics.jsonl")
    wait_until(lambda: os.path.exists(path) and len(train_losses(run)) >= n, f"{n} logged steps", proc)


def ranks_of(proc: subprocess.Popen) -> list[psutil.Process]:
    """The rank processes below a launcher (not the launchers, not the ranks' data-loader workers)."""
    out = []
    for p in psutil.Process(proc.pid).children(recursive=True):
        with_args = " ".join(p.cmdline())
        if "trainer.pretrain" in with_args and "launcher" not in with_args and "clozeforge" not in with_args:
            out.append(p)
    return [p for p in out if p.parent() is None or p.parent().pid not in {q.pid for q in out}]


def gone_within(processes: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """The processes still running (a zombie nobody reaps counts as gone) after up to `timeout` seconds."""
    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    poll_until(lambda: not any(running(p) for p in processes), timeout, every=0.5)
    return [p for p in processes if running(p)]


def latest(run: str) -> str:
    with open(os.path.join(run, "checkpoints", "latest")) as f:
        return f.read().strip()


def assert_continues(reference: dict[int, float], run: str) -> None:
    got = train_losses(run)
    assert sorted(got) == list(range(1, STEPS + 1))
    for step in got:
        assert abs(got[step] - reference[step]) <= 1e-5, (step, got[step], reference[step])


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "error:" in line]


@pytest.fixture(scope="module")
def pairs(prepped) -> str:
    return os.path.join(prepped, "pairs")


@pytest.fixture(scope="module")
def reference(pairs, tmp_path_factory) -> dict[str, dict[int, float]]:
    """Uninterrupted runs, one per launcher (they split CPU threads alike, but each is compared with its own)."""
    out = {}
    for launcher in ("deepspeed", "clozeforge"):
        run = str(tmp_path_factory.mktemp("reference") / launcher)
        rc, _, err = run_to_end(launcher, pairs, run, "--save-every", "1000")
        assert rc == 0, err[-3000:]
        out[launcher] = train_losses(run)
        assert len(set(out[launcher].values())) > 1
    return out


LAUNCHERS = ["deepspeed", "clozeforge"]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigterm_to_one_rank_stops_every_rank_at_one_step(launcher, pairs, reference, tmp_path):
    run = str(tmp_path / "run")
    proc, log = start(launcher, pairs, run, "--save-every", "1000")
    wait_for_steps(run, proc)
    ranks = {p.environ().get("RANK"): p for p in ranks_of(proc)}
    assert sorted(ranks) == ["0", "1"]
    ranks["1"].send_signal(signal.SIGTERM)
    rc, out, err = finish(proc, log)
    assert rc == 0, err[-3000:]
    stopped = max(train_losses(run))
    assert stopped < STEPS and latest(run) == f"step_{stopped:08d}"
    assert f"stopping at step {stopped} of {STEPS}: checkpointing" in out and "rank 1: SIGTERM" in out
    rc, out, err = run_to_end(launcher, pairs, run, "--save-every", "1000")
    assert rc == 0, err[-3000:]
    assert f"at step {stopped}" in out
    assert_continues(reference[launcher], run)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("kill", ["sigterm", "sigkill"])
def test_the_launcher_signalled_or_killed_leaves_a_checkpoint_and_no_orphans(launcher, kill, pairs, reference, tmp_path):
    run = str(tmp_path / "run")
    proc, log = start(launcher, pairs, run, "--save-every", "1000")
    wait_for_steps(run, proc)
    everything = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM if kill == "sigterm" else signal.SIGKILL)
    rc, _, err = finish(proc, log)
    assert not gone_within(everything, 300), "orphans left"
    with open(log + ".out") as f:  # complete now: the ranks wrote to it after the launcher was gone
        out = f.read()
    # Our launcher exits 0 once its ranks have; deepspeed's runner dies of the signal (its launcher and ranks stop).
    expected = 0 if (launcher, kill) == ("clozeforge", "sigterm") else -(signal.SIGTERM if kill == "sigterm" else signal.SIGKILL)
    assert rc == expected, err[-3000:]
    stopped = max(train_losses(run))
    assert stopped < STEPS and latest(run) == f"step_{stopped:08d}"
    assert f"stopping at step {stopped} of {STEPS}: checkpointing" in out
    rc, _, err = run_to_end(launcher, pairs, run, "--save-every", "1000")
    assert rc == 0, err[-3000:]
    assert_continues(reference[launcher], run)


def test_a_second_trainer_on_the_same_output_is_refused(pairs, tmp_path):
    run = str(tmp_path / "run")
    # far more steps than it can take while the second one starts and is refused: still training when signalled
    first, log = start("clozeforge", pairs, run, "--save-every", "1000", "--max-steps", "100000")
    wait_for_steps(run, first)
    rc, _, err = run_to_end("clozeforge", pairs, run)
    assert rc == 2 and "Traceback" not in err
    assert len(error_lines(err)) == 1 and "is in use by another trainer" in error_lines(err)[0], err[-3000:]
    first.send_signal(signal.SIGTERM)
    rc, _, err = finish(first, log)
    assert rc == 0, err[-3000:]
    assert not os.path.exists(os.path.join(run, "run.lock"))
    with open(os.path.join(run, "metrics.jsonl")) as f:
        steps = [r["step"] for r in map(json.loads, f) if "split" not in r]
    assert steps == sorted(set(steps))  # one writer: each step once, in order


@pytest.mark.parametrize(("entry", "args", "status"), [("clozeforge", ["--version"], 0),
                                                   ("trainer.pretrain", ["--data", "/nonexistent", "--output", "x"], 2)])
def test_a_signal_while_the_process_exits_leaves_its_status_alone(entry, args, status, tmp_path):
    """A launcher or scheduler may signal a run just as it completes. Python disables its own handlers while the
    interpreter shuts down (before it clears the modules), so a plain sys.exit would die of the signal (status
    143); the entry points exit through process.exits.exit_with. The signal is sent by an object that the
    shutdown collects, in that window."""
    program = ("import os, runpy, signal, sys\n"
               "class Late:\n    def __del__(self): os.kill(os.getpid(), signal.SIGTERM)\n"
               f"late = Late(); sys.argv = ['{entry}', *{args!r}]; runpy.run_module({entry!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", program], check=False, cwd=tmp_path, env={**ENV, "PYTHONPATH": ROOT},
                          capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == status, done.stderr[-2000:]


def test_a_finished_rank_ends_its_process_group_before_the_interpreter_exits(pairs, tmp_path):
    """The group's native threads end with the run, at ZeRO 2 (ZeRO 3 keeps its model, and the group, to the
    process's end; the process leaves past the interpreter's teardown either way: tests/process/test_exits.py).
    They were kept by DeepSpeed's engine hooks and group table and by torch.distributed.nn's default arguments."""
    found = tests_helpers.rank_threads("trainer.pretrain.main", "trainer.pretrain.shutdown_runtime",
                                       ["--data", pairs, "--output", str(tmp_path / "run"), "--max-steps", "2", "--batch-size", "4",
                                        "--eval-every", "0", "--num-workers", "0", "--zero-stage", "2", "--nproc-per-node", "2"])
    for rank, threads in enumerate(found):
        # the names are still torch's: the check means something
        assert tests_helpers.group_threads(threads["before_teardown"]), (rank, threads)
        assert not tests_helpers.group_threads(threads["at_exit"]), (rank, threads)
        assert threads["past_teardown"], rank


@pytest.fixture(scope="module")
def saved(pairs, tmp_path_factory) -> str:
    """A 2-rank run stopped after 6 steps, with checkpoints at steps 2, 4 and 6."""
    run = str(tmp_path_factory.mktemp("saved") / "run")
    rc, _, err = run_to_end("clozeforge", pairs, run, "--stop-after", "6", "--save-every", "2", "--keep-last", "3")
    assert rc == 0, err[-3000:]
    assert latest(run) == "step_00000006"
    return run


def test_truncated_checkpoint_falls_back_to_the_previous_one(saved, pairs, reference, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(saved, run)
    victim = os.path.join(run, "checkpoints", "step_00000006", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    size = os.path.getsize(victim)
    os.truncate(victim, size // 2)
    rc, out, err = run_to_end("clozeforge", pairs, run, "--save-every", "1000")
    assert rc == 0, err[-3000:]
    warnings = [line for line in err.splitlines() if line.startswith("warning: checkpoint")]
    assert len(warnings) == 1, err[-3000:]
    expected = (f"warning: checkpoint step_00000006 is damaged (zero_pp_rank_1_mp_rank_00_optim_states.pt has {size // 2} bytes, "
                f"the record says {size}); using step_00000004")
    assert warnings == [expected]
    assert "resumed from step_00000004 at step 4" in out
    assert os.path.isdir(os.path.join(run, "checkpoints", "step_00000006.damaged"))
    assert_continues(reference["clozeforge"], run)


def test_altered_checkpoint_is_not_exported(saved, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(saved, run)
    victim = os.path.join(run, "checkpoints", "step_00000006", "mp_rank_00_model_states.pt")
    with open(victim, "r+b") as f:  # same size, one byte changed
        f.seek(os.path.getsize(victim) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    done = cli("-m", "clozeforge", "export", run, "--output", str(tmp_path / "hf"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning: checkpoint step_00000006 is damaged (mp_rank_00_model_states.pt differs from the record (sha256)); using step_00000004" in done.stderr
    assert "(step_00000004, step 4)" in done.stdout
    done = cli("-m", "clozeforge", "export", run, "--tag", "step_00000006", "--output", str(tmp_path / "hf6"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith("step_00000006: mp_rank_00_model_states.pt differs from the record (sha256)")


CRAFT = """
import os, sys, torch
from trainer.checkpoint import integrity

class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[2],))

folder = sys.argv[1]
path = os.path.join(folder, "mp_rank_00_model_states.pt")
state = torch.load(path, weights_only=False)  # our own file, to build the crafted one from
state["module"]["payload"] = Payload()
torch.save(state, path)
integrity.write_record(folder)  # an attacker can rewrite the record too
"""


def test_crafted_pickle_runs_nothing_on_export_or_resume(saved, pairs, tmp_path):
    run, marker = str(tmp_path / "run"), str(tmp_path / "MARKER")
    shutil.copytree(saved, run)
    crafted = cli("-c", CRAFT, os.path.join(run, "checkpoints", "step_00000006"), marker)
    assert crafted.returncode == 0 and not os.path.exists(marker), crafted.stderr[-2000:]
    expected = "mp_rank_00_model_states.pt: refused to load: it holds more than tensors and plain data (unsupported GLOBAL posix.system); nothing in it was run"
    done = cli("-m", "clozeforge", "export", run, "--output", str(tmp_path / "hf"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert expected in done.stderr.strip().splitlines()[-1]
    rc, _, err = run_to_end("clozeforge", pairs, run)
    assert rc == 2 and "Traceback" not in err
    assert len(error_lines(err)) == 1 and expected in error_lines(err)[0], err[-3000:]
    assert not os.path.exists(marker)


@pytest.fixture
def pairs_copy(prepped, tmp_path) -> str:
    """A copy of the prep output this test may break."""
    shutil.copytree(os.path.join(prepped, "pairs"), tmp_path / "prep" / "pairs")
    shutil.copytree(os.path.join(prepped, "vocab"), tmp_path / "prep" / "vocab")
    return str(tmp_path / "prep" / "pairs")


def edit_manifest(pairs: str, edit) -> None:
    path = os.path.join(pairs, "manifest.json")
    with open(path) as f:
        body = json.load(f)
    edit(body)
    with open(path, "w") as f:
        json.dump(body, f)


def first_train_shard(pairs: str) -> str:
    with open(os.path.join(pairs, "manifest.json")) as f:
        return next(s["path"] for s in json.load(f)["shards"] if s["split"] == "train")


@pytest.mark.parametrize("breakage, message", [
    (lambda p: os.remove(os.path.join(p, first_train_shard(p))), "pairs: {shard} is missing; was the prep output changed"),
    (lambda p: edit_manifest(p, lambda b: b["shards"][0].update(rows="many")), 'shards[0].rows must be a non-negative integer, got "many"'),
    (lambda p: edit_manifest(p, lambda b: b.update(max_seq_len="x")), 'max_seq_len must be an integer >= 4, got "x"'),
    (lambda p: edit_manifest(p, lambda b: b["shards"][0].update(path="../outside.arrow")),
     "shards[0].path must be a relative path inside the manifest's directory, got \"../outside.arrow\""),
])
def test_broken_data_fails_at_start_in_one_line(pairs_copy, breakage, message, tmp_path):
    message = message.format(shard=first_train_shard(pairs_copy))
    breakage(pairs_copy)
    run = str(tmp_path / "run")
    rc, _, err = run_to_end("clozeforge", pairs_copy, run)
    assert rc == 2 and "Traceback" not in err
    assert len(error_lines(err)) == 1 and message in error_lines(err)[0], err[-3000:]
    assert not os.path.exists(os.path.join(run, "checkpoints"))
    inspected = cli("-m", "clozeforge", "inspect", pairs_copy)  # the full pre-check reads every shard
    assert inspected.returncode == (1 if "missing" in message else 2) and "Traceback" not in inspected.stderr


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    with tmpfs(mount, "16m"):
        yield str(mount)


def test_full_disk_while_checkpointing_is_one_line_and_leaves_latest_intact(small_disk, pairs):
    """16 MiB holds one checkpoint of the tiny model on 2 ranks (9.6 MiB), not two."""
    from trainer.checkpoint import integrity

    run = os.path.join(small_disk, "run")
    rc, _, err = run_to_end("clozeforge", pairs, run, "--save-every", "2", "--keep-last", "2")
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    lines = error_lines(err)
    assert len(lines) == 1 and "checkpoint step_00000004 not saved:" in lines[0] and "No space left on device" in lines[0], err[-3000:]
    assert lines[0].endswith("`latest` still names step_00000002")
    assert latest(run) == "step_00000002"
    assert integrity.problem(os.path.join(run, "checkpoints", "step_00000002")) is None
    assert not os.path.exists(os.path.join(run, "checkpoints", "step_00000004"))
