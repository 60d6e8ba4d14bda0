"""deploy/deepspeed: a real 2-rank CPU job through launch.sh, and every other cluster file checked offline.

In:  a ~100 KB corpus from the built-in docstrings, turned into pairs by `python -m pipelines.prep`; the
     scripts, presets, manifest and Dockerfile under deploy/deepspeed/.
Out: a checkpoint from DeepSpeed ZeRO on 2 CPU ranks started by launch.sh (the one test that trains);
     the commands that launch.sh (hostfile mode) and slurm.sbatch print in dry-run mode, parsed by the
     DeepSpeed launcher's and torchrun's own argument parsers, and their trainer flags by the trainer's;
     the presets merged over the generated config and validated by DeepSpeed's config classes; the
     PyTorchJob as torchrun will see it through the operator's PET_* variables.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("deepspeed")

from deepspeed.launcher.runner import fetch_hostfile  # noqa: E402
from deepspeed.launcher.runner import parse_args as deepspeed_parse_args  # noqa: E402
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402
from torch.distributed.run import get_args_parser as torchrun_parser  # noqa: E402

from pipelines.documents.builtin_corpus import iter_documents  # noqa: E402
from tests.helpers import HANG_S, free_port  # noqa: E402
from trainer.builders import deepspeed_config  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.pretrain import config_from_args  # noqa: E402
from trainer.pretrain import parser as trainer_parser  # noqa: E402

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)

ROOT = Path(__file__).resolve().parents[2]
DEEPSPEED = ROOT / "deploy" / "deepspeed"
PRESETS = sorted((DEEPSPEED / "configs").glob("*.json"))
# Launcher settings a developer's shell may export; the tests pass their own.
LAUNCH_ENV = ("DRY_RUN", "HOSTFILE", "NUM_GPUS", "NUM_NODES", "MASTER_ADDR", "MASTER_PORT", "LAUNCHER", "DEEPSPEED", "GPUS_PER_NODE")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV and not k.startswith(("SLURM_", "PET_"))}
    # The launcher executables (deepspeed, torchrun) live next to this interpreter, on PATH or not.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**env, **extra}


def run_script(script: Path, args: list[str], timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], cwd=ROOT, env=clean_env(**env), capture_output=True, text=True, timeout=timeout)


def printed_command(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0, done.stderr
    return shlex.split(done.stdout.strip().splitlines()[-1])


def trainer_flags_parse(flags: list[str]) -> TrainConfig:
    return config_from_args(trainer_parser().parse_args(flags))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("prep")
    corpus = root / "corpus.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for doc in iter_documents(100_000):
            f.write(json.dumps(doc) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.prep", "--input", str(corpus), "--output", str(root / "out"),
         "--vocab-size", "500", "--validation-fraction", "0.1"],
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=HANG_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (root / "out" / "pairs" / "manifest.json").is_file()
    return root / "out" / "pairs"


def test_launch_script_trains_two_cpu_ranks_to_a_checkpoint(pairs, tmp_path):
    run = tmp_path / "run"
    steps = 5
    done = run_script(
        DEEPSPEED / "launch.sh",
        ["--num-gpus", "2", "--master-port", str(free_port()), "--",
         "--data", str(pairs), "--output", str(run), "--max-steps", str(steps), "--batch-size", "8", "--num-workers", "0",
         "--deepspeed-config", str(DEEPSPEED / "configs" / "cpu-fp32.json")],
        timeout=HANG_S,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    tag = f"step_{steps:08d}"
    checkpoints = run / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == tag
    # One ZeRO optimizer partition per rank: both ranks took part.
    partitions = sorted(p.name for p in (checkpoints / tag).glob("*optim_states.pt"))
    assert len(partitions) == 2 and all(f"zero_pp_rank_{r}_" in p for r, p in enumerate(partitions)), partitions
    recorded = json.loads((run / "train_config.json").read_text())
    assert recorded["world_size"] == 2
    assert recorded["deepspeed_config"].endswith("cpu-fp32.json")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r.get("split") != "validation"][-1]
    assert last["step"] == steps and 0 < last["loss"] < 100


def test_launch_script_dry_run_for_a_hostfile_cluster(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text((DEEPSPEED / "hostfile.example").read_text())
    trainer = ["--data", "gs://bucket/prep/pairs", "--output", "/shared/runs/base", "--model", "base",
               "--deepspeed-config", str(DEEPSPEED / "configs" / "zero2-bf16.json"), "--precision", "bf16"]
    argv = printed_command(run_script(
        DEEPSPEED / "launch.sh",
        ["--hostfile", str(hostfile), "--num-nodes", "2", "--master-addr", "gpu-node-1", "--launcher", "openmpi", *trainer],
        DRY_RUN="1",
    ))
    assert argv[0] == "deepspeed"
    args = deepspeed_parse_args(argv[1:])
    assert (args.hostfile, args.num_nodes, args.master_addr, args.master_port, args.launcher) == (str(hostfile), 2, "gpu-node-1", 29500, "openmpi")
    assert args.module and args.user_script == "trainer.pretrain" and args.user_args == trainer
    assert trainer_flags_parse(args.user_args).zero_stage_for(16) == 2  # --zero-stage auto on 16 ranks
    assert dict(fetch_hostfile(str(hostfile))) == {"gpu-node-1": 8, "gpu-node-2": 8}
    # --dry-run and DRY_RUN=1 print the same command; the environment supplies missing options.
    same = printed_command(run_script(DEEPSPEED / "launch.sh", ["--dry-run", "--num-gpus", "4", *trainer], MASTER_PORT="31000"))
    assert same == ["deepspeed", "--num_gpus", "4", "--master_port", "31000", "--module", "trainer.pretrain", *trainer]


@pytest.mark.parametrize("args, message", [
    (["--hostfile", "/nonexistent/hostfile", "--data", "x"], "not found"),
    (["--num-nodes", "2", "--data", "x"], "needs --hostfile"),
    (["--num-gpus", "two", "--data", "x"], "positive integers"),
    (["--num-gpus", "2"], "no trainer flags"),
])
def test_launch_script_rejects_bad_options(args, message):
    done = run_script(DEEPSPEED / "launch.sh", args, DRY_RUN="1")
    assert done.returncode == 2 and message in done.stderr


def test_slurm_script_dry_run_builds_one_torchrun_per_node(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    scontrol = fake_bin / "scontrol"  # expands SLURM_JOB_NODELIST as the real one would for gpu[01-02]
    scontrol.write_text('#!/usr/bin/env bash\n[[ "$1 $2 $3" == "show hostnames gpu[01-02]" ]] && printf "gpu01\\ngpu02\\n"\n')
    scontrol.chmod(0o755)
    trainer = ["--data", "gs://bucket/prep/pairs", "--output", "/shared/runs/base", "--max-steps", "100"]
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_GPUS_ON_NODE": "4"}
    env = {**slurm, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "DRY_RUN": "1"}
    argv = printed_command(run_script(DEEPSPEED / "slurm.sbatch", trainer, **env))
    split = argv.index("-m")  # srun ... PYTHON -m torch.distributed.run ...
    assert argv[0] == "srun" and "--ntasks-per-node=1" in argv[:split]
    assert argv[split + 1] == "torch.distributed.run"
    args = torchrun_parser().parse_args(argv[split + 2:])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == ("2", "4", "c10d", "gpu01:29500", "4242")
    assert args.module and args.training_script == "trainer.pretrain" and args.training_script_args == trainer
    trainer_flags_parse(args.training_script_args)
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=?(\S*)", (DEEPSPEED / "slurm.sbatch").read_text(), re.M))
    assert directives["ntasks-per-node"] == "1"  # torchrun, not srun, starts the per-GPU ranks
    outside = run_script(DEEPSPEED / "slurm.sbatch", trainer, DRY_RUN="1")
    assert outside.returncode == 2 and "not inside a SLURM allocation" in outside.stderr


def test_pytorchjob_runs_torchrun_with_the_operator_environment(monkeypatch):
    job = yaml.safe_load((DEEPSPEED / "pytorchjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"} and replicas["Master"]["replicas"] == 1
    containers = {role: spec["template"]["spec"]["containers"][0] for role, spec in replicas.items()}
    master = containers["Master"]
    for role, container in containers.items():
        assert container["name"] == "pytorch", "the operator injects its environment into the container named pytorch"
        for key in ("image", "command", "args", "resources", "volumeMounts"):
            assert container[key] == master[key], f"{role} differs from Master in {key}"
    nproc = job["spec"]["nprocPerNode"]
    assert str(master["resources"]["limits"]["nvidia.com/gpu"]) == nproc
    assert master["command"][:3] == ["python", "-m", "torch.distributed.run"]
    # torchrun takes its topology from the PET_* variables the operator sets on every pod.
    for name, value in {"PET_NNODES": "2", "PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": "1",
                        "PET_MASTER_ADDR": "clozeforge-pretrain-master-0", "PET_MASTER_PORT": "23456"}.items():
        monkeypatch.setenv(name, value)
    args = torchrun_parser().parse_args(master["command"][3:] + master["args"])
    assert (args.nnodes, args.nproc_per_node, args.node_rank, args.master_addr, args.master_port) == ("2", nproc, 1, "clozeforge-pretrain-master-0", 23456)
    assert args.module and args.training_script == "trainer.pretrain"
    config = trainer_flags_parse(args.training_script_args)
    # The run directory must be on the shared volume, the preset inside the image (WORKDIR /opt/clozeforge).
    mounts = {m["name"]: m["mountPath"] for m in master["volumeMounts"]}
    volumes = {v["name"]: v for v in replicas["Master"]["template"]["spec"]["volumes"]}
    assert config.output.startswith(mounts["runs"] + "/") and "persistentVolumeClaim" in volumes["runs"]
    assert config.deepspeed_config.startswith("/opt/clozeforge/")
    assert (ROOT / config.deepspeed_config.removeprefix("/opt/clozeforge/")).is_file()
    assert config.data.startswith(("gs://", "s3://"))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_preset_merges_over_the_generated_config_and_deepspeed_accepts_it(preset):
    body = json.loads(preset.read_text())
    # Batch sizes come from --batch-size/--grad-accum, the optimizer and schedule from the trainer itself.
    owned_by_flags = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer", "scheduler"}
    assert not owned_by_flags & set(body), f"{preset.name} overrides what the trainer's flags decide"
    config = TrainConfig(data="pairs", output="run", batch_size=16, grad_accum=2, deepspeed_config=str(preset))
    generated = deepspeed_config(TrainConfig(data="pairs", output="run", batch_size=16, grad_accum=2), "fp32")
    merged = deepspeed_config(config, "fp32")
    for key, value in generated.items():
        assert isinstance(merged[key], type(value)), f"{preset.name} changes the type of {key}"
    assert (merged["train_micro_batch_size_per_gpu"], merged["gradient_accumulation_steps"]) == (16, 2)
    ds = DeepSpeedConfig(merged)
    assert ds.zero_optimization_stage == body["zero_optimization"]["stage"]
    wants_bf16 = "bf16" in preset.stem
    assert (ds.bfloat16_config.enabled, ds.float16_config.enabled) == (wants_bf16, False)
    if "offload" in preset.stem:
        # The trainer hands DeepSpeed a torch AdamW; DeepSpeed refuses that with offload unless told not to.
        assert ds.zero_config.offload_optimizer is not None and merged["zero_force_ds_cpu_optimizer"] is False


def test_deepspeed_rejects_an_unknown_zero_key(tmp_path):
    """The validation above has teeth: a misspelt key in a preset is an error, not a silent default."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"zero_optimization": {"stage": 2, "overlap_comms": True}}))
    merged = deepspeed_config(TrainConfig(data="pairs", output="run", deepspeed_config=str(bad)), "fp32")
    with pytest.raises(Exception, match="overlap_comms"):
        DeepSpeedConfig(merged)


