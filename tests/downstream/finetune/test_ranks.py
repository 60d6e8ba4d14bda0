"""`clozeforge finetune` on devices and in several processes (downstream/finetune/loop.py's Place, job.py's spread):
the flags' one-line errors, a rank's slice of a batch, 2 CPU processes over gloo against 1 (runs spread: the
same results.json and model; --data-parallel: the same losses within float tolerance), the records and weights
that travel between ranks, and bench/finetune_loop.py's GPU path on a tiny model on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("sklearn")

from downstream.finetune import job as job_mod  # noqa: E402
from downstream.finetune import ranks  # noqa: E402
from downstream.finetune.command import finetune_main  # noqa: E402
from downstream.finetune.loop import Place, _batch, _my_rows  # noqa: E402
from process import devices, precision  # noqa: E402

from .finetune_assets import classify_rows, tiny_export, write_jsonl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune-ranks")
    return tiny_export(str(root)), write_jsonl(root / "c.jsonl", classify_rows(repeat=3))


def _args(hf, data, out, *extra) -> list[str]:
    # a task the loop learns (test_finetune.py): seeds then end on different scores, so the kept run is not simply the first
    return [hf, "--task", "classify", "--train", data, "--validation", data, "--test", data, "--output", str(out),
            "--epochs", "3", "--lr", "3e-3", "--batch-size", "8", *extra]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clozeforge", "finetune", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def _results(out) -> dict:
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    for key in ("seconds", "recipe", "devices"):
        results.pop(key, None)
    return results


def _weights(out) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(os.path.join(out, "model", "model.safetensors"))


def test_device_and_precision_flags_fail_in_one_line(assets, tmp_path, capsys):
    hf, data = assets
    if not torch.cuda.is_available():
        assert finetune_main(_args(hf, data, tmp_path / "o", "--device", "cuda")) == 2
        assert capsys.readouterr().err.strip().endswith("--device cuda: no CUDA GPU is visible to torch (use --device auto or cpu)")
    assert finetune_main(_args(hf, data, tmp_path / "o", "--device", "cpu", "--precision", "fp16")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "fp16 needs a GPU" in err
    assert not os.path.exists(tmp_path / "o")


def test_auto_is_fp32_on_a_cpu_whatever_its_bf16_instructions():
    assert precision.resolve_on("auto", torch.device("cpu")).name == "fp32"
    assert precision.resolve_on("bf16", torch.device("cpu")).name == "bf16"
    with pytest.raises(ValueError, match="one of"):
        devices.resolve_device("tpu")


@pytest.mark.parametrize("batch,world,expected", [
    (list(range(8)), 2, [([0, 2, 4, 6], 1.0), ([1, 3, 5, 7], 1.0)]),
    (list(range(3)), 2, [([0, 2], 4 / 3), ([1], 2 / 3)]),  # weights n_r * world / n: the ranks' mean is the batch mean
    ([5], 2, [([5], 2.0), ([5], 0.0)]),  # a rank without rows joins the step with one row at weight 0
])
def test_each_rank_takes_a_slice_of_the_global_batch(batch, world, expected):
    for rank, (rows, weight) in enumerate(expected):
        mine, w = _my_rows(np.array(batch), Place(rank=rank, world_size=world, data_parallel=True))
        assert mine.tolist() == rows and w == pytest.approx(weight)
    assert _my_rows(np.array(batch), Place())[1] == 1.0


def test_a_batch_cut_to_its_longest_row_is_contiguous():
    # transformers' token-classification loss calls labels.view(-1), which a strided slice refuses
    tensors = {"input_ids": torch.ones(4, 10, dtype=torch.long), "attention_mask": torch.zeros(4, 10, dtype=torch.long),
               "labels": torch.zeros(4, 10, dtype=torch.long)}
    tensors["attention_mask"][:, :3] = 1
    batch = _batch(tensors, torch.tensor([0, 2]))
    assert batch["labels"].shape == (2, 3) and batch["labels"].is_contiguous()
    batch["labels"].view(-1)


def _gloo_rank(rank: int, port: int, queue) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    place = Place(rank=rank, world_size=2)
    records = job_mod.spread(list(range(5)), lambda i: {"i": i, "on": rank, "x": [i / 3]}, place)
    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3) + rank, "n": torch.tensor([7 * rank], dtype=torch.int64)}
    got = job_mod.fetch_state(state if rank == 1 else None, 1, place)
    queue.put((rank, records, None if got is None else {k: v.tolist() for k, v in got.items()}))
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.integration
def test_runs_spread_over_two_gloo_ranks_come_back_in_plan_order_and_weights_reach_rank_0():
    import torch.multiprocessing as mp

    from process.ports import free_port

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_gloo_rank, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict((rank, (records, state)) for rank, records, state in (queue.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for rank in (0, 1):
        assert got[rank][0] == [{"i": i, "on": i % 2, "x": [i / 3]} for i in range(5)]
    assert got[0][1] == {"w": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "n": [7]} and got[1][1] is None


def _one_process(argv: list[str]) -> int:
    """finetune_main in this process with the torch threads of one of 2 ranks: the float sums of a run depend on
    how many threads split them, and a different rounding can flip a prediction, so the lr or seed chosen."""
    from process.cpu_sharing import intra_op_threads

    threads = torch.get_num_threads()
    torch.set_num_threads(intra_op_threads(2))
    try:
        return finetune_main(argv)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.integration
def test_two_processes_spreading_the_runs_write_what_one_process_writes(assets, tmp_path):
    hf, data = assets
    job = ("--seeds", "3", "--baseline", "scratch", "--epochs", "10", "--baseline-lr", "3e-3", "--baseline-epochs", "10")
    assert _one_process(_args(hf, data, tmp_path / "one", *job)) == 0
    two = _cli(*_args(hf, data, tmp_path / "two", *job, "--nproc-per-node", "2"))
    assert two.returncode == 0, two.stderr[-2000:]
    assert "rank 0: [pretrained]" in two.stdout and "rank 1: [pretrained]" in two.stdout
    one, spread = _results(tmp_path / "one"), _results(tmp_path / "two")
    assert len({r["validation"]["score"] for r in one["pretrained"]["runs"]}) > 1  # the seeds differ: a real choice
    assert spread == one
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")  # the chosen run's weights, sent by its rank
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with open(tmp_path / "one" / "predictions.jsonl") as f1, open(tmp_path / "two" / "predictions.jsonl") as f2:
        assert f1.read() == f2.read()


@pytest.mark.integration
def test_one_run_data_parallel_over_two_processes_matches_one_process(assets, tmp_path):
    hf, data = assets
    # batch 17 over 54 rows: slices of 9 and 8 rows, then a last batch of 3 (2 and 1) - unequal weights; no dropout,
    # which would draw other masks for a rank's rows than for the same rows in one process
    job = ("--seeds", "1", "--batch-size", "17", "--dropout", "0")
    assert finetune_main(_args(hf, data, tmp_path / "one", *job)) == 0
    two = _cli(*_args(hf, data, tmp_path / "two", *job, "--nproc-per-node", "2", "--data-parallel"))
    assert two.returncode == 0, two.stderr[-2000:]
    assert "one run data-parallel" in two.stdout and "rank 1" not in two.stdout
    one, parallel = _results(tmp_path / "one"), _results(tmp_path / "two")
    h1, h2 = one["pretrained"]["runs"][0]["history"], parallel["pretrained"]["runs"][0]["history"]
    assert len(h1) == len(h2) == 3
    for e1, e2 in zip(h1, h2):
        assert e2["loss"] == pytest.approx(e1["loss"], abs=1e-3)  # points (x 100): the losses agree to 1e-5
    assert parallel["pretrained"]["runs"][0]["validation"]["score"] == pytest.approx(one["pretrained"]["runs"][0]["validation"]["score"], abs=2)


@pytest.mark.integration
def test_the_gpu_bench_path_runs_on_a_tiny_model_on_the_cpu():
    pytest.importorskip("accelerate")
    result = subprocess.run([sys.executable, "bench/finetune_loop.py", "--tiny", "--device", "cpu", "--examples", "64",
                             "--batch-size", "8", "--max-len", "32", "--warmup-steps", "2"], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert last["model"] == "tiny" and last["examples"] == 64 and last["ours_examples_per_s"] > 0
    assert last["ratio"] == pytest.approx(last["ours_examples_per_s"] / last["trainer_examples_per_s"], rel=0.01)


@pytest.mark.integration
def test_the_gpu_bench_fails_in_one_line_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    result = subprocess.run([sys.executable, "bench/finetune_loop.py", "--gpu"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0 and "needs a CUDA GPU" in result.stderr


def test_spread_runs_choose_the_lr_and_seed_run_arms_chooses(monkeypatch):
    """Job.run_spread (on one rank) against run_arms on the same fake runs: the same lr (best mean), the same seed
    (the first of the best, on a tie), the same records, predictions and weights."""
    from downstream.finetune import job as job_mod

    from .finetune_assets import scripted_job, scripted_runs

    validation = {(1e-4, 0): 0.9, (1e-4, 1): 0.1, (1e-4, 2): 0.2, (3e-4, 0): 0.5, (3e-4, 1): 0.7, (3e-4, 2): 0.7}
    config, splits = scripted_runs(monkeypatch, validation, seeds=3)
    arms = [job_mod.Arm("pretrained", "dir", True, (1e-4, 3e-4), "--lr", 1),
            job_mod.Arm("scratch", "dir", False, (3e-4, 1e-4), "--baseline-lr", 1, saved=False)]
    results = []
    for how in ("alone", "spread"):
        job = scripted_job(monkeypatch, config, splits)
        results.append(job.run_arms(arms, job_mod.Progress(1)) if how == "alone" else
                       job.run_spread(arms, job_mod.Progress(1), Place()))
    for a, b in zip(*results):
        assert b.record == a.record and b.scores == a.scores and b.predictions == a.predictions
        assert b.best["seed"] == a.best["seed"] == 1
    assert torch.equal(results[1][0].best["state"]["w"], results[0][0].best["state"]["w"])
    assert results[1][1].best["state"] is None  # the baseline's weights are never saved


def test_a_suite_over_several_processes_is_refused_in_one_line_before_any_starts(assets, tmp_path, capsys, monkeypatch):
    hf, _ = assets
    monkeypatch.setattr(ranks, "launch", lambda *a, **k: pytest.fail("ranks were started"))
    assert finetune_main([hf, "--suite", "glue", "--data", str(tmp_path), "--output", str(tmp_path / "o"),
                          "--nproc-per-node", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--suite runs in one process" in err and not os.path.exists(tmp_path / "o")


@pytest.mark.integration
def test_a_finished_rank_leaves_past_the_interpreters_teardown(assets, tmp_path):
    """A fine-tuning rank, data-parallel over gloo, ends with the process group ended and leaves past the interpreter's
    teardown (process/exits.py), where a gloo thread could abort a finished run."""
    from tests.helpers import group_threads, rank_threads

    hf, data = assets
    found = rank_threads("downstream.finetune.command.finetune_main", "downstream.finetune.ranks.leave_ranks",
                         _args(hf, data, tmp_path / "two", "--seeds", "1", "--epochs", "1", "--nproc-per-node", "2",
                               "--data-parallel"))
    for rank, threads in enumerate(found):
        assert group_threads(threads["before_teardown"]), (rank, threads)
        assert threads["past_teardown"], rank
