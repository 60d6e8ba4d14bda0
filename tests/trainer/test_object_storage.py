"""Object storage for real, on loopback: prep reads and writes s3:// (moto's S3 server + s3fs), and the
trainer streams the same shards from s3:// and from gs:// (gcp-storage-emulator + gcsfs)."""

from __future__ import annotations

import glob
import os

import fsspec
import pytest
import torch

from schemas import Manifest
from tests.helpers import free_port, masker_for
from trainer.data import ShardStream, loader

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)

pytest.importorskip("s3fs")


@pytest.fixture(scope="module")
def s3(monkeypatch_module):
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch_module.setenv(key, value)
    monkeypatch_module.setitem(fsspec.config.conf, "s3", {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}})
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("corpus-bucket")
    yield fs
    server.stop()


@pytest.fixture(scope="module")
def gcs(monkeypatch_module):
    # gcsfs >= 2026.10 first probes the bucket type over gRPC, which an HTTP-only emulator answers with a
    # 60 s timeout; this switch (read when gcsfs is imported) keeps it on the plain JSON API.
    monkeypatch_module.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    pytest.importorskip("gcsfs")
    emulator = pytest.importorskip("gcp_storage_emulator.server")
    port = free_port()
    server = emulator.create_server("127.0.0.1", port, in_memory=True, default_bucket="shards-bucket")
    server.start()
    monkeypatch_module.setitem(fsspec.config.conf, "gcs", {"token": "anon", "project": "test", "endpoint_url": f"http://127.0.0.1:{port}"})
    yield fsspec.filesystem("gcs", skip_instance_cache=True)
    server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def read_everything(manifest_url: str, cache_dir: str | None = None) -> tuple[int, int]:
    manifest = Manifest.read(manifest_url)
    stream = ShardStream(manifest, split="train", batch_size=16, masker=masker_for(manifest), seed=0, epochs=1, cache_dir=cache_dir)
    batches = list(loader(stream, 0))
    return len(batches) * 16 - stream.padding, manifest.splits["train"]


def test_prep_from_and_to_s3_then_stream(s3, corpus_dir, tmp_path):
    from pipelines import prep

    for path in glob.glob(f"{corpus_dir}/part-*.jsonl"):
        s3.put(path, f"corpus-bucket/raw/{os.path.basename(path)}")
    report = prep.run(["--input", "web=s3://corpus-bucket/raw/*.jsonl", "--output", "s3://corpus-bucket/prep", "--vocab-size", "600"])
    assert report["unbalanced"] == [] and report["total"]["kept"] > 0
    assert s3.exists("corpus-bucket/prep/pairs/manifest.json") and s3.exists("corpus-bucket/prep/vocab/vocab.txt")
    assert not [p for p in s3.find("corpus-bucket/prep") if ".tmp-" in p]  # every temp name was renamed away
    streamed, expected = read_everything("s3://corpus-bucket/prep/pairs")
    assert streamed == expected > 0
    cache = tmp_path / "cache"
    assert read_everything("s3://corpus-bucket/prep/pairs", str(cache)) == (streamed, expected)
    cached = [p for p in cache.iterdir() if p.name != "cache"]  # fsspec's index file is named "cache"
    assert len(cached) == len(Manifest.read("s3://corpus-bucket/prep/pairs").split_shards("train"))


def test_stream_from_gcs(gcs, prepped):
    for sub in ("pairs", "vocab"):
        for path in glob.glob(os.path.join(prepped, sub, "*")):
            gcs.put(path, f"shards-bucket/prep/{sub}/{os.path.basename(path)}")
    streamed, expected = read_everything("gs://shards-bucket/prep/pairs")
    assert streamed == expected > 0


def test_cache_dir_also_keeps_mixture_components_and_the_validation_split(s3, prepped, tmp_path):
    from trainer.builders import build_model, open_phase
    from trainer.config import TrainConfig
    from trainer.run.runtime import Runtime

    for sub in ("pairs", "vocab"):
        for path in glob.glob(os.path.join(prepped, sub, "*")):
            s3.put(path, f"corpus-bucket/copied/{sub}/{os.path.basename(path)}")
    url = "s3://corpus-bucket/copied/pairs"
    cache = tmp_path / "cache"
    config = TrainConfig(data=url, output=str(tmp_path / "run"), mix=(f"web={url},weight=1",), batch_size=16, cache_dir=str(cache))
    manifest = Manifest.read(url)
    rt = Runtime(rank=0, world_size=1, device=torch.device("cpu"), precision="fp32", device_name="cpu")
    phase = open_phase(1, config, rt, build_model(config, manifest), manifest.vocab["sha256"])
    phase.train.steps = phase.train.components[0].batches_per_epoch  # one epoch of the only component
    assert len(list(loader(phase.train, 0))) == phase.train.steps
    assert len(list(phase.valid)) == phase.valid.batches_per_epoch
    cached = [p for p in cache.iterdir() if p.name != "cache"]  # fsspec's index file is named "cache"
    assert len(cached) == len(manifest.shards)  # every train shard (read through --mix) and the validation shard


def test_start_up_check_lists_s3_shards_once_and_names_a_missing_one(s3, prepped):
    """The trainer's start-up check (schemas.manifest.missing_shards) on s3://: sizes from one listing."""
    from schemas.manifest import missing_shards

    for sub in ("pairs", "vocab"):
        for path in glob.glob(os.path.join(prepped, sub, "*")):
            s3.put(path, f"corpus-bucket/checked/{sub}/{os.path.basename(path)}")
    manifest = Manifest.read("s3://corpus-bucket/checked/pairs")
    assert missing_shards(manifest) == []
    gone = manifest.shards[0].path
    s3.rm(f"corpus-bucket/checked/pairs/{gone}")
    s3.invalidate_cache()
    assert missing_shards(manifest) == [f"{gone} is missing"]
