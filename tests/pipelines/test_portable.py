"""Prep through Beam's portable Job API, the way Flink and Spark take a job (issue 48): the pipeline goes as a proto to
a job service (apache_beam.runners.portability.local_job_service_main), which runs it on SDK workers in processes
of their own, started by a worker pool (worker_pool_main, --environment_type EXTERNAL). What differs from a Flink or
Spark cluster is the engine behind the job service (Beam's own FnApiRunner instead of Flink's or Spark's), not the
path the job takes. A job there outlives its launcher, as a cloud job does."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from pipelines import prep
from pipelines.outputs import ownership
from tests.helpers import HANG_S, ROOT, digest_tree, free_port, poll_until
from tests.pipelines.conftest import comparable, prep_argv, temporaries

pytestmark = pytest.mark.integration  # starts a job service, a worker pool and its workers


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def job_server(tmp_path_factory):
    """A local job service and an external worker pool; yields prep's Beam options for them."""
    logs = tmp_path_factory.mktemp("job-server")
    # the pool starts each SDK worker as `python -c ...`: this interpreter must be the `python` it finds
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONWARNINGS": "ignore"}
    job_port, pool_port = free_port(), free_port()
    commands = {
        "job-service": [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                        "--port", str(job_port), "--staging_dir", str(logs / "staging")],
        "worker-pool": [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", "--service_port", str(pool_port)],
    }
    servers = {}
    with contextlib.ExitStack() as files:
        try:
            for name, command in commands.items():  # a session each, so that the pool's workers go with it
                log = files.enter_context(open(logs / f"{name}.log", "wb"))
                servers[name] = subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True, stdout=log,
                                                 stderr=subprocess.STDOUT)
            for name, port in (("job-service", job_port), ("worker-pool", pool_port)):
                server = servers[name]
                assert poll_until(lambda p=port, s=server: _listening(p) or s.poll() is not None, timeout=120), name
                assert server.poll() is None, (logs / f"{name}.log").read_text()[-3000:]
            yield ["--runner=PortableRunner", f"--job_endpoint=localhost:{job_port}", "--environment_type=EXTERNAL",
                   f"--environment_config=localhost:{pool_port}"]
        finally:
            for server in servers.values():
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(timeout=60)


def run_file(out) -> dict:
    """--output's run file; {} while there is none or it is being written."""
    try:
        with open(os.path.join(out, ownership.RUN_FILE)) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return {}


@pytest.mark.parametrize("shuffle", ["files", "runner"])
def test_the_portable_job_api_gives_the_default_runners_bytes(default_run, paragraphs_dir, job_server, tmp_path, shuffle):
    """clean/, vocab/, pairs/ and report.json through the Job API and separate worker processes, in both shuffle
    modes, are the default runner's; the run file records the job, ended DONE."""
    out = tmp_path / shuffle
    report = prep.run(prep_argv(paragraphs_dir, out, "--shuffle", shuffle, *job_server))
    assert digest_tree(str(out)) == default_run[2]
    assert comparable(report) == comparable(default_run[1])
    assert temporaries(out) == []
    job = run_file(out)["job"]
    assert job["runner"] == "PortableRunner" and job["endpoint"] == job_server[1].split("=", 1)[1]
    assert job["id"].startswith("job-") and job["state"] == "DONE"


def launch(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-m", "clozeforge", "prep", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def job_state(endpoint: str, job_id: str) -> str:
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        state = beam_job_api_pb2_grpc.JobServiceStub(channel).GetState(beam_job_api_pb2.GetJobStateRequest(job_id=job_id))
    return beam_job_api_pb2.JobState.Enum.Name(state.state)


def test_a_job_that_outlives_its_launcher_keeps_the_output_until_it_is_said_to_have_ended(
        default_run, paragraphs_dir, job_server, tmp_path):
    """Fault 3: Ctrl-C stopped the launcher, not the job, yet prep said to rerun; the rerun removed the running job's
    temporaries (and the job's sweep would have removed the rerun's outputs). Now the run file names the job from
    its submission, the stop message says it goes on and how to stop it, and a rerun is refused in one line until
    --ended-job names it. The job, left alone, completes."""
    out = tmp_path / "out"
    argv = prep_argv(paragraphs_dir, out, *job_server)
    launcher = launch(*argv)
    assert poll_until(lambda: "job" in run_file(out) or launcher.poll() is not None, timeout=HANG_S, every=0.02)
    job = run_file(out)["job"]  # KeyError before: the run file held the settings alone
    launcher.send_signal(signal.SIGINT)
    _, stderr = launcher.communicate(timeout=HANG_S)
    endpoint = job_server[1].split("=", 1)[1]
    assert launcher.returncode == 130 and stderr.strip().splitlines() == [(
        f"clozeforge prep: stopped by SIGINT; PortableRunner job {job['id']} (started {job['started']}) goes on without "
        f"it and writes --output until it ends; to stop it: cancel it on its runner (Flink's or Spark's web UI or CLI; "
        f"the Job API's Cancel at {endpoint}); once it has ended, rerun with --ended-job {job['id']}")], stderr[-3000:]
    assert run_file(out)["job"]["state"] == "RUNNING"

    refused = launch(*argv)
    _, stderr = refused.communicate(timeout=HANG_S)
    assert refused.returncode == 2 and stderr.strip().splitlines() == [(
        f"clozeforge prep: error: --output {out}: PortableRunner job {job['id']} (started {job['started']}) may still be "
        f"writing there (a job goes on when its launcher stops); to stop it: cancel it on its runner (Flink's or "
        f"Spark's web UI or CLI; the Job API's Cancel at {endpoint}); once it has ended, rerun with --ended-job "
        f"{job['id']}")], stderr[-3000:]

    # the job, untouched by the refused rerun, finishes on its own
    assert poll_until(lambda: job_state(endpoint, job["id"]) in ("DONE", "FAILED", "CANCELLED"), timeout=HANG_S)
    assert job_state(endpoint, job["id"]) == "DONE"
    assert digest_tree(str(out)) == default_run[2] and temporaries(out) == []
    again = launch(*argv)  # its launcher never saw it end: the user says so
    assert again.wait(timeout=HANG_S) == 2
    done = launch(*prep_argv(paragraphs_dir, out, "--ended-job", job["id"]))  # the default runner this time
    _, stderr = done.communicate(timeout=HANG_S)
    assert done.returncode == 0, stderr[-3000:]
    assert digest_tree(str(out)) == default_run[2] and "job" not in run_file(out)
