"""deploy/dataflow: the prep job builds and serialises for Dataflow offline, and its workers need no torch.

In:  the command that deploy/dataflow/launch.sh prints in dry-run mode (fake project, region and gs://
     buckets; the input glob is a local temporary file because ReadCorpus expands globs at build time).
Out: assertions on the job that Beam's own DataflowRunner builds from those arguments with --dry_run=True.

What is covered, offline: the runner's option checks (runner v2 experiments), its side-input and combiner
rewrites and PTransform overrides, deterministic key coders for every GroupByKey, the portable pipeline
proto with our container as its only Docker environment, combiner packing and stage sorting,
`validate_pipeline_graph`, the proto's byte round trip, and every pickled DoFn and CombineFn loading in a
fresh interpreter where torch cannot be imported (what a worker does first). The Dataflow client classes
(`apiclient`) need the Google Cloud libraries of apache-beam[gcp], which the `dev` and `dataflow` extras
install, so CI runs the real dry run too; where they are missing, a stand-in `apiclient` still makes the
checks of `apiclient.Job` that need no Google client.
Not covered: staging the proto to GCS, the Dataflow API request and the service's validation,
credentials, the image actually starting, and reading or writing gs:// data.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

beam = pytest.importorskip("apache_beam")
fsspec = pytest.importorskip("fsspec")

from apache_beam.options.pipeline_options import (
    DebugOptions,
    GoogleCloudOptions,
    PipelineOptions,
    WorkerOptions,
)
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pipelines import prep
from pipelines.documents.builtin_corpus import iter_documents
from tests.helpers import HANG_S

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)

ROOT = Path(__file__).resolve().parents[2]
DATAFLOW = ROOT / "deploy" / "dataflow"
PROJECT = "clozeforge-offline-test"
IMAGE = f"us-central1-docker.pkg.dev/{PROJECT}/clozeforge/prep:test"
OUTPUT = f"gs://{PROJECT}/prep"
STAGES = ("ReadCorpus", "CleanDocuments", "Deduplicate", "CountWords", "LearnVocabulary", "Tokenize",
          "MakeNspPairs", "WriteShards", "Finalize")
TRAINER_ONLY = {"torch", "deepspeed", "triton"}
APICLIENT = "apache_beam.runners.dataflow.internal.apiclient"


def launch_dry_run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    base = {**os.environ, "PROJECT": PROJECT, "REGION": "us-central1", "BUCKET": f"gs://{PROJECT}/dataflow",
            "IMAGE": IMAGE, "PYTHON": sys.executable, "DRY_RUN": "1"}
    return subprocess.run(["bash", str(DATAFLOW / "launch.sh"), *args], check=False, env={**base, **env},
                          capture_output=True, text=True, timeout=60)


class GcsTouched(AssertionError):
    pass


def recording_gcs(touched: list[str]) -> type:
    """An fsspec filesystem for gs:// that records and refuses every use: building the graph must not need one."""

    class RefusingGCS(fsspec.AbstractFileSystem):
        protocol = ("gs", "gcs")

        def __init__(self, *args, **kwargs):
            touched.append(f"{args} {kwargs}")
            raise GcsTouched("building the graph opened a gs:// filesystem")

    return RefusingGCS


def offline_apiclient() -> types.ModuleType:
    """Stands in for Beam's Dataflow `apiclient` module when the Google Cloud client libraries are absent.

    It makes the checks of `apiclient.Job.__init__` that need no Google client (the pipeline graph
    validation and the required options) and keeps the options and the proto for the assertions.
    """
    from apache_beam.runners.pipeline_utils import validate_pipeline_graph

    module = types.ModuleType(APICLIENT)

    class Job:
        def __init__(self, options, proto_pipeline):
            validate_pipeline_graph(proto_pipeline)
            cloud = options.view_as(GoogleCloudOptions)
            missing = [name for name in ("project", "job_name", "temp_location") if not getattr(cloud, name)]
            if missing:
                raise ValueError(f"Missing required configuration parameters: {missing}")
            self.options, self.proto_pipeline = options, proto_pipeline

    module.Job = Job
    module.get_container_image_from_options = lambda options: options.view_as(WorkerOptions).sdk_container_image
    return module


