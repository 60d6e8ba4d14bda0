"""TrainConfig: every setting of a training run, and TrainError, the one-line error a user can fix.

In:  the flags of `clozeforge train` (generated from the fields here by trainer/pretrain.py's parser), or a dict
     from a run's train_config.json. Out: a frozen, validated TrainConfig. The DeepSpeed JSON generated from it
     is trainer/builders.py's; and RESUME_RULES, the one table of the settings a resumed run may and may not change
     (trainer/checkpoint/resume.py refuses by it, the data streams check their saved position by
     it, and the README's list is checked against it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from process.precision import PRECISIONS
from schemas.config import Config, check_choices, flag, from_dict
from schemas.families import FAMILIES
from schemas.objectives import OBJECTIVES
from trainer.masking import MaskingConfig
from trainer.masking.strategies import heads_of
from trainer.model import PRESET_NAMES, ModelConfig

OPTIMIZERS = ("adamw", "lamb")
BATCH_FORMS = ("padded", "unpadded", "static")
"""The names of trainer/data/batch_forms.py's FORMS (which checks them), here for the flag: that package imports this one."""
AUTO_BATCH_FORM = {False: "unpadded", True: "padded"}
"""--batch-form auto on a CPU (False) and on a GPU (True), where the objective takes it (else its first form): unpadded on
a CPU, 1.03-1.04x padded's tokens/s on a quiet 2-core machine (bench/README.md#unpadded-batches); padded on a GPU
until bench/gpu_check.sh has figures from one."""
COMPILE_OFF = (None, "off", "none")
"""--compile values that leave the model eager (None: a run recorded before `auto` existed)."""


def _stage(value: str | int) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"--zero-stage must be auto or 0-3, got {value!r}") from None
SCHEDULES = ("linear", "polynomial", "constant", "wsd")