def test_trainer_image_installs_train_extra_on_a_cuda_torch_base():
    text = (DEEPSPEED / "Dockerfile").read_text()
    lines = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))).splitlines()
    base = next(ln.split("=", 1)[1] for ln in lines if ln.startswith("ARG BASE_IMAGE="))
    assert re.fullmatch(r"pytorch/pytorch:[\d.]+-cuda[\d.]+-cudnn\d+-devel", base), base
    assert "FROM ${BASE_IMAGE}" in lines
    installs = [ln for ln in lines if ln.startswith("RUN ") and "pip install" in ln]
    assert len(installs) == 1
    words = shlex.split(installs[0].split("pip install", 1)[1].split("&&", 1)[0])
    project = [w for w in words if w.startswith(".[")]
    extras = project[0][2:-1].split(",") if project else []
    assert "train" in extras and "prep" not in extras, words
    assert "--constraint" in words, "torch must stay the base image's CUDA build"
    assert not [w for w in words if w.lower().startswith("apache-beam")]
    copied = [source for ln in lines if ln.startswith("COPY ") for source in ln.split()[1:-1]]
    assert "deploy/deepspeed" in copied, "pytorchjob.yaml reads its preset from the image"
    ignore = (DEEPSPEED / "Dockerfile.dockerignore").read_text().splitlines()
    for source in copied:
        assert {f"!{source}", f"!{source}/**"} & set(ignore), f"{source} is copied but excluded from the build context"