def real_apiclient_available() -> bool:
    try:
        __import__(APICLIENT)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("corpus")
    with open(directory / "part-0.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(doc) + "\n" for doc in iter_documents(20_000))
    return directory


@pytest.fixture(scope="module")
def submit_argv(corpus) -> list[str]:
    """The argv of `clozeforge prep` exactly as launch.sh would run it."""
    done = launch_dry_run(["--input", f"docs={corpus}/*.jsonl", "--output", OUTPUT, "--vocab-size", "500"])
    assert done.returncode == 0, done.stderr
    argv = shlex.split(done.stdout.strip().splitlines()[-1])
    assert argv[:4] == [sys.executable, "-m", "clozeforge", "prep"]
    return argv[4:]


def build_job(argv: list[str], use_real_apiclient: bool):
    """Build prep's graph the way `prep.run` does, under DataflowRunner with --dry_run=True; return its Job."""
    from apache_beam.runners.dataflow import internal

    touched: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        registry = importlib.import_module("fsspec.registry")._registry  # fsspec.registry is a read-only view
        mp.setitem(registry, "gs", recording_gcs(touched))
        mp.setitem(registry, "gcs", recording_gcs(touched))
        if not use_real_apiclient:
            stub = offline_apiclient()
            mp.setitem(sys.modules, APICLIENT, stub)
            mp.setattr(internal, "apiclient", stub, raising=False)
        config, beam_args = prep.parse([*argv, "--dry_run=True"])  # every launch-script flag is known
        pipeline = beam.Pipeline(options=PipelineOptions(beam_args, save_main_session=False))
        prep.build(pipeline, config)
        result = pipeline.run()
    assert touched == [], "building or submitting the graph touched the gs:// output"
    return result.job


@pytest.fixture(scope="module")
def job(submit_argv):
    return build_job(submit_argv, use_real_apiclient=False)


def top_level_names(proto) -> set[str]:
    return {t.unique_name.split("/")[0] for t in proto.components.transforms.values()}


def test_launch_script_sets_what_dataflow_needs(submit_argv):
    options = PipelineOptions(submit_argv)
    cloud, worker = options.view_as(GoogleCloudOptions), options.view_as(WorkerOptions)
    assert options.view_as(beam.options.pipeline_options.StandardOptions).runner == "DataflowRunner"
    assert (cloud.project, cloud.region) == (PROJECT, "us-central1")
    assert cloud.temp_location.startswith("gs://") and cloud.staging_location.startswith("gs://")
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", cloud.job_name), cloud.job_name
    assert worker.sdk_container_image == IMAGE
    assert worker.machine_type and worker.max_num_workers >= 1
    assert "use_runner_v2" in options.view_as(DebugOptions).experiments


def test_launch_script_refuses_missing_settings_and_lets_user_flags_win():
    done = launch_dry_run(["--input", "x", "--output", OUTPUT], IMAGE="", BUCKET="")
    assert done.returncode == 2 and "BUCKET IMAGE" in done.stderr
    done = launch_dry_run(["--input", "x", "--output", OUTPUT], BUCKET="/tmp/not-gcs")
    assert done.returncode == 2 and "gs://" in done.stderr
    done = launch_dry_run(["--input", "x", "--output", OUTPUT, "--machine_type=n2-standard-16"])
    assert PipelineOptions(shlex.split(done.stdout)[4:]).view_as(WorkerOptions).machine_type == "n2-standard-16"


def test_job_has_every_stage_and_only_our_container(job):
    proto = job.proto_pipeline
    missing = [name for name in STAGES if name not in top_level_names(proto)]
    assert not missing, f"stages missing from the Dataflow job: {missing}"
    environments = proto.components.environments
    assert {e.urn for e in environments.values()} == {common_urns.environments.DOCKER.urn}
    for env in environments.values():
        assert beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image == IMAGE
    used = {t.environment_id for t in proto.components.transforms.values() if t.environment_id}
    assert used and used <= set(environments)
    assert "use_runner_v2" in job.options.view_as(DebugOptions).experiments


def test_job_proto_round_trips_and_loads_on_a_torchless_worker(job, tmp_path):
    proto = job.proto_pipeline
    data = proto.SerializeToString()
    assert beam_runner_api_pb2.Pipeline.FromString(data) == proto
    components = proto.components
    gbks = [t for t in components.transforms.values() if t.spec.urn == common_urns.primitives.GROUP_BY_KEY.urn]
    assert gbks, "prep shuffles (dedup, word counts, pairs, shards): the job must contain GroupByKeys"
    for pcoll in components.pcollections.values():
        assert pcoll.coder_id in components.coders
    # A worker's first act: unpickle every DoFn and CombineFn. Here that happens in a fresh interpreter
    # where `import torch` fails, with none of the launcher's state.
    path = tmp_path / "pipeline.pb"
    path.write_bytes(data)
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", UNPICKLE_ON_A_WORKER, str(path)], check=False, capture_output=True, text=True,
                          timeout=HANG_S, cwd=tmp_path, env={**os.environ, "PYTHONPATH": pythonpath})
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["dofns"] >= len(STAGES) and loaded["combinefns"] >= 1
    assert any(m.startswith("pipelines.") for m in loaded["modules"])
    assert not [m for m in loaded["modules"] if m.split(".")[0] == "trainer"]