class TrainError(Exception):
    """A problem the user can fix (a flag, a path, a checkpoint that does not fit). Printed as one line."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig(Config):
    data: str = flag(metavar="PAIRS_DIR")
    """The pairs/ directory (or its manifest.json) of a prep run; any fsspec URL."""
    output: str = flag(metavar="RUN_DIR")
    """Run directory: checkpoints/, metrics.jsonl, curves.png, train_config.json, vocab/."""
    init_from: str | None = flag(None, metavar="SOURCE")
    """Continue pretraining from SOURCE instead of random weights: a HuggingFace BERT directory (any fsspec URL;
    config.json + model.safetensors or pytorch_model.bin, or a sharded checkpoint's index), a clozeforge export,
    or a clozeforge run (RUN: its newest intact checkpoint; RUN@STEP). The architecture, and the vocabulary
    --data must be prepped with (`prep --vocab SOURCE`), are the source's; heads it lacks start fresh; the
    optimizer, schedule and data position start fresh. Unless given, --lr becomes the rate the source's own
    training used where its run or export records it, else 1e-4 x 768 / its width (trainer/start/rate.py; the
    choice and why are printed at start), and the masking the source's (trainer/start/defaults.py). With
    --eval-every, step 0 is evaluated too (the source's score). A RUN that has checkpoints resumes instead: rerun
    it without --init-from."""
    family: str | None = flag(None, choices=tuple(FAMILIES))
    """The member of the BERT family (schemas/families.py): bert (MLM + NSP on NSP pairs, or MLM alone on packed
    rows), roberta or xlm-roberta (MLM on packed rows; no token types; exported as RobertaForMaskedLM /
    XLMRobertaForMaskedLM), xlm (MLM on packed rows and TLM on `prep --packing tlm` pairs, mixed by --mix; language
    embeddings; exported as XLMWithLMHeadModel). Default: the family of --data's vocabulary and packing (its
    manifest); a family whose tokenizer or packing the data is not is refused in one line."""
    languages: tuple[str, ...] = flag((), metavar="CODE")
    """The xlm family's languages in order, one language embedding each (config.json's lang2id). Default: every
    language of --data and --mix, sorted: a tlm run's (its manifest's packing.languages) and a monolingual run's row
    sources (name an input by its language, `prep --input de=FILES`, or prep with --identify-languages)."""
    objective: str = flag("mlm", choices=tuple(OBJECTIVES))
    """The pre-training objective (schemas/objectives.py): mlm (the family's masked LM, with NSP where it has it), or
    electra (replaced-token detection, Clark et al. 2020: a generator --generator-fraction of the model's width,
    sharing its embeddings, fills the masked positions with samples; the model learns which tokens were replaced,
    its loss x --discriminator-weight; the bert family; exported as ElectraForPreTraining, the generator as
    ElectraForMaskedLM in EXPORT/generator)."""
    generator_fraction: float = flag(doc_from=(ModelConfig, "generator_fraction"))
    discriminator_weight: float = flag(doc_from=(ModelConfig, "discriminator_weight"))
    model: str | None = flag(None, choices=PRESET_NAMES)
    """Model preset: tiny (the default), mini (CPU-sized), small, base (BERT-base), large. With --init-from the
    source's shape; a preset that disagrees with it is refused."""
    pre_layernorm: bool = flag(doc_from=(ModelConfig, "pre_layernorm"))
    dropout: float = 0.1
    """Dropout on embeddings, sub-layer outputs and attention probabilities (BERT's 0.1). 0 suits a short run of
    a small model that underfits its data (the demo): every step then learns from the whole network."""
    attention_dropout: float | None = None
    """Dropout of the attention probabilities (default: --dropout). 0 lets --batch-form unpadded on a GPU run
    FlashAttention's variable-length kernel, which has none (MosaicBERT and ModernBERT pretrain at 0)."""
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
    """Peak learning rate (after warmup). With --init-from: the source's own training rate where recorded, else
    1e-4 x 768 / its width (BERT-base's rate, scaled µP-style; trainer/start/rate.py)."""
    warmup_ratio: float = 0.06
    """Linear warmup from 0 to `lr` over this fraction of max_steps (RoBERTa's 6%), so the schedule fits any run
    length, also with --init-from (whose optimizer state starts fresh); --warmup-steps overrides it."""
    head_warmup_steps: int | None = None
    """With --init-from: the heads the source lacks (an MLM head for a bare encoder or a sentence-transformers model)
    train alone for this many first steps, the source's weights held (their rate 0), before the whole model trains
    on the schedule (trainer/start/warmup.py). Unset: 10% of --max-steps, at most 100; 0: no warm-up."""
    warmup_steps: int | None = None
    """Linear warmup over exactly this many steps (instead of --warmup-ratio); a value >= max_steps leaves no
    decay and is warned about."""
    schedule: str = flag("linear", choices=SCHEDULES)
    """Decay after warmup: linear to 0 at max_steps, polynomial (power 0.5), constant, or wsd: warmup-stable-decay
    (trapezoidal; ModernBERT's), the peak held until the last --decay-ratio of the steps, then 1 - sqrt down to 0
    (Hägele et al. 2024's 1-sqrt cooldown)."""
    decay_ratio: float = 0.1
    """--schedule wsd: the fraction of --max-steps, at the end, over which the rate decays."""
    batch_warmup_ratio: float = 0.0
    """Batch-size warmup (ModernBERT's): over this fraction of --max-steps each step trains on a share of its global
    batch growing linearly from 1/8 to all of it; the rows beyond a step's share are read and skipped, so the data
    position, resume and world size stay those of the full batch. 0: off."""
    weight_decay: float = 0.01
    """Decoupled weight decay; never applied to biases and LayerNorm weights (as in BERT)."""
    optimizer: str = flag("adamw", choices=OPTIMIZERS)
    """adamw (torch's, through DeepSpeed) or lamb (DeepSpeed's fused LAMB; GPU and ZeRO stage 0 only: LAMB's
    per-layer trust ratio needs whole layers, which ZeRO's partitions split)."""
    grad_clip: float = 1.0
    """Global gradient-norm clipping."""
    zero_stage: int | str = flag("auto", metavar="auto|0-3", convert=lambda v: v if v == "auto" else _stage(v))
    """DeepSpeed ZeRO stage, 0-3; auto: 0 on one rank (no partitions to save memory over, and none of ZeRO's
    bucket copies), 2 on several. A resumed run keeps the stage it started with (auto reads it back)."""
    compile: str | None = flag("auto", metavar="auto|off|BACKEND")
    """torch.compile the model with this backend, through DeepSpeed's engine.compile (`inductor` fuses kernels:
    1.37x for `base` in bf16 on an H200, after ~25 s of compiling; on a 2-core CPU it lost, 0.86x after ten
    minutes: bench/README.md). auto: inductor on a GPU, off on a CPU; off (or none): never. Any name
    torch._dynamo.list_backends(exclude_tags=()) gives."""
    precision: str = flag("auto", choices=PRECISIONS)
    """auto (bf16 on a GPU that supports it and on a CPU with AVX512_BF16 or AMX_BF16, else fp32), fp32, bf16 (on
    CPU: autocast over fp32 weights), or fp16 (GPU, with loss scaling). The choice is printed at start."""
    masking: MaskingConfig = MaskingConfig()  # noqa: RUF009 (frozen, so one shared default is safe)
    mlm_weight: float = flag(doc_from=(ModelConfig, "mlm_weight"))
    nsp_weight: float = flag(doc_from=(ModelConfig, "nsp_weight"))
    sbo_weight: float = flag(doc_from=(ModelConfig, "sbo_weight"))
    seed: int = 42
    """Seed of data order, masking, dropout and initialisation."""
    num_workers: int | None = None
    """Dataloader worker processes per rank (0 = build batches in the training process); default 0 on a CPU
    (its ranks' threads take every core), on a GPU 4 (at most the cores per rank less one), so masking keeps
    ahead of the GPU."""
    mix: tuple[str, ...] = flag((), metavar="[NAME=]URL[,source=S][,weight=W]")
    """Train on a mixture instead of --data alone: `[NAME=]PAIRS_URL[,source=S][,weight=W]` per component
    (see trainer/data/mixture.py); --data still names the vocabulary and the validation split."""
    mix_alpha: float | None = None
    """Temperature sampling over the --mix components: p_i ∝ rows_i ** alpha (instead of weights); default with
    --sample-languages or unweighted --mix: the family's (BERT 0.7, as multilingual BERT; XLM-R 0.3)."""
    sample_languages: bool = False
    """Sample --data's languages by temperature (--mix-alpha): one --mix component per language of a prep run with
    --identify-languages (its rows' sources are language codes), each named by its code; the components and their
    probabilities are printed at start."""
    phase2_data: str | None = flag(None, metavar="PAIRS_DIR")
    """pairs/ of a second prep run (same vocabulary, e.g. --max-seq-len 512) trained on from phase2_start on:
    BERT's two-phase recipe (90% of steps at 128 tokens, then 10% at 512)."""
    phase2_start: int | None = flag(None, metavar="STEP")
    """Step at which phase 2 begins (default: 90% of max_steps)."""
    phase2_batch_size: int | None = None
    """Micro batch per rank in phase 2 (default: batch_size)."""
    phase2_rope_theta: float | None = None
    """A rotary family's (modernbert's) global rotary base from phase 2 on: context extension raises it with the
    length (ModernBERT: 10,000 at 1,024 tokens, 160,000 at 8,192). Default for modernbert: 160,000; refused for a
    family with learned positions."""
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
    batch_form: str = flag("auto", choices=("auto", *BATCH_FORMS))
    """How a micro batch reaches the model (trainer/data/batch_forms.py); the rows and masks are the same in each.
    padded: padded to its longest row, a key mask in attention. unpadded: the rows' tokens packed with cu_seqlens, no
    padding computed and no mask: each row attends to its own tokens (FlashAttention's variable-length kernel on a
    GPU without attention dropout, else one attention call per run of equal-length rows); losses and gradients equal
    padded's. static: every batch max_seq_len tokens a row and --max-predictions slots (default: NVIDIA's 20 at 128,
    which caps the masks), one shape for the run, so a GPU compiles with CUDA graphs (mode reduce-overhead). auto:
    unpadded on a CPU (measured faster: `python bench/run.py unpad`), padded on a GPU until bench/gpu_check.sh has
    measured (bench/README.md#unpadded-batches); padded for an objective that takes no other (ELECTRA)."""
    verify_checksums: bool = True
    """Check each shard's sha256 against the manifest when it is first read (once per process)."""
    audit_rows: bool = False
    """Append a digest of every pair trained on to RUN/rows-rank<r>.jsonl (step, micro batch, rank), to check
    that each pair is read once per epoch across resumes and world sizes (trainer/data/audit.py)."""

    def __post_init__(self) -> None:
        check_choices(self, TrainError)
        checks = [
            (0.0 <= self.dropout < 1.0, f"--dropout must be in [0, 1), got {self.dropout}"),
            (self.attention_dropout is None or 0.0 <= self.attention_dropout < 1.0,
             f"--attention-dropout must be in [0, 1), got {self.attention_dropout}"),
            (self.max_steps >= 1, f"--max-steps must be >= 1, got {self.max_steps}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.grad_accum >= 1, f"--grad-accum must be >= 1, got {self.grad_accum}"),
            (self.global_batch_size is None or self.global_batch_size >= 1, f"--global-batch-size must be >= 1, got {self.global_batch_size}"),
            (self.partitions is None or self.partitions >= 1, f"--partitions must be >= 1, got {self.partitions}"),
            (self.lr > 0, f"--lr must be positive, got {self.lr}"),
            (self.warmup_steps is None or self.warmup_steps >= 0, f"--warmup-steps must be >= 0, got {self.warmup_steps}"),
            (self.head_warmup_steps is None or 0 <= self.head_warmup_steps < self.max_steps,
             f"--head-warmup-steps must be >= 0 and below --max-steps {self.max_steps}, got {self.head_warmup_steps}"),
            (0 <= self.warmup_ratio < 1, f"--warmup-ratio must be in [0, 1), got {self.warmup_ratio}"),
            (self.zero_stage in ("auto", 0, 1, 2, 3), f"--zero-stage must be auto or 0-3, got {self.zero_stage!r}"),
            (self.optimizer != "lamb" or self.zero_stage in ("auto", 0), f"--optimizer lamb needs --zero-stage 0, got {self.zero_stage}"),
            (self.num_workers is None or self.num_workers >= 0, f"--num-workers must be >= 0, got {self.num_workers}"),
            (self.shuffle_window >= 1, f"--shuffle-window must be >= 1, got {self.shuffle_window}"),
            (self.length_buckets >= 0, f"--length-buckets must be >= 0, got {self.length_buckets}"),
            (self.pad_to_multiple_of >= 1, f"--pad-to-multiple-of must be >= 1, got {self.pad_to_multiple_of}"),
            (self.log_every >= 1 and self.save_every >= 1 and self.eval_every >= 0, "--log-every/--save-every must be >= 1"),
            (0.0 < self.eval_mask_prob <= 1.0, f"--eval-mask-prob must be in (0, 1], got {self.eval_mask_prob}"),
            (self.keep_last >= 1, f"--keep-last must be >= 1, got {self.keep_last}"),
            (self.stop_after is None or self.stop_after >= 1, f"--stop-after must be >= 1, got {self.stop_after}"),
            (self.batch_form == "auto" or OBJECTIVES[self.objective].takes(self.batch_form),
             f"--batch-form {self.batch_form}: --objective {self.objective} takes "
             f"{' or '.join(OBJECTIVES[self.objective].batch_forms or ())} batches only"),
            (self.mix_alpha is None or bool(self.mix) or self.sample_languages, "--mix-alpha needs --mix components or --sample-languages"),
            (not (self.sample_languages and self.phase2_data), "--sample-languages and --phase2-data cannot be combined yet"),
            (not (self.mix and self.phase2_data), "--mix and --phase2-data cannot be combined yet"),
            (self.phase2_start is None or 0 <= self.phase2_start <= self.max_steps, f"--phase2-start must be in [0, --max-steps], got {self.phase2_start}"),
            (self.phase2_data is not None or (self.phase2_start is None and self.phase2_batch_size is None), "--phase2-start/--phase2-batch-size need --phase2-data"),
            (0.0 < self.decay_ratio <= 1.0, f"--decay-ratio must be in (0, 1], got {self.decay_ratio}"),
            (0.0 <= self.batch_warmup_ratio < 1.0, f"--batch-warmup-ratio must be in [0, 1), got {self.batch_warmup_ratio}"),
            (self.phase2_rope_theta is None or self.phase2_rope_theta > 0, f"--phase2-rope-theta must be positive, got {self.phase2_rope_theta}"),
        ]
        for ok, message in checks:
            if not ok:
                raise TrainError(message)
        if self.compile not in COMPILE_OFF + ("auto",):
            import torch._dynamo  # here, not at the top: a run that does not compile does not pay for the import

            backends = torch._dynamo.list_backends(exclude_tags=())
            if self.compile not in backends:
                raise TrainError(f"--compile {self.compile}: not a torch.compile backend here; one of {', '.join(backends)}")

    def zero_stage_for(self, world_size: int) -> int:
        """The ZeRO stage --zero-stage means on `world_size` ranks (auto: 0 on one, 2 on several; LAMB: 0)."""
        if self.zero_stage != "auto":
            return self.zero_stage
        return 0 if world_size == 1 or self.optimizer == "lamb" else 2

    def batch_form_for(self, on_gpu: bool) -> str:
        """The batch form --batch-form means on this device (auto: AUTO_BATCH_FORM's)."""
        if self.batch_form != "auto":
            return self.batch_form
        goal = OBJECTIVES[self.objective]
        return AUTO_BATCH_FORM[on_gpu] if goal.takes(AUTO_BATCH_FORM[on_gpu]) else goal.batch_forms[0]

    def compile_backend(self, on_gpu: bool) -> str | None:
        """The torch.compile backend --compile means on this device, or None (auto: inductor on a GPU only)."""
        if self.compile in COMPILE_OFF or (self.compile == "auto" and not on_gpu):
            return None
        return "inductor" if self.compile == "auto" else self.compile

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


@dataclasses.dataclass(frozen=True)
class ResumeRule:
    """Whether one setting may differ between a run and the invocation that resumes it, and why."""

    setting: str
    """Its key in RUN/train_config.json (a TrainConfig field, or what the run records beside them)."""
    flag: str
    """How the README and the messages name it."""
    may_change: bool
    why: str
    data_key: str | None = None
    """The key of the saved data position that records it too (the streams refuse a position that differs)."""
    read: Callable[[dict], Any] | None = None
    """Its value in a recorded config (default: the `setting` key); None in either record: nothing to compare."""

    def value(self, record: dict) -> Any:
        return self.read(record) if self.read else record.get(self.setting)


def _span(record: dict) -> bool:
    return "sbo" in heads_of((record.get("masking") or {}).get("strategy"))  # the head span masking adds


RESUME_RULES = (
    ResumeRule("world_size", "the number of ranks", True, "any divisor of the run's --partitions; ZeRO 1-3 state is converted to a "
               "DeepSpeed universal checkpoint on the fly, ZeRO-0 in fp32 loads as it is; phase-2 data (--phase2-data) resumes "
               "only on the same number of ranks"),
    ResumeRule("batch_size", "--batch-size", True, "the largest micro batch; grad accumulation follows"),
    ResumeRule("num_workers", "--num-workers", True, "the batch order does not depend on it"),
    ResumeRule("stop_after", "--stop-after", True, "how far this invocation goes"),
    ResumeRule("max_steps", "--max-steps", True, "the schedule follows the new length"),
    ResumeRule("batch_form", "--batch-form", True, "the same rows and masks in another shape (static caps the "
               "predictions of a row at --max-predictions, which changes the masks of rows that selected more)"),
    ResumeRule("global_batch_size", "--global-batch-size", False, "the data position and the schedule are counted in its steps",
               data_key="global_batch"),
    ResumeRule("partitions", "--partitions", False, "a step's pairs and masks are drawn per partition", data_key="partitions"),
    ResumeRule("family", "--family", False, "the network's heads and the names its weights export under"),
    ResumeRule("objective", "--objective", False, "the networks it trains and what export writes"),
    ResumeRule("languages", "--languages", False, "a language embedding each, in this order",
               read=lambda record: list(record.get("languages") or ())),  # JSON's list or a config's tuple; none before XLM
    ResumeRule("generator_fraction", "--generator-fraction", False, "the generator's shapes"),
    ResumeRule("model", "--model", False, "the shapes of the weights"),
    ResumeRule("pre_layernorm", "--pre-layernorm", False, "the layers' structure"),
    ResumeRule("zero_stage", "--zero-stage", False, "the layout of the saved optimizer state"),
    ResumeRule("data_fingerprint", "--data", False, "its shards or vocabulary", data_key="manifest"),
    ResumeRule("masking_family", "--masking (span or not)", False, "span masking's SBO head has weights of its own", read=_span),
    ResumeRule("seed", "--seed", False, "the data order and the masks derive from it", data_key="seed"),
    ResumeRule("shuffle_window", "--shuffle-window", False, "the batch order depends on it", data_key="shuffle_window"),
    ResumeRule("length_buckets", "--length-buckets", False, "the batch order depends on it", data_key="length_buckets"),
    ResumeRule("mixture", "the --mix components", False, "the batch order depends on their data and probabilities",
               data_key="mixture", read=lambda record: None),  # compared by the mixture's saved position (trainer/data/mixture.py)
)
"""The one list of what a resume may change; everything a run records and this list does not name is free."""

DATA_POSITION_KEYS = tuple(r.data_key for r in RESUME_RULES if r.data_key and not r.may_change and r.data_key != "mixture")
"""The keys of a saved data position that the resuming stream must share (trainer/data/stream.py)."""


def resume_refusal(run_dir: str, before: dict, now: dict) -> str | None:
    """One line for the first setting that may not change and differs between the two records, or None."""
    for rule in RESUME_RULES:
        kept, asked = rule.value(before), rule.value(now)
        if not rule.may_change and kept is not None and asked is not None and kept != asked:
            return (f"{run_dir}: its checkpoint was saved with {rule.setting}={kept!r}, this run has {asked!r} ({rule.why}); "
                    f"resume with the same {rule.flag} or use a new --output")
    return None
