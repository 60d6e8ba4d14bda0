"""Which kind of Beam runner a prep run is on, and what follows from it: where the workers are, whether the job
outlives the launcher, and how a user stops a job that does.

In:  the pipeline options (--runner; Dataflow's --project and --region; --flink_master, --spark_master_url; the
     portable --job_endpoint) and, once the job is submitted, Beam's PipelineResult.
Out: RUNNERS, one row a kind of runner; `kind_of(options)`, its row; `job_record(result, options)`, what prep
     writes in --output's run file about a job that can outlive its launcher (pipelines/outputs/ownership.py),
     None when it cannot; `describe(job)` and `cancel_hint(job)`, the words of prep's messages about it.

A local runner (FnApiRunner, the DirectRunners, Prism) runs its workers in this process or under it: the job
ends with the launcher, its GroupByKey is held in memory (so prep shuffles through run files,
pipelines/shuffle/README.md), and its progress can be read here. Every other runner (Dataflow; PortableRunner
in front of a Flink or Spark job server; FlinkRunner, SparkRunner) shuffles on disk or in a service, may run a
bundle twice or recompute a stage, and takes a job that goes on when the launcher stops, unless the engine
itself runs under the launcher (FlinkRunner's [auto] master, SparkRunner's local[N], PortableRunner's embed).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable

LOCAL = ("fnapirunner", "directrunner", "direct", "bundlebaseddirectrunner", "switchingdirectrunner", "prismrunner",
         "prism")
"""Runner names (lower case, --runner's last dotted part) whose workers run on this machine, under this process."""


@dataclasses.dataclass(frozen=True)
class RunnerKind:
    name: str
    names: tuple[str, ...]
    """Runner names of this kind (lower case); () for the row that takes every name the others do not."""
    local: bool
    """The workers run under this process: the job ends with the launcher, nothing to record or cancel."""
    place: Callable[[object], dict] = lambda options: {}
    """Where a job of this kind runs (options → the run file's fields that locate it)."""
    cancel: Callable[[dict], str] | None = None
    """How a user stops a job of this kind that its launcher left running (a job record → one instruction)."""
    embedded: Callable[[object], bool] = lambda options: False
    """Whether these options run the engine itself under the launcher (Flink's [auto], Spark's local[4]), so that
    the job ends with it as on a local runner."""


def _dataflow_place(options) -> dict:
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    cloud = options.view_as(GoogleCloudOptions)
    return {"project": cloud.project, "region": cloud.region}


def _flink_master(options) -> str:
    from apache_beam.options.pipeline_options import FlinkRunnerOptions

    return options.view_as(FlinkRunnerOptions).flink_master


def _spark_master(options) -> str:
    from apache_beam.options.pipeline_options import SparkRunnerOptions

    return options.view_as(SparkRunnerOptions).spark_master_url


def _portable_place(options) -> dict:
    from apache_beam.options.pipeline_options import PortableOptions

    return {"endpoint": options.view_as(PortableOptions).job_endpoint}


RUNNERS = (
    RunnerKind("local", LOCAL, local=True),
    RunnerKind("Dataflow", ("dataflowrunner", "testdataflowrunner"), local=False, place=_dataflow_place,
               cancel=lambda job: f"gcloud dataflow jobs cancel {job['id']} --project={job.get('project')} "
                                  f"--region={job.get('region')}"),
    # FlinkRunner and SparkRunner start Beam's job server for their cluster under the launcher; the job runs there
    RunnerKind("Flink", ("flinkrunner",), local=False, place=lambda options: {"master": _flink_master(options)},
               cancel=lambda job: f"cancel it in the Flink web UI at {job.get('master')} (or `flink cancel`)",
               embedded=lambda options: _flink_master(options) in ("[auto]", "[local]")),
    RunnerKind("Spark", ("sparkrunner",), local=False, place=lambda options: {"master": _spark_master(options)},
               cancel=lambda job: f"kill it in the Spark master's web UI of {job.get('master')}",
               embedded=lambda options: (_spark_master(options) or "").startswith("local")),
    # PortableRunner (a Flink or Spark job server, Beam's own), and any runner this table does not know
    RunnerKind("portable", (), local=False, place=_portable_place,
               cancel=lambda job: f"cancel it on its runner (Flink's or Spark's web UI or CLI; the Job API's Cancel at "
                                  f"{job.get('endpoint') or 'its job endpoint'})",
               embedded=lambda options: _portable_place(options)["endpoint"] == "embed"),
)


def runner_name(options) -> str:
    """--runner's class name ('FnApiRunner', 'PortableRunner', ...); Beam's default, DirectRunner, when unset."""
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return "DirectRunner"
    return (runner if isinstance(runner, str) else type(runner).__name__).rsplit(".", 1)[-1]


def kind_of(options) -> RunnerKind:
    name = runner_name(options).lower()
    return next((kind for kind in RUNNERS if name in kind.names), RUNNERS[-1])


def outlives_launcher(options) -> bool:
    """Whether a job submitted with these options goes on when this process stops."""
    kind = kind_of(options)
    return not kind.local and not kind.embedded(options)


def job_record(result, options) -> dict | None:
    """What --output's run file keeps about a submitted job that can outlive this process; None for one that cannot."""
    if not outlives_launcher(options):
        return None
    kind = kind_of(options)
    # Dataflow's result has job_id(); the portable runner's keeps the Job API's id as _job_id
    job_id = result.job_id() if callable(getattr(result, "job_id", None)) else getattr(result, "_job_id", None)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"runner": runner_name(options), "id": str(job_id or "unknown"), "started": started, **kind.place(options),
            "state": "RUNNING"}


def describe(job: dict) -> str:
    return f"{job.get('runner', 'a remote')} job {job.get('id', 'unknown')} (started {job.get('started', '?')})"


def cancel_hint(job: dict) -> str:
    kind = next((k for k in RUNNERS if (job.get("runner") or "").lower() in k.names), RUNNERS[-1])
    return kind.cancel(job) if kind.cancel else ""


def ended(state) -> bool:
    """Whether a job in Beam's PipelineState `state` (a str: 'DONE', 'RUNNING', ...) has stopped for good."""
    from apache_beam.runners.runner import PipelineState

    return PipelineState.is_terminal(str(state))
