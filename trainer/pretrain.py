"""`clozeforge train` / `python -m trainer.pretrain` / `deepspeed --module trainer.pretrain`: pairs → checkpoints.

In:  a prep run's pairs/ (manifest + shards, any fsspec URL) and the flags of trainer/config.py.
Out: RUN/train_config.json (and RUN/mixture.json with --mix), RUN/vocab/ (a copy, so export needs nothing else), RUN/checkpoints/ (resumable
     DeepSpeed checkpoints), RUN/metrics.jsonl, RUN/curves.png. A rerun with the same RUN resumes from its
     latest checkpoint: model, optimizer, scheduler, data position; dropout is re-seeded per step.

Without a launcher it runs as a single process (world size 1); under `deepspeed` or `torchrun` it picks up
RANK/WORLD_SIZE/LOCAL_RANK from the environment. Never imports apache_beam.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time

import torch

from schemas import ContractError, Manifest
from trainer import checkpoint
from trainer import config as train_config
from trainer.config import TrainConfig, TrainError
from trainer.data import ShardStream, loader, shutdown
from trainer.masking import Masker, continuation_from_vocab
from trainer.mixture import ComponentSpec, MixtureConfig, MixtureStream
from trainer.metrics import MetricsLog, peak_flops, plot_curves, train_flops_per_token
from trainer.model import BertForPretraining
from trainer.model_config import ModelConfig
from trainer.runtime import Runtime, shutdown_runtime, start_runtime
from trainer.vocab_files import copy_vocab, read_token_counts, read_vocab_tokens


def build_masker(config: TrainConfig, manifest: Manifest, tokens: list[str]) -> Masker:
    specials = [i for i, t in enumerate(tokens) if t.startswith("[") and t.endswith("]")]
    counts = read_token_counts(manifest) if config.masking.random_token_dist == "unigram" else None
    return Masker(
        config.masking,
        vocab_size=len(tokens),
        special_ids=specials,
        mask_id=manifest.special_tokens["[MASK]"],
        continuation=continuation_from_vocab(tokens),
        unigram_counts=counts,
    )


def build_model(config: TrainConfig, manifest: Manifest) -> BertForPretraining:
    span = config.masking.strategy == "span"
    try:
        model_config = ModelConfig.preset(
            config.model,
            vocab_size=manifest.vocab["size"],
            pad_token_id=manifest.special_tokens["[PAD]"],
            mlm_weight=config.mlm_weight,
            nsp_weight=config.nsp_weight,
            sbo_weight=config.sbo_weight,
            use_sbo=span,
            pre_layernorm=config.pre_layernorm,
            sbo_max_relative_positions=max(config.masking.sbo_max_positions_per_span, 1),
        )
    except ValueError as e:  # e.g. every loss weight zero
        raise TrainError(str(e)) from None
    if manifest.max_seq_len > model_config.max_position_embeddings:
        raise TrainError(f"pairs are up to {manifest.max_seq_len} tokens, the model's positions stop at {model_config.max_position_embeddings}")
    return BertForPretraining(model_config, seed=config.seed)


def lr_lambda(config: TrainConfig):
    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.schedule == "constant":
            return 1.0
        progress = (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps)
        remaining = max(0.0, 1.0 - progress)
        return remaining if config.schedule == "linear" else remaining**0.5

    return factor


def build_engine(model: BertForPretraining, config: TrainConfig, rt: Runtime):
    import deepspeed

    no_decay = [p for n, p in model.named_parameters() if n.endswith(".bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith(".bias") or "LayerNorm" in n)]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if config.optimizer == "lamb":
        if not rt.on_gpu:
            raise TrainError("--optimizer lamb uses DeepSpeed's fused CUDA kernel; on CPU use --optimizer adamw")
        from deepspeed.ops.lamb import FusedLamb

        optimizer = FusedLamb(groups, lr=config.lr)
    else:
        optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.999), eps=1e-6)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config))
    ds_config = train_config.deepspeed_config(config, rt.precision)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    return engine


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "position"}


@torch.no_grad()
def evaluate(engine, stream: ShardStream | None, batches: int, device: torch.device, rt: Runtime) -> dict[str, float]:
    """Mean losses and accuracies over the first `batches` validation batches (fixed masks: same every time)."""
    if stream is None:
        return {}
    engine.eval()
    sums: dict[str, float] = {}
    for _, batch in zip(range(batches), stream):
        out = engine(**to_device(batch, device))
        for head in ("mlm", "nsp", "sbo"):
            if f"{head}_count" in out:
                n = out[f"{head}_count"].float()
                for key, value in ((f"{head}_loss_sum", out[f"{head}_loss"] * n), (f"{head}_correct", out[f"{head}_correct"].float()), (f"{head}_count", n)):
                    sums[key] = sums.get(key, 0.0) + float(value)
    engine.train()
    totals = rt.all_reduce_sum(sums)
    result = {}
    for head in ("mlm", "nsp", "sbo"):
        n = totals.get(f"{head}_count", 0.0)
        if n:
            result[f"{head}_loss"] = totals[f"{head}_loss_sum"] / n
            result[f"{head}_acc"] = totals[f"{head}_correct"] / n
    return result


class StopFlag:
    """The first SIGTERM/SIGINT asks the loop to checkpoint and exit at the next step boundary; a second one
    (an impatient Ctrl-C) stops at once, leaving `latest` on the previous complete checkpoint."""

    def __init__(self, rt: Runtime):
        self.requested, self.rt = False, rt
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.rt.log(f"{signal.Signals(signum).name}: checkpointing at the end of this step (send it again to stop now)")


@dataclasses.dataclass
class Phase:
    """The data of one training phase (BERT: 90% of steps at seq 128, then 10% at 512, from two prep runs)."""

    number: int
    manifest: Manifest
    train: ShardStream | MixtureStream
    valid: ShardStream | None
    flops_per_token: float


def open_phase(number: int, config: TrainConfig, rt: Runtime, model: BertForPretraining, vocab_sha256: str) -> Phase:
    url = config.data if number == 1 else config.phase2_data
    manifest = Manifest.read(url)
    if manifest.vocab["sha256"] != vocab_sha256:
        raise TrainError(f"{manifest.url}: phase {number} data uses another vocabulary than --data (sha256 differs)")
    if manifest.max_seq_len > model.config.max_position_embeddings:
        raise TrainError(f"{manifest.url}: pairs up to {manifest.max_seq_len} tokens, the model's positions stop at {model.config.max_position_embeddings}")
    masker = build_masker(config, manifest, read_vocab_tokens(manifest))
    batch = config.batch_size if number == 1 else (config.phase2_batch_size or config.batch_size)
    common = dict(batch_size=batch, masker=masker, rank=rt.rank, world_size=rt.world_size, verify_checksums=config.verify_checksums)
    common.update(cache_dir=config.cache_dir, shuffle_window=config.shuffle_window, length_buckets=config.length_buckets,
                  pad_to_multiple_of=config.pad_to_multiple_of)  # every stream: train, --mix components, validation
    if config.mix and number == 1:
        mixture = MixtureConfig(components=tuple(ComponentSpec.parse(m) for m in config.mix), alpha=config.mix_alpha)
        train_stream = MixtureStream(mixture, split="train", seed=config.seed, **common)
        if train_stream.components[0].manifest.vocab["sha256"] != vocab_sha256:
            raise TrainError("the --mix components use another vocabulary than --data (sha256 differs)")
        if rt.rank == 0:
            rt.log("mixture: " + ", ".join(f"{c['name']} p={c['probability']:.3f}" for c in train_stream.describe()["components"]))
    else:
        train_stream = ShardStream(manifest, split="train", seed=config.seed + 100 * (number - 1), **common)
    valid = None
    if manifest.split_shards("validation"):
        valid = ShardStream(manifest, split="validation", seed=config.seed + 1, epochs=1, **common)
    cfg = model.config
    flops = train_flops_per_token(model.num_parameters(), cfg.num_layers, cfg.hidden_size, manifest.max_seq_len)
    if getattr(train_stream, "max_seq_len", manifest.max_seq_len) > cfg.max_position_embeddings:
        raise TrainError(f"--mix pairs are up to {train_stream.max_seq_len} tokens, the model's positions stop at {cfg.max_position_embeddings}")
    return Phase(number, manifest, train_stream, valid, flops)


def phase_of(step: int, config: TrainConfig) -> int:
    return 2 if config.phase2_data and step >= config.phase2_begins else 1


# What a checkpoint cannot be resumed under when it changes: the shapes of the weights and optimizer
# partitions, and the meaning of the saved data position.
_RESUME_KEYS = {
    "model": "--model", "pre_layernorm": "--pre-layernorm", "zero_stage": "--zero-stage", "world_size": "the number of ranks",
    "data_fingerprint": "--data (its shards or vocabulary)", "batch_size": "--batch-size",
}


def check_resumable(config: TrainConfig, manifest: Manifest, rt: Runtime) -> None:
    """Refuse, in one line, to resume a run's checkpoint under settings it was not saved with."""
    if checkpoint.latest_tag(config.output) is None:
        return
    path = os.path.join(config.output, "train_config.json")
    try:
        with open(path) as f:
            before = json.load(f)
    except (OSError, ValueError):
        raise TrainError(f"{path}: missing or unreadable, so the checkpoint beside it cannot be resumed safely") from None
    now = {**config.to_dict(), "data_fingerprint": manifest.fingerprint, "world_size": rt.world_size}
    before_span = before.get("masking", {}).get("strategy") == "span"
    if before_span != (config.masking.strategy == "span"):
        raise TrainError(f"{config.output}: its checkpoint was trained {'with' if before_span else 'without'} span masking's SBO head; "
                         "resume with the same --masking family or use a new --output")
    for key, flag in _RESUME_KEYS.items():
        if key in before and before[key] != now[key]:
            raise TrainError(f"{config.output}: its checkpoint was saved with {key}={before[key]!r}, this run has {now[key]!r}; "
                             f"resume with the same {flag} or use a new --output")


