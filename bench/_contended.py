"""`python bench/run.py train --contended`: training throughput beside a competing CPU-bound process, as a fraction
of the same measurement alone, taken in the same run.

In:  nothing (random token ids with BERT's pair lengths, as `train --quick` uses). Out: for each environment,
     "clozeforge" (process/cpu_sharing.py's defaults, what every clozeforge process runs with) and
     "torch_defaults" (libgomp's own spin-then-sleep, GOMP_SPINCOUNT 300,000), the tokens/s of our tiny model
     (seq 128, batch 32, fp32, as many torch threads as usable cores and malloc keeping freed blocks, as a
     `clozeforge train` rank on CPU runs) alone, beside
     a single-threaded busy loop, and beside a second copy of itself, each contended figure also as a fraction
     of the alone one.

Each measurement is its own process (the wait policy is read when torch loads), started after the competitor
has warmed up, timing whole steps for a fixed wall-clock window after warm-up steps; "alone" is measured before
and after the contended runs and averaged, so a drift in the machine's load shows in their ratio
(`alone_drift`, after / before). The machine's other load counts too: take these on an otherwise quiet machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from process import cpu_sharing

BUSY_LOOP = "while True:\n    pass\n"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _worker(seconds: float) -> None:
    """Train our tiny model for `seconds` after 3 warm-up steps; print {"tokens_per_s", "steps"} as JSON."""
    import numpy as np
    import torch

    from bench._batches import make_batches, ours_loss
    from trainer.model import BertForPretraining, ModelConfig
    from trainer.optim import adamw

    torch.set_num_threads(cpu_sharing.intra_op_threads(1))
    cpu_sharing.keep_freed_memory()  # as a training rank on CPU does (trainer/run/runtime.py)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    batches = make_batches(rng.integers(5, 8192, 200_000), 8, rng)
    tokens = [int(b["attention_mask"].sum()) for b in batches]
    model = BertForPretraining(ModelConfig.preset("tiny", vocab_size=8192), seed=0).train()
    optimizer = adamw(model, lr=1e-4, weight_decay=0.01)  # the trainer's

    def step(i: int) -> None:
        loss = ours_loss(model, batches[i % len(batches)])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for i in range(3):
        step(i)
    print("warm", flush=True)  # a rival's driver starts timing the other process from here
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds or done < 2:
        step(done)
        done += 1
    elapsed = time.perf_counter() - started
    print(json.dumps({"tokens_per_s": sum(tokens[i % len(tokens)] for i in range(done)) / elapsed, "steps": done}))


TORCH_DEFAULTS = {"GOMP_SPINCOUNT": "300000"}
"""libgomp's own spin count when OMP_WAIT_POLICY is unset, restated: the trainer package, which the worker imports,
sets OMP_WAIT_POLICY=PASSIVE where it is unset, and GOMP_SPINCOUNT has the last word in libgomp."""


def _env(policy: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in cpu_sharing.DEFAULTS and k not in TORCH_DEFAULTS}
    env.update({} if policy else TORCH_DEFAULTS)
    cpu_sharing.apply(env)
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))}


def _measure(seconds: float, env: dict[str, str], competitor: list[str] | None) -> float:
    """tokens/s of one worker, beside `competitor` (a command, started first and killed after) if given."""
    rival = subprocess.Popen(competitor, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True) if competitor else None
    try:
        if rival and "bench._contended" in competitor:
            rival.stdout.readline()  # "warm": its imports and warm-up steps are over before we time anything
        out = subprocess.run([sys.executable, "-m", "bench._contended", "--worker", str(seconds)], env=env, cwd=ROOT,
                             capture_output=True, text=True, check=True)
    finally:
        if rival:
            rival.kill()
            rival.wait()
    return json.loads(out.stdout.strip().splitlines()[-1])["tokens_per_s"]


def main(quick: bool) -> dict:
    seconds = 8.0 if quick else 30.0
    rivals = {"busy_loop": [sys.executable, "-c", BUSY_LOOP],
              "training": [sys.executable, "-m", "bench._contended", "--worker", "100000"]}
    result: dict = {"model": "tiny (2 x 128), seq 128, batch 32, fp32, random ids", "seconds_per_measurement": seconds,
                    "threads": cpu_sharing.intra_op_threads(1)}
    for name, policy in (("clozeforge", True), ("torch_defaults", False)):
        env = _env(policy)
        before = _measure(seconds, env, None)
        contended = {rival: _measure(seconds, env, command) for rival, command in rivals.items()}
        after = _measure(seconds, env, None)
        alone = (before + after) / 2
        result[name] = {
            "env": {k: env[k] for k in (*cpu_sharing.DEFAULTS, *TORCH_DEFAULTS) if k in env},
            "alone_tokens_per_s": round(alone), "alone_drift": round(after / before, 2),
            **{f"beside_{rival}_tokens_per_s": round(v) for rival, v in contended.items()},
            **{f"beside_{rival}_fraction": round(v / alone, 2) for rival, v in contended.items()},
        }
    result["quiet_speed_clozeforge_over_torch_defaults"] = round(
        result["clozeforge"]["alone_tokens_per_s"] / result["torch_defaults"]["alone_tokens_per_s"], 2)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker(float(sys.argv[2]))
