"""One owner and one state per --output (pipelines/outputs/ownership.py): the lock, refusing another run's
outputs, --overwrite removing what the new manifest does not list, and a dead run's leftovers removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import fsspec
import pytest

from pipelines.errors import PrepError
from pipelines.outputs import ownership
from schemas import Manifest
from tests.helpers import ROOT, run_cli

SETTINGS = {"vocab_size": 500, "seed": 1}


def test_a_second_owner_is_refused_while_the_first_holds_the_directory(tmp_path):
    busy = rf"^--output {tmp_path}: in use by prep pid {os.getpid()} on .* since "
    with ownership.owned(str(tmp_path), SETTINGS, overwrite=False), pytest.raises(PrepError, match=busy), \
            ownership.owned(str(tmp_path), SETTINGS, overwrite=False):
        pass
    with ownership.owned(str(tmp_path), SETTINGS, overwrite=False):  # released at the end
        pass


def test_an_object_store_directory_is_locked_by_a_lock_object():
    out = "memory://ownership-test/out"
    busy = r"in use by prep pid .*; wait for it .* delete memory://ownership-test/out/"
    with ownership.owned(out, SETTINGS, overwrite=False), pytest.raises(PrepError, match=busy), \
            ownership.owned(out, SETTINGS, overwrite=False):
        pass
    assert not fsspec.filesystem("memory").exists("/ownership-test/out/.clozeforge.lock")


def test_other_settings_or_unknown_outputs_are_refused_without_overwrite(tmp_path):
    with ownership.owned(str(tmp_path), SETTINGS, overwrite=False):
        pass
    other = {**SETTINGS, "seed": 2}
    with ownership.owned(str(tmp_path), other, overwrite=False):  # a run that failed at once left no output
        pass
    with ownership.owned(str(tmp_path), SETTINGS, overwrite=False):
        (tmp_path / "pairs").mkdir()
    with ownership.owned(str(tmp_path), SETTINGS, overwrite=False):  # the same settings: a rerun
        pass
    with pytest.raises(PrepError, match=r"other settings \(seed\); pass --overwrite"), \
            ownership.owned(str(tmp_path), other, overwrite=False):
        pass
    with ownership.owned(str(tmp_path), other, overwrite=True):
        pass
    unknown = tmp_path / "unknown"
    (unknown / "pairs").mkdir(parents=True)
    with pytest.raises(PrepError, match=r"holds outputs of an earlier run \(pairs\); pass --overwrite"), \
            ownership.owned(str(unknown), SETTINGS, overwrite=False):
        pass


DATAFLOW_JOB = {"runner": "DataflowRunner", "id": "2026-11-28_03_14_15-1234567890", "started": "2026-11-28T11:14:15Z",
                "project": "my-project", "region": "europe-west4", "state": "RUNNING"}
"""What prep records in the run file of a Dataflow job it submitted (pipelines/runners.job_record)."""


def test_a_dataflow_job_that_may_still_run_keeps_its_output_until_it_is_said_to_have_ended(tmp_path, capsys):
    """Fault 3: a rerun into the --output of a Dataflow job whose launcher was stopped removed the running job's
    temporaries (and the job's sweep would then remove the rerun's outputs). Now it is refused in one line, with
    the gcloud command that cancels the job, whatever the settings and --overwrite, until --ended-job names it."""
    from pipelines import prep

    out = tmp_path / "out"
    (out / ".tmp-0123abcd" / "pairs").mkdir(parents=True)  # the running job's run files
    (out / ".tmp-0123abcd" / "pairs" / "x.run").write_bytes(b"r")
    (out / ownership.RUN_FILE).write_text(json.dumps({"settings": SETTINGS, "job": DATAFLOW_JOB}))
    (tmp_path / "a.jsonl").write_text('{"text": "The river ran under the stone bridge. It was cold."}\n')
    argv = ["--input", str(tmp_path / "a.jsonl"), "--output", str(out), "--overwrite", "--progress", "never"]
    assert prep.main(argv) == 2
    job_id = DATAFLOW_JOB["id"]
    assert capsys.readouterr().err.strip().splitlines() == [(
        f"clozeforge prep: error: --output {out}: DataflowRunner job {job_id} (started 2026-11-28T11:14:15Z) may still "
        f"be writing there (a job goes on when its launcher stops); to stop it: gcloud dataflow jobs cancel {job_id} "
        f"--project=my-project --region=europe-west4; once it has ended, rerun with --ended-job {job_id}")]
    assert (out / ".tmp-0123abcd" / "pairs" / "x.run").exists()
    with pytest.raises(PrepError, match=f"rerun with --ended-job {job_id}$"), \
            ownership.owned(str(out), SETTINGS, overwrite=True, ended_job="2026-11-27_00_00_00-1"):
        pass
    with ownership.owned(str(out), SETTINGS, overwrite=False, ended_job=job_id) as claim:
        assert claim.leftovers.paths == (".tmp-0123abcd/",)
    assert json.loads((out / ownership.RUN_FILE).read_text()) == {"settings": SETTINGS}  # no job of its own: a local run
    with ownership.owned(str(out), SETTINGS, overwrite=False):  # free again
        pass


def test_a_run_file_of_an_older_prep_holds_the_settings_alone(tmp_path):
    (tmp_path / ownership.RUN_FILE).write_text(json.dumps(SETTINGS))
    (tmp_path / "pairs").mkdir()
    with ownership.owned(str(tmp_path), SETTINGS, overwrite=False):  # the same settings: a rerun
        pass
    (tmp_path / ownership.RUN_FILE).write_text(json.dumps({**SETTINGS, "seed": 2}))
    with pytest.raises(PrepError, match=r"other settings \(seed\)"), ownership.owned(str(tmp_path), SETTINGS, overwrite=False):
        pass


def test_leftovers_are_removed_and_listed(tmp_path):
    (tmp_path / ".tmp-0123abcd" / "pairs").mkdir(parents=True)
    (tmp_path / ".tmp-0123abcd" / "pairs" / "x.run").write_bytes(b"r" * 1000)
    (tmp_path / "pairs").mkdir()
    (tmp_path / "pairs" / "train-00000-of-00010.arrow.tmp-5678").write_bytes(b"")
    (tmp_path / "pairs" / "train-00000-of-00010.arrow").write_bytes(b"kept")
    with ownership.owned(str(tmp_path), SETTINGS, overwrite=True) as claim:
        leftovers = claim.leftovers
        assert leftovers.paths == (".tmp-0123abcd/", "pairs/train-00000-of-00010.arrow.tmp-5678")
        assert leftovers.bytes == 1000
    assert sorted(os.listdir(tmp_path)) == [".clozeforge-run.json", "pairs"]  # the lock file goes with its run
    assert os.listdir(tmp_path / "pairs") == ["train-00000-of-00010.arrow"]


def test_an_empty_temporary_tree_is_listed_as_a_leftover(tmp_path):
    """A run stopped before it wrote a run file (or after it had read them all) leaves .tmp-<id>/ with nothing in
    it: removed and said, as a tree with files is (before: removed silently, and CI's Ctrl-C test saw the tree
    but no "leftovers" line now and then)."""
    (tmp_path / ".tmp-0123abcd" / "pairs").mkdir(parents=True)
    (tmp_path / ".tmp-4567ef01").mkdir()
    with ownership.owned(str(tmp_path), SETTINGS, overwrite=True) as claim:
        assert claim.leftovers.paths == (".tmp-0123abcd/", ".tmp-4567ef01/") and claim.leftovers.bytes == 0
    assert sorted(os.listdir(tmp_path)) == [".clozeforge-run.json"]


def test_sweep_touches_only_the_run_areas(tmp_path):
    for rel in ("pairs/manifest.json", "pairs/old.arrow", "clean/a.parquet", "vocab/vocab.txt", "vocab/extra.txt",
                "notes.txt", "pairs/manifest.json.tmp-5678"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text("x")
    removed = ownership.sweep(str(tmp_path), ["pairs/manifest.json", "clean/a.parquet"])
    assert sorted(removed) == ["pairs/old.arrow", "vocab/extra.txt"]
    assert (tmp_path / "notes.txt").exists() and (tmp_path / "vocab" / "vocab.txt").exists()
    # another attempt of the final step may be writing it (the next run removes a dead one's)
    assert (tmp_path / "pairs" / "manifest.json.tmp-5678").exists()


def prep_args(corpus: str, out, *extra: str) -> list[str]:
    return ["prep", "--input", corpus, "--output", str(out), "--vocab-size", "500", "--rows-per-shard", "400", *extra]


@pytest.mark.integration  # runs the CLI several times
def test_a_rerun_with_other_settings_is_refused_then_replaces_everything(corpus_dir, tmp_path):
    corpus = f"{corpus_dir}/part-0.jsonl"
    out = tmp_path / "out"
    first = run_cli(*prep_args(corpus, out, "--validation-fraction", "0.2"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert any(name.startswith("validation-") for name in os.listdir(out / "pairs"))
    refused = run_cli(*prep_args(corpus, out, "--validation-fraction", "0"))
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        (f"clozeforge prep: error: --output {out}: holds the outputs of a prep run with other settings "
        "(validation_fraction); pass --overwrite to replace them, or choose another directory")]
    replaced = run_cli(*prep_args(corpus, out, "--validation-fraction", "0", "--overwrite"))
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    manifest = Manifest.read(str(out / "pairs"))
    assert sorted(os.listdir(out / "pairs")) == sorted(["manifest.json", *(s.path for s in manifest.shards)])
    report = json.loads((out / "report.json").read_text())
    removed = report["output"]["replaced_files_removed"]
    assert any(f.startswith("pairs/validation-") for f in removed)
    assert not {f"pairs/{s.path}" for s in manifest.shards} & set(removed)
    again = run_cli(*prep_args(corpus, out, "--validation-fraction", "0"))  # the same settings: no --overwrite needed
    assert again.returncode == 0, again.stderr[-2000:]


@pytest.mark.integration  # a second process holds the lock
def test_two_runs_at_once_the_second_stops_in_one_line(corpus_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys\nfrom pipelines.outputs import ownership\n"
         f"with ownership.owned({str(out)!r}, {{}}, overwrite=False):\n    print('held', flush=True)\n    sys.stdin.read()")],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        second = run_cli(*prep_args(f"{corpus_dir}/part-0.jsonl", out))
        assert second.returncode == 2
        [line] = second.stderr.strip().splitlines()
        assert line.startswith(f"clozeforge prep: error: --output {out}: in use by prep pid {holder.pid} on ")
    finally:
        holder.communicate("")
    assert not (out / "pairs").exists()


@pytest.mark.integration  # kills a real prep process
def test_kill_9_then_rerun_leaves_no_leftovers(corpus_dir, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    args = prep_args(f"{corpus_dir}/part-*.jsonl", out, "--spill-mb", "1")
    victim = subprocess.Popen([sys.executable, "-m", "clozeforge", *args], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # kill it once a shuffle has written a run file (a step of the run, not a time)
        while victim.poll() is None and not any(name.endswith(".run") for _, _, names in os.walk(out) for name in names):
            os.sched_yield()
        assert victim.poll() is None, "prep ended before its first run file was seen"
        os.kill(victim.pid, signal.SIGKILL)
    finally:
        victim.wait()
    temps = [name for name in os.listdir(out) if name.startswith(".tmp-")]
    assert temps, "the killed run left its temporary directory"
    (out / "pairs").mkdir(exist_ok=True)
    (out / "pairs" / "train-00000-of-00010.arrow.tmp-0badf00d").write_bytes(b"")  # a shard cut off mid-write
    rerun = run_cli(*args)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    left = [os.path.relpath(os.path.join(d, n), out) for d, _, names in os.walk(out) for n in names]
    assert not [p for p in left if ownership.is_leftover(p)]
    report = json.loads((out / "report.json").read_text())
    assert set(report["output"]["leftovers_removed"]) >= {f"{temps[0]}/", "pairs/train-00000-of-00010.arrow.tmp-0badf00d"}
    assert "leftovers of an interrupted run" in rerun.stdout