UNPICKLE_ON_A_WORKER = r"""
import json, sys
for name in ("torch", "deepspeed"):
    sys.modules[name] = None  # any import of them now raises ImportError
from apache_beam.internal import pickler
from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
proto = pb.Pipeline.FromString(open(sys.argv[1], "rb").read())
combines = {common_urns.composites.COMBINE_PER_KEY.urn, common_urns.composites.COMBINE_GLOBALLY.urn,
            common_urns.combine_components.COMBINE_PER_KEY_PRECOMBINE.urn,
            common_urns.combine_components.COMBINE_PER_KEY_MERGE_ACCUMULATORS.urn,
            common_urns.combine_components.COMBINE_PER_KEY_EXTRACT_OUTPUTS.urn}
dofns = combinefns = 0
for t in proto.components.transforms.values():
    if t.spec.urn == common_urns.primitives.PAR_DO.urn:
        fn = pb.ParDoPayload.FromString(t.spec.payload).do_fn
        if fn.urn == python_urns.PICKLED_DOFN_INFO:
            pickler.loads(fn.payload)
            dofns += 1
    elif t.spec.urn in combines:
        fn = pb.CombinePayload.FromString(t.spec.payload).combine_fn
        if fn.urn == python_urns.PICKLED_COMBINE_FN:
            pickler.loads(fn.payload)
            combinefns += 1
mods = sorted(m for m in sys.modules if m.split(".")[0] in ("pipelines", "schemas", "trainer"))
print(json.dumps({"dofns": dofns, "combinefns": combinefns, "modules": mods}))
"""


def transform_names(proto) -> set[str]:
    return {t.unique_name for t in proto.components.transforms.values()}


def test_job_shuffles_through_dataflow_and_splits_its_reads(job, submit_argv):
    """On Dataflow (--shuffle auto) every shuffle is Beam's GroupByKey and no step writes run files; large
    files are read in ranges; the word counts are summed and pruned before the learner; and --shuffle files
    still builds (run files on gs://)."""
    names = transform_names(job.proto_pipeline)
    for step in ("ReadCorpus/PlanSplits", "ReadCorpus/CountNewlines", "ReadCorpus/RangesPerFile", "CountWords/SumCounts",
                 "CountWords/Histogram", "CountWords/Prune", "MakeNspPairs", "WriteShards"):
        assert any(n == step or n.startswith(step + "/") for n in names), step
    assert any(n.endswith("/GroupByRange") for n in names)  # GroupIntoRanges on GroupByKey (buckets, shards)
    assert not [n for n in names if "/Spill" in n], "run files on a runner with a disk-backed shuffle"
    files_job = build_job([*submit_argv, "--shuffle", "files"], use_real_apiclient=False)
    names = transform_names(files_job.proto_pipeline)
    assert any(n.startswith("CountWords/SpillCounts") for n in names) and not any(n.endswith("/GroupByRange") for n in names)


@pytest.mark.skipif(not real_apiclient_available(), reason="apache-beam[gcp] client libraries not installed")
def test_real_dataflow_dry_run(submit_argv):
    job = build_job(submit_argv, use_real_apiclient=True)
    assert not [name for name in STAGES if name not in top_level_names(job.proto_pipeline)]
    assert job.proto.name == job.options.view_as(GoogleCloudOptions).job_name
    assert job.proto.type_.name == "JOB_TYPE_BATCH"