def prepare_run_dir(config: TrainConfig, manifest: Manifest, rt: Runtime) -> None:
    check_resumable(config, manifest, rt)
    if rt.rank == 0:
        os.makedirs(config.output, exist_ok=True)
        copy_vocab(manifest, os.path.join(config.output, "vocab"))
        with open(os.path.join(config.output, "train_config.json"), "w") as f:
            json.dump({**config.to_dict(), "data_fingerprint": manifest.fingerprint, "world_size": rt.world_size}, f, indent=2)


def train(config: TrainConfig, rt: Runtime) -> dict[str, float]:
    manifest = Manifest.read(config.data)
    prepare_run_dir(config, manifest, rt)
    model = build_model(config, manifest)
    engine = build_engine(model, config, rt)
    client = checkpoint.load(engine, config.output)
    step = client["step"] if client else 0
    phase = open_phase(phase_of(step, config), config, rt, model, manifest.vocab["sha256"])
    if isinstance(phase.train, MixtureStream) and rt.rank == 0:
        with open(os.path.join(config.output, "mixture.json"), "w") as f:
            json.dump(phase.train.describe(), f, indent=2)
    if client and client.get("phase", 1) == phase.number:
        phase.train.load_state_dict(client["data"])
    if client:
        rt.log(f"resumed from {checkpoint.latest_tag(config.output)} at step {step} (phase {phase.number})")
    log = MetricsLog(config.output, config.max_steps, enabled=rt.rank == 0, start_step=step)
    peak = peak_flops(rt.device_name)
    stop = StopFlag(rt)
    position = phase.train.state_dict(*phase.train.start)
    batches = iter(loader(phase.train, config.num_workers))
    window_tokens, window_start, last = 0, time.time(), {}

    def save() -> None:
        state = {"step": step, "phase": phase.number, "data": position, "train_config": config.to_dict(),
                 "model_config": model.config.to_dict()}
        rt.log(f"saved checkpoint {checkpoint.save(engine, config.output, step, state, config.keep_last)}")

    end = config.max_steps if config.stop_after is None else min(config.max_steps, step + config.stop_after)
    try:
        while step < end and not stop.requested:
            if phase_of(step, config) != phase.number:
                phase = open_phase(2, config, rt, model, manifest.vocab["sha256"])
                shutdown(batches)
                position, batches = phase.train.state_dict(0, 0), iter(loader(phase.train, config.num_workers))
                rt.log(f"phase 2 from step {step}: {phase.manifest.url} (max_seq_len {phase.manifest.max_seq_len})")
            stats = {}
            lr = engine.get_lr()[0]  # the rate this step uses (the scheduler moves on inside engine.step)
            for _ in range(config.grad_accum):
                batch = next(batches)
                epoch, k = batch["position"].tolist()
                torch.manual_seed(hash((config.seed, step, rt.rank, k)) & 0x7FFF_FFFF)  # dropout: explicit per step
                out = engine(**to_device(batch, rt.device))
                engine.backward(out["loss"])
                engine.step()
                window_tokens += int(batch["attention_mask"].sum())
                for key in ("loss", "mlm_loss", "nsp_loss", "sbo_loss"):
                    if key in out:
                        stats[key] = stats.get(key, 0.0) + out[key].detach().item() / config.grad_accum
                position = phase.train.state_dict(epoch, k + 1)
            step += 1
            if step % config.log_every == 0 or step == config.max_steps:
                elapsed = time.time() - window_start
                tokens_per_s = window_tokens * rt.world_size / max(elapsed, 1e-9)
                stats = rt.all_reduce_mean(stats)
                record = {"step": step, **stats, "lr": lr, "tokens_per_s": tokens_per_s, "epoch": epoch, "phase": phase.number,
                          "mfu": tokens_per_s * phase.flops_per_token / (peak * rt.world_size) if peak else None}
                log.write(record)
                log.progress(record)
                window_tokens, window_start = 0, time.time()
            if (config.eval_every and step % config.eval_every == 0) or step == config.max_steps:
                last = evaluate(engine, phase.valid, config.eval_batches, rt.device, rt)
                if last:
                    log.write({"step": step, "split": "validation", **last})
                    rt.log("eval " + " ".join(f"{k} {v:.4f}" for k, v in last.items()))
            if step % config.save_every == 0 or step == config.max_steps:
                save()
    finally:
        shutdown(batches)  # its workers ignore SIGTERM; left to interpreter exit they would hang it
    if step < config.max_steps and step % config.save_every:  # stopped early by a signal or --stop-after
        rt.log(f"stopping at step {step} of {config.max_steps}: checkpointing")
        save()
    log.close()
    if rt.rank == 0:
        plot = plot_curves(config.output)
        if plot:
            rt.log(f"curves: {plot}")
    return last


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge train", description="Pre-train a BERT on prep's pair shards with DeepSpeed ZeRO.")
    train_config.add_arguments(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            config = train_config.from_args(parser().parse_args(argv))
        except ValueError as e:  # a config dataclass rejected a flag value
            raise TrainError(str(e)) from None
        if config.deepspeed_config:
            train_config.read_user_deepspeed_config(config.deepspeed_config)  # its errors before any rank starts
        rt = start_runtime(config.precision)
        try:
            train(config, rt)
        finally:
            shutdown_runtime()
    except (TrainError, ContractError) as e:
        print(f"clozeforge train: error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("clozeforge train: interrupted; resume from the last complete checkpoint", file=sys.stderr)
        return 130
    return 0


def one_line(error: Exception) -> str:
    """The message of an error, also when a DataLoader worker raised it: torch re-raises a worker's exception
    in the main process with the worker's whole traceback in the message, whose last line is the error."""
    text = str(error).strip()
    if "Original Traceback" not in text:
        return text
    last = text.splitlines()[-1]
    name = f"{type(error).__module__}.{type(error).__qualname__}: "
    return last[len(name):] if last.startswith(name) else last.split(": ", 1)[-1]


if __name__ == "__main__":
    sys.exit(main())
