"""TrainConfig: every setting of a training run, and the DeepSpeed config generated from it.

In:  `clozeforge train` / `python -m trainer.pretrain` flags (the same parser serves both, and the
     `deepspeed` and `torchrun` launchers' --local_rank is accepted), or a dict from a run's train_config.json.
Out: a frozen, validated TrainConfig; `deepspeed_config()` builds the ZeRO JSON from it, and a user's own
     DeepSpeed JSON (--deepspeed-config) is merged over that, key by key, so it has the last word.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from schemas.config import Config, add_flags, flag, from_dict, from_flags
from trainer.masking import MaskingConfig
from trainer.model import PRESET_NAMES, ModelConfig
from trainer.precision import PRECISIONS, Precision

OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "polynomial", "constant")


class TrainError(Exception):
    """A problem the user can fix (a flag, a path, a checkpoint that does not fit). Printed as one line."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig(Config):
    data: str = flag(metavar="PAIRS_DIR")
    """The pairs/ directory (or its manifest.json) of a prep run; any fsspec URL."""
    output: str = flag(metavar="RUN_DIR")
    """Run directory: checkpoints/, metrics.jsonl, curves.png, train_config.json, vocab/."""
    model: str = flag("tiny", choices=PRESET_NAMES)
    """Model preset: tiny, mini (CPU-sized), small, base (BERT-base), large."""
    pre_layernorm: bool = flag(doc_from=(ModelConfig, "pre_layernorm"))
    dropout: float = 0.1
    """Dropout on embeddings, sub-layer outputs and attention probabilities (BERT's 0.1). 0 suits a short run of
    a small model that underfits its data (the demo): every step then learns from the whole network."""
    max_steps: int = 1000
    """Optimizer steps to train for (a resumed run counts the steps already done)."""
    batch_size: int = 32
    """Largest micro batch per rank (pairs). A rank's share of the global batch is cut into the largest micro
    batches up to this size that divide it, and grad_accum follows (so a resume on fewer ranks fits memory)."""
    grad_accum: int = 1
    """Micro batches accumulated per optimizer step when a run starts without --global-batch-size (global batch
    = batch_size x grad_accum x ranks); derived from the global batch otherwise."""
    global_batch_size: int | None = None
    """Pairs per optimizer step over all ranks, fixed for the whole run: a resume keeps the one the run started
    with (on any number of ranks), and refuses another. Default: batch_size x grad_accum x ranks."""
    partitions: int | None = None
    """Canonical data partitions, fixed when the run starts (trainer/data/partitions.py): a resume on any number
    of ranks that divides it draws the same pairs, with the same masks, at every step. Default: the most, up
    to 64, that divide the global batch, that the first number of ranks divides and that leave 16 pairs per
    partition and step (each partition's pairs are masked on their own: small chunks slow the input path)."""
    lr: float = 1e-3
    """Peak learning rate (after warmup)."""
    warmup_ratio: float = 0.06
    """Linear warmup from 0 to `lr` over this fraction of max_steps (RoBERTa's 6%), so the schedule fits any run
    length; --warmup-steps overrides it."""
    warmup_steps: int | None = None
    """Linear warmup over exactly this many steps (instead of --warmup-ratio); a value >= max_steps leaves no
    decay and is warned about."""
    schedule: str = flag("linear", choices=SCHEDULES)
    """Decay after warmup: linear to 0 at max_steps, polynomial (power 0.5), or constant."""
    weight_decay: float = 0.01
    """Decoupled weight decay; never applied to biases and LayerNorm weights (as in BERT)."""
    optimizer: str = flag("adamw", choices=OPTIMIZERS)
    """adamw (torch's, through DeepSpeed) or lamb (DeepSpeed's fused LAMB; GPU and ZeRO stage 0 only: LAMB's
    per-layer trust ratio needs whole layers, which ZeRO's partitions split)."""
    grad_clip: float = 1.0
    """Global gradient-norm clipping."""
    zero_stage: int = 2
    """DeepSpeed ZeRO stage, 0-3."""
    precision: str = flag("auto", choices=PRECISIONS)
    """auto (bf16 on a GPU that supports it and on a CPU with AVX512_BF16 or AMX_BF16, else fp32), fp32, bf16 (on
    CPU: autocast over fp32 weights), or fp16 (GPU, with loss scaling). The choice is printed at start."""
    masking: MaskingConfig = MaskingConfig()  # noqa: RUF009 (frozen, so one shared default is safe)
    mlm_weight: float = flag(doc_from=(ModelConfig, "mlm_weight"))
    nsp_weight: float = flag(doc_from=(ModelConfig, "nsp_weight"))
    sbo_weight: float = flag(doc_from=(ModelConfig, "sbo_weight"))
    seed: int = 42
    """Seed of data order, masking, dropout and initialisation."""
    num_workers: int = 1
    """Dataloader worker processes per rank (0 = build batches in the training process)."""
    mix: tuple[str, ...] = flag((), metavar="[NAME=]URL[,source=S][,weight=W]")
    """Train on a mixture instead of --data alone: `[NAME=]PAIRS_URL[,source=S][,weight=W]` per component
    (see trainer/data/mixture.py); --data still names the vocabulary and the validation split."""
    mix_alpha: float | None = None
    """Temperature sampling over the --mix components: p_i ∝ rows_i ** alpha (instead of weights)."""
    phase2_data: str | None = flag(None, metavar="PAIRS_DIR")
    """pairs/ of a second prep run (same vocabulary, e.g. --max-seq-len 512) trained on from phase2_start on:
    BERT's two-phase recipe (90% of steps at 128 tokens, then 10% at 512)."""
    phase2_start: int | None = flag(None, metavar="STEP")
    """Step at which phase 2 begins (default: 90% of max_steps)."""
    phase2_batch_size: int | None = None
    """Micro batch per rank in phase 2 (default: batch_size)."""
    stop_after: int | None = None
    """Train at most this many steps in this invocation, then checkpoint and exit; the schedule still runs to
    max_steps, so the next invocation resumes where this one stopped (for step-budgeted or preemptible jobs)."""
    log_every: int = 10
    """Log the training losses, learning rate and throughput every N steps (metrics.jsonl, console, TensorBoard)."""
    eval_every: int = 200
    """Evaluate on the validation split every N steps (0 = only at the end)."""
    eval_mask_prob: float = 0.15
    """Fraction of tokens selected in the validation masks (strategy and 80/10/10 split follow the training
    masking). BERT's 15% by default whatever --mask-prob is, so the validation accuracies of runs trained at
    different masking rates compare (a model trained at 30% is still read at 15%)."""
    eval_batches: int = 20
    """Validation batches per evaluation, per rank (the same batches, with the same masks, every time)."""
    save_every: int = 500
    """Checkpoint every N steps (and at the end, and on SIGTERM/SIGINT)."""
    keep_last: int = 2
    """Checkpoints kept; older ones are deleted after a successful save."""
    deepspeed_config: str | None = flag(None, metavar="JSON")
    """A DeepSpeed JSON merged over the generated one, key by key (batch sizes, optimizer and scheduler stay
    with the flags; a JSON that sets them is refused)."""
    cache_dir: str | None = flag(None, metavar="DIR")
    """Keep a local copy of every remote shard read (gs://, s3://) here, so later epochs and runs read the disk
    (training data, --mix components and the validation split)."""
    shuffle_window: int = flag(4, metavar="SHARDS")
    """Shards whose blocks are shuffled together (trainer/data/layout.py); each dataloader worker holds about this
    many shards in memory (plus one read ahead) and reads each shard once per epoch."""
    length_buckets: int = 0
    """Sort the rows of each N consecutive batches by length before batching, so batches pad less (0 = off)."""
    pad_to_multiple_of: int = 1
    """Round each batch's sequence length up to a multiple of this (8 suits tensor cores)."""
    verify_checksums: bool = True
    """Check each shard's sha256 against the manifest when it is first read (once per process)."""
    audit_rows: bool = False
    """Append a digest of every pair trained on to RUN/rows-rank<r>.jsonl (step, micro batch, rank), to check
    that each pair is read once per epoch across resumes and world sizes (trainer/data/audit.py)."""

    def __post_init__(self) -> None:
        checks = [
            (self.model in PRESET_NAMES, f"--model must be one of {', '.join(PRESET_NAMES)}, got {self.model!r}"),
            (0.0 <= self.dropout < 1.0, f"--dropout must be in [0, 1), got {self.dropout}"),
            (self.max_steps >= 1, f"--max-steps must be >= 1, got {self.max_steps}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.grad_accum >= 1, f"--grad-accum must be >= 1, got {self.grad_accum}"),
            (self.global_batch_size is None or self.global_batch_size >= 1, f"--global-batch-size must be >= 1, got {self.global_batch_size}"),
            (self.partitions is None or self.partitions >= 1, f"--partitions must be >= 1, got {self.partitions}"),
            (self.lr > 0, f"--lr must be positive, got {self.lr}"),
            (self.warmup_steps is None or self.warmup_steps >= 0, f"--warmup-steps must be >= 0, got {self.warmup_steps}"),
            (0 <= self.warmup_ratio < 1, f"--warmup-ratio must be in [0, 1), got {self.warmup_ratio}"),
            (self.schedule in SCHEDULES, f"--schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}"),
            (self.optimizer in OPTIMIZERS, f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}"),
            (self.zero_stage in (0, 1, 2, 3), f"--zero-stage must be 0-3, got {self.zero_stage}"),
            (self.optimizer != "lamb" or self.zero_stage == 0, f"--optimizer lamb needs --zero-stage 0, got {self.zero_stage}"),
            (self.precision in PRECISIONS, f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}"),
            (self.num_workers >= 0, f"--num-workers must be >= 0, got {self.num_workers}"),
            (self.shuffle_window >= 1, f"--shuffle-window must be >= 1, got {self.shuffle_window}"),
            (self.length_buckets >= 0, f"--length-buckets must be >= 0, got {self.length_buckets}"),
            (self.pad_to_multiple_of >= 1, f"--pad-to-multiple-of must be >= 1, got {self.pad_to_multiple_of}"),
            (self.log_every >= 1 and self.save_every >= 1 and self.eval_every >= 0, "--log-every/--save-every must be >= 1"),
            (0.0 < self.eval_mask_prob <= 1.0, f"--eval-mask-prob must be in (0, 1], got {self.eval_mask_prob}"),
            (self.keep_last >= 1, f"--keep-last must be >= 1, got {self.keep_last}"),
            (self.stop_after is None or self.stop_after >= 1, f"--stop-after must be >= 1, got {self.stop_after}"),
            (self.mix_alpha is None or bool(self.mix), "--mix-alpha needs --mix components"),
            (not (self.mix and self.phase2_data), "--mix and --phase2-data cannot be combined yet"),
            (self.phase2_start is None or 0 <= self.phase2_start <= self.max_steps, f"--phase2-start must be in [0, --max-steps], got {self.phase2_start}"),
            (self.phase2_data is not None or (self.phase2_start is None and self.phase2_batch_size is None), "--phase2-start/--phase2-batch-size need --phase2-data"),
        ]
        for ok, message in checks:
            if not ok:
                raise TrainError(message)
        if self.mix:  # here, not when the mixture is first streamed: on every rank, after minutes of start-up
            from trainer.data.mixture_config import ComponentSpec, MixtureConfig

            try:
                MixtureConfig(components=tuple(ComponentSpec.parse(m) for m in self.mix), alpha=self.mix_alpha)
            except ValueError as e:
                raise TrainError(f"--mix: {e}") from None

    @property
    def warmup(self) -> int:
        """Warmup steps: --warmup-steps, or --warmup-ratio of --max-steps."""
        return self.warmup_steps if self.warmup_steps is not None else round(self.warmup_ratio * self.max_steps)

    def schedule_warning(self) -> str | None:
        """One line when an explicit --warmup-steps leaves the decaying schedule no step to decay in."""
        if self.schedule != "constant" and self.warmup_steps is not None and self.warmup_steps >= self.max_steps:
            return (f"warning: --warmup-steps {self.warmup_steps} >= --max-steps {self.max_steps}: the learning rate "
                    f"never decays (the run ends {'at' if self.warmup_steps == self.max_steps else 'before'} its peak); "
                    "use --warmup-ratio or fewer --warmup-steps")
        return None

    @property
    def phase2_begins(self) -> int:
        return self.phase2_start if self.phase2_start is not None else round(0.9 * self.max_steps)

    @classmethod
    def from_dict(cls, body: dict[str, Any], where: str = "train config") -> TrainConfig:
        try:
            return from_dict(cls, body, where)
        except ValueError as e:
            raise TrainError(str(e)) from None


def deepspeed_config(config: TrainConfig, precision: str | Precision) -> dict[str, Any]:
    """The DeepSpeed JSON for this run (optimizer and scheduler are built by the trainer and handed in).
    `precision` is the resolved one (trainer/precision.py); a bare name means DeepSpeed's own mode for it."""
    if isinstance(precision, str):
        precision = Precision(precision, False, "")
    ds: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": config.batch_size,
        "gradient_accumulation_steps": config.grad_accum,
        "gradient_clipping": config.grad_clip,
        "zero_optimization": {"stage": config.zero_stage},
        **precision.deepspeed_sections(),
        "steps_per_print": 1 << 30,  # the trainer prints its own progress line
        "wall_clock_breakdown": False,
    }
    if config.deepspeed_config:
        ds = _merge(ds, read_user_deepspeed_config(config.deepspeed_config))
    return ds