# --- what the workers install ---------------------------------------------------------------------------


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def pip_install_args(instructions: list[tuple[str, str]]) -> list[str]:
    words = []
    for kind, args in instructions:
        if kind == "RUN":
            for command in re.split(r"&&|;", args):
                tokens = shlex.split(command)
                if tokens[:2] == ["pip", "install"] or tokens[:4] == ["python", "-m", "pip", "install"]:
                    words += [t for t in tokens[tokens.index("install") + 1:] if not t.startswith("-")]
    return words


def test_worker_image_is_beam_sdk_with_prep_extra_and_no_torch():
    instructions = dockerfile_instructions(DATAFLOW / "Dockerfile")
    args = {k: v for kind, a in instructions if kind == "ARG" and "=" in a for k, v in [a.split("=", 1)]}
    assert args["PYTHON_VERSION"] == "3.11" and re.fullmatch(r"\d+\.\d+\.\d+", args["BEAM_VERSION"])
    base = next(a for kind, a in instructions if kind == "FROM")
    resolved = base.replace("${PYTHON_VERSION}", args["PYTHON_VERSION"]).replace("${BEAM_VERSION}", args["BEAM_VERSION"])
    assert resolved == f"apache/beam_python3.11_sdk:{args['BEAM_VERSION']}"
    installs = pip_install_args(instructions)
    assert "apache-beam[gcp]==${BEAM_VERSION}" in installs, installs
    project = [w for w in installs if w.startswith(".[")]
    assert project and "prep" in project[0][2:-1].split(",")
    assert not [w for w in installs if canonicalize_name(re.split(r"[\[<>=!~; ]", w)[0]) in TRAINER_ONLY]


def test_build_image_script_matches_the_submitting_python(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "DRY_RUN": "1"}
    image = "us-central1-docker.pkg.dev/p/clozeforge/prep:1"
    done = subprocess.run(["bash", str(DATAFLOW / "build_image.sh"), image], env=env, check=False, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    build, push = (shlex.split(line) for line in done.stdout.strip().splitlines())
    assert build[:2] == ["docker", "build"] and build[-1] == str(ROOT) and build[build.index("--tag") + 1] == image
    assert build[build.index("--file") + 1] == str(DATAFLOW / "Dockerfile")
    build_args = dict(build[i + 1].split("=", 1) for i, word in enumerate(build) if word == "--build-arg")
    assert build_args == {"PYTHON_VERSION": f"{sys.version_info.major}.{sys.version_info.minor}", "BEAM_VERSION": beam.__version__}
    assert push == ["docker", "push", image]
    copied = [src for kind, a in dockerfile_instructions(DATAFLOW / "Dockerfile") if kind == "COPY" for src in a.split()[:-1]]
    ignore = set((DATAFLOW / "Dockerfile.dockerignore").read_text().splitlines())
    assert all({f"!{src}", f"!{src}/**"} & ignore for src in copied), "a COPY source is excluded from the build context"


def requirement_closure(requirements: list[str]) -> dict[str, str | None]:
    """Every distribution `requirements` pull in, transitively, resolved against this environment.

    Maps canonical name to installed version (None when not installed). Extras are followed, and markers
    are evaluated for this interpreter, as pip would for an install here.
    """
    found: dict[str, str | None] = {}
    seen: set[tuple[str, frozenset]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name, extras = canonicalize_name(req.name), frozenset(req.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
            continue
        found[name] = dist.version
        for spec in dist.requires or []:
            child = Requirement(spec)
            if child.marker is None or any(child.marker.evaluate({"extra": e}) for e in extras | {""}):
                todo.append(child)
    return found


def test_prep_extra_pulls_in_beam_and_never_torch():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = {canonicalize_name(Requirement(r).name) for r in extras["prep"] + extras["gcs"]}
    assert "apache-beam" in named and not named & TRAINER_ONLY
    closure = requirement_closure(extras["prep"])
    assert closure.get("apache-beam"), "apache-beam must be installed for this test"
    assert [n for n, v in closure.items() if v is None] == [], "prep's dependency closure is not fully installed here"
    pulled = sorted(n for n in closure if n in TRAINER_ONLY or n.startswith("nvidia-"))
    assert pulled == [], f"the prep extra pulls trainer dependencies into Dataflow workers: {pulled}"