# Keys of a user's DeepSpeed JSON that the trainer's own flags own: the loader batches by --batch-size and
# the loop accumulates --grad-accum micro batches, and the optimizer and scheduler are built in pretrain.py.
_FLAG_OWNED = {
    "train_batch_size": "--batch-size and --grad-accum (global batch = batch size x grad accum x ranks)",
    "train_micro_batch_size_per_gpu": "--batch-size",
    "gradient_accumulation_steps": "--grad-accum",
    "optimizer": "--optimizer, --lr and --weight-decay",
    "scheduler": "--warmup-ratio (or --warmup-steps) and --schedule",
}


def read_user_deepspeed_config(path: str) -> dict[str, Any]:
    """A user's DeepSpeed JSON, refused in one line when it cannot be read or sets what a flag owns."""
    try:
        with open(path) as f:
            user = json.load(f)
    except OSError as e:
        raise TrainError(f"--deepspeed-config {path}: cannot read ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TrainError(f"--deepspeed-config {path}: not valid JSON ({e})") from None
    if not isinstance(user, dict):
        raise TrainError(f"--deepspeed-config {path}: expected a JSON object, got {type(user).__name__}")
    for key, owner in _FLAG_OWNED.items():
        if key in user:
            raise TrainError(f"--deepspeed-config {path}: {key!r} is set by {owner}; remove it from the JSON")
    return user


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    add_flags(ap, TrainConfig)
    ap.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                    help="Training processes (ranks) to start on this machine through torch's launcher; one per GPU, "
                         "or a few on a CPU box (default: 1)")
    ap.add_argument("--verbose", action="store_true", help="also show third-party start-up messages (DeepSpeed's accelerator detection)")
    ap.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # set by the deepspeed launcher


def from_args(args: argparse.Namespace) -> TrainConfig:
    return from_flags(TrainConfig, args)
