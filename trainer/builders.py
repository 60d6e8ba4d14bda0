"""What a run is built from, given its TrainConfig: the model, the masker, the optimizer and schedule inside
the DeepSpeed engine, and each training phase's data streams.

In:  a TrainConfig, the manifest of --data, the Runtime (rank, world size, device, precision).
Out: the network of the run's objective (trainer/model/__init__.py `build`: BertForPretraining for mlm in every family,
     ElectraForPretraining for electra), a Masker, a DeepSpeed engine (ZeRO stage and precision in the JSON `deepspeed_config`
     generates, a user's --deepspeed-config merged over it key by key so it has the last word), and a Phase
     (manifest, train stream, validation stream, FLOPs per token).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from process.precision import Precision
from schemas import Manifest
from schemas.jsonl import file_object
from schemas.pairs import NSP_PAIRS
from trainer.config import TrainConfig, TrainError
from trainer.data import ShardStream
from trainer.data.batch_forms import FORMS, default_predictions
from trainer.data.mixture import MixtureStream
from trainer.data.mixture_config import ComponentSpec, MixtureConfig
from trainer.masking import Masker
from trainer.metrics import train_flops_per_token
from trainer.model import BertForPretraining, ElectraForPretraining, ModelConfig, build
from trainer.optim import adamw, parameter_groups
from trainer.run.runtime import Runtime
from trainer.start.warmup import lr_factors


def build_maskers(config: TrainConfig, manifest: Manifest, predictions: int | None = None) -> tuple[Masker, Masker]:
    """The training masker, and the validation one: the same masking at --eval-mask-prob; `predictions` (a static
    batch form's slots a row) caps both."""
    counts = manifest.read_token_counts() if config.masking.random_token_dist == "unigram" else None
    masking = config.masking if predictions is None else dataclasses.replace(config.masking, max_predictions=predictions)
    return tuple(Masker.for_manifest(m, manifest, unigram_counts=counts)
                 for m in (masking, dataclasses.replace(masking, mask_prob=config.eval_mask_prob)))


def batch_shape(config: TrainConfig, rt: Runtime, longest: Callable[[], int]) -> dict[str, Any]:
    """The streams' batch form options (trainer/data/batch_forms.py): the form --batch-form means on this device, and a
    fixed form's row length (`longest()`: the phase's longest rows, every --mix component's) and prediction slots a row
    (--max-predictions, or NVIDIA's default for that length)."""
    form = FORMS[config.batch_form_for(rt.on_gpu)]
    if not form.fixed_predictions:
        return {"batch_form": form.name}
    max_seq_len = longest()
    predictions = config.masking.max_predictions or default_predictions(config.masking.mask_prob, max_seq_len)
    return {"batch_form": form.name, "predictions": predictions, "static_len": max_seq_len}


def build_model(config: TrainConfig, manifest: Manifest, *, source=None, architecture: dict | None = None,
                log=print) -> BertForPretraining | ElectraForPretraining:
    """The model: the --model preset's shape with random weights, or `architecture` (an --init-from source's, or what
    a resumed --init-from run recorded) with the weights of `source` (trainer/start/sources.py) where it has them
    and the parts it lacks (heads) initialised fresh from --seed; the run's family (settled from the data:
    trainer/start/steps.py), dropout and loss weights either way; the heads its masking strategy adds (span: SBO)."""
    # the family's NSP head and language embeddings as the start-up settled them (steps.family_of: --nsp-weight 0
    # unless the family, the objective and the rows have NSP; --languages for a family that embeds languages)
    nsp = manifest.row_format.kind == NSP_PAIRS.kind  # packed rows: no label
    training = {"family": config.family or "bert", "mlm_weight": config.mlm_weight, "nsp_weight": config.nsp_weight if nsp else 0.0,
                "objective": config.objective, "generator_fraction": config.generator_fraction,
                "discriminator_weight": config.discriminator_weight,
                "sbo_weight": config.sbo_weight, "use_sbo": "sbo" in config.masking.heads, "hidden_dropout": config.dropout,
                "attention_dropout": config.dropout if config.attention_dropout is None else config.attention_dropout,
                "sbo_max_relative_positions": max(config.masking.sbo_max_positions_per_span, 1),
                **({"languages": config.languages} if config.languages else {})}
    pad = manifest.special_id("pad_token")
    try:
        if architecture is not None:
            # the source's generator, and its languages (its language embeddings' order)
            fixed = {k: architecture[k] for k in ("generator_fraction", "languages") if k in architecture}
            model_config = ModelConfig.from_dict({**architecture, **training, **fixed})
        else:
            model_config = ModelConfig.preset(config.model or "tiny", vocab_size=manifest.vocab["size"],
                                              pad_token_id=pad, pre_layernorm=config.pre_layernorm, **training)
    except ValueError as e:  # e.g. every loss weight zero
        raise TrainError(str(e)) from None
    if manifest.vocab["size"] > model_config.vocab_size:
        raise TrainError(f"--data's vocabulary has {manifest.vocab['size']} tokens, the model's embeddings {model_config.vocab_size}")
    if pad != model_config.pad_token_id:
        raise TrainError(f"--data's padding token is id {pad}, the model's pad_token_id {model_config.pad_token_id}")
    if config.phase2_rope_theta is not None and not model_config.row.network:
        raise TrainError(f"--phase2-rope-theta: the {model_config.family} family has learned positions, no rotary base")
    if manifest.max_seq_len + model_config.position_offset > model_config.max_position_embeddings:
        raise TrainError(f"rows are up to {manifest.max_seq_len} tokens, the model's positions stop at "
                         f"{model_config.max_position_embeddings - model_config.position_offset}")
    model = build(model_config, seed=config.seed)  # every part random: the heads a source lacks stay so
    if source is not None:
        state, lacking, dropped = source.state_dict(model_config)
        with torch.no_grad():
            _, unexpected = model.load_state_dict(state, strict=False)  # missing: the fresh parts and tied entries
        assert not unexpected, unexpected  # from_transformers keeps only our names
        fresh = ", ".join(lacking) if lacking else "none"
        log(f"init-from {source.url} ({source.kind}): {len(state)} tensors loaded; fresh from --seed: {fresh}"
            + (f"; ignored {len(dropped)} tied or buffer entries" if dropped else ""))
    return model


def lr_lambda(config: TrainConfig):
    """The learning-rate factor of each step: linear warmup over `config.warmup` steps, then the decay (wsd: the peak,
    then 1 - sqrt(progress) over the last --decay-ratio of the steps)."""
    warmup = config.warmup
    cooldown = max(1, round(config.decay_ratio * config.max_steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if config.schedule == "constant":
            return 1.0
        if config.schedule == "wsd":
            start = max(warmup, config.max_steps - cooldown)
            return 1.0 if step < start else max(0.0, 1.0 - ((step - start + 1) / max(1, config.max_steps - start)) ** 0.5)
        progress = (step - warmup) / max(1, config.max_steps - warmup)
        remaining = max(0.0, 1.0 - progress)
        return remaining if config.schedule == "linear" else remaining**0.5

    return factor


def batch_share(config: TrainConfig, step: int) -> float:
    """The share of its global batch step `step` trains on: 1/8 growing linearly to 1 over --batch-warmup-ratio of
    the steps (ModernBERT's batch-size warmup), 1 after it and when off."""
    steps = round(config.batch_warmup_ratio * config.max_steps)
    return 1.0 if step >= steps else 0.125 + 0.875 * step / steps


def phase_rope(model, config: TrainConfig, phase: int) -> None:
    """A rotary network's global base for `phase`: --phase2-rope-theta from phase 2 on (context extension). The model's
    config changes with it, so a checkpoint (and its export's config.json) records the base its weights run at."""
    if phase == 2 and config.phase2_rope_theta is not None and model.config.global_rope_theta != config.phase2_rope_theta:
        model.config = dataclasses.replace(model.config, global_rope_theta=config.phase2_rope_theta)


def build_engine(model: BertForPretraining | ElectraForPretraining, config: TrainConfig, rt: Runtime, load_universal: bool = False,
                 head_warmup=None):
    """The DeepSpeed engine; `head_warmup` (trainer/start/warmup.py): the source's weights in groups of their own,
    held at rate 0 for its steps."""
    import deepspeed

    factor, ds_config = lr_lambda(config), deepspeed_config(config, rt.resolved_precision)
    if config.schedule_warning():
        rt.log(config.schedule_warning())
    if config.optimizer == "lamb":
        if not rt.on_gpu:
            raise TrainError("--optimizer lamb uses DeepSpeed's fused CUDA kernel; on CPU use --optimizer adamw")
        from deepspeed.ops.lamb import FusedLamb

        optimizer = FusedLamb(parameter_groups(model, config.weight_decay, head_warmup and head_warmup.held), lr=config.lr)
    else:
        optimizer = adamw(model, lr=config.lr, weight_decay=config.weight_decay, eps=1e-6, held=head_warmup and head_warmup.held)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factors(factor, config, head_warmup, optimizer.param_groups))
    if load_universal:  # the latest checkpoint was saved on another world size (trainer/checkpoint/resume.py)
        ds_config["checkpoint"] = {**ds_config.get("checkpoint", {}), "load_universal": True}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    if engine.zero_optimization_stage() == 0:
        _lighter_stage_zero(engine, data_parallel=_world_size())
    backend = config.compile_backend(rt.on_gpu)
    if backend:  # the engine's own compile, so ZeRO's hooks and the compiled graph agree (DeepSpeed >= 0.14)
        # one shape for the whole run (the static batch form) lets inductor replay each step as CUDA graphs: no launch
        # per kernel, what small batches are bound by
        graphs = backend == "inductor" and rt.on_gpu and config.batch_form_for(rt.on_gpu) == "static"
        engine.compile(backend=backend, compile_kwargs={"mode": "reduce-overhead"} if graphs else {})
        rt.log(f"compile: {backend}{' (CUDA graphs)' if graphs else ''} (--compile {config.compile})")
    return engine


def _lighter_stage_zero(engine, data_parallel: int) -> None:
    """Take out of a ZeRO-0 step the host work that changes nothing, same arithmetic.

    NOTE: DeepSpeed's stage 0 clips fp32 gradients with a Python loop over the parameters (a norm each and a
    multiply each: about 400 kernel launches a step for BERT-base), where torch's `clip_grad_norm_` takes the
    same norm, max_norm / (norm + 1e-6) clamped at 1, in a few foreach launches on a GPU. DeepSpeed calls it only
    at stage 0 with a plain torch optimizer (fp32 or autocast weights, after a GradScaler's unscale), on
    gradients already averaged over the ranks, so every rank clips the same gradients by the same norm, as
    DeepSpeed's does. And one rank has nothing to all-reduce: DeepSpeed would still flatten every gradient,
    scale it by 1 and copy it back each step (tests/helpers.py dispatched_ops counts both)."""
    params = [p for p in engine.module.parameters() if p.requires_grad]

    def clip_fp32_gradients() -> None:
        torch.nn.utils.clip_grad_norm_(params, engine.gradient_clipping())  # foreach where the device has it

    engine.clip_fp32_gradients = clip_fp32_gradients
    if data_parallel == 1:
        engine.enable_backward_allreduce = False


def deepspeed_config(config: TrainConfig, precision: str | Precision) -> dict[str, Any]:
    """The DeepSpeed JSON for this run (the optimizer and scheduler are built in build_engine and handed in).
    `precision` is the resolved one (process/precision.py); a bare name means DeepSpeed's own mode for it."""
    if isinstance(precision, str):
        precision = Precision(precision, False, "")
    stage = config.zero_stage_for(_world_size())
    if stage == 0 and precision.name == "bf16" and not precision.autocast:
        # NOTE: DeepSpeed's bf16 weights at stage 0 go through its FP16_Optimizer wrapper, which tests every
        # gradient for inf/NaN with a host read each (214 host syncs a step for BERT-base, 2 with autocast).
        # Autocast over fp32 weights, as on a CPU, measured 1.74x at batch 64 on an H200 (bench/README.md).
        precision = dataclasses.replace(precision, autocast=True)
    ds: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": config.batch_size,
        "gradient_accumulation_steps": config.grad_accum,
        "gradient_clipping": config.grad_clip,
        "zero_optimization": {"stage": stage},
        **precision.deepspeed_sections(),
        "steps_per_print": 1 << 30,  # the trainer prints its own progress line
        "wall_clock_breakdown": False,
    }
    if config.deepspeed_config:
        ds = _merge(ds, read_user_deepspeed_config(config.deepspeed_config))
    return ds


def _world_size() -> int:
    """The job's ranks (1 before torch.distributed is up): what --zero-stage auto is resolved on when the config
    was not resolved by trainer/checkpoint/resume.py first."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


# Keys of a user's DeepSpeed JSON that the trainer's own flags own: the loader batches by --batch-size and
# the loop accumulates --grad-accum micro batches, and the optimizer and scheduler are built in build_engine.
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
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TrainError(f"--deepspeed-config {path}: cannot read ({e.strerror or e})") from None
    user = file_object(raw, f"--deepspeed-config {path}", TrainError)
    for key, owner in _FLAG_OWNED.items():
        if key in user:
            raise TrainError(f"--deepspeed-config {path}: {key!r} is set by {owner}; remove it from the JSON")
    return user


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@dataclasses.dataclass
class Phase:
    """The data of one training phase (BERT: 90% of steps at seq 128, then 10% at 512, from two prep runs)."""

    number: int
    manifest: Manifest
    train: ShardStream | MixtureStream
    valid: ShardStream | None
    flops_per_token: float
    trained_seq_len: int
    """The longest sequence length the run has trained on once it is in this phase: phase 1's pairs (each --mix
    component's), then phase 2's. Positions beyond it were never updated by pretraining, whatever
    max_position_embeddings the architecture holds; a checkpoint records it, export writes it as model_max_length."""


def open_phase(number: int, config: TrainConfig, rt: Runtime, model: BertForPretraining | ElectraForPretraining, vocab_sha256: str) -> Phase:
    url = config.data if number == 1 else config.phase2_data
    manifest = Manifest.read(url)
    if manifest.vocab["sha256"] != vocab_sha256:
        raise TrainError(f"{manifest.url}: phase {number} data uses another vocabulary than --data (sha256 differs)")
    positions = model.config.max_position_embeddings - model.config.position_offset
    if manifest.max_seq_len > positions:
        raise TrainError(f"{manifest.url}: rows up to {manifest.max_seq_len} tokens, the model's positions stop at {positions}")
    mixed = config.mix if number == 1 else ()
    shape = batch_shape(config, rt, lambda: max([manifest.max_seq_len] + [Manifest.read(ComponentSpec.parse(m).data).max_seq_len for m in mixed]))
    masker, valid_masker = build_maskers(config, manifest, shape.get("predictions"))
    batch = config.batch_size if number == 1 else (config.phase2_batch_size or config.batch_size)
    common = {"batch_size": batch, "masker": masker, "rank": rt.rank, "world_size": rt.world_size, "languages": model.config.languages,
              "verify_checksums": config.verify_checksums, "cache_dir": config.cache_dir, "shuffle_window": config.shuffle_window,
              "length_buckets": config.length_buckets, "pad_to_multiple_of": config.pad_to_multiple_of,
              **shape}  # every stream: train, --mix, validation
    # phase 1 keeps the run's global batch in its canonical partitions (trainer/checkpoint/resume.py resolved them);
    # phase 2 is laid out per rank, so it resumes on the same number of ranks only
    batching = {"global_batch": config.global_batch_size, "partitions": config.partitions} if number == 1 else {}
    if config.mix and number == 1:
        mixture = MixtureConfig(components=tuple(ComponentSpec.parse(m) for m in config.mix), alpha=config.mix_alpha)
        train_stream = MixtureStream(mixture, split="train", seed=config.seed, **common, **batching)
        if train_stream.components[0].manifest.vocab["sha256"] != vocab_sha256:
            raise TrainError("the --mix components use another vocabulary than --data (sha256 differs)")
        if rt.rank == 0:
            rt.log("mixture: " + ", ".join(f"{c['name']} p={c['probability']:.3f}" for c in train_stream.describe()["components"]))
    else:
        train_stream = ShardStream(manifest, split="train", seed=config.seed + 100 * (number - 1), **common, **batching)
    valid = None
    if manifest.split_shards("validation"):
        valid = ShardStream(manifest, split="validation", seed=config.seed + 1, epochs=1, **{**common, "masker": valid_masker})
    cfg = model.config
    flops = train_flops_per_token(model.num_parameters(), cfg.num_layers, cfg.hidden_size, manifest.max_seq_len)
    if getattr(train_stream, "max_seq_len", manifest.max_seq_len) > positions:
        raise TrainError(f"--mix rows are up to {train_stream.max_seq_len} tokens, the model's positions stop at {positions}")
    lengths = []
    if number == 1 or config.phase2_begins > 0:  # phase 2 from step 0 means phase 1 never ran
        components = getattr(train_stream, "components", None) if number == 1 else None
        phase1 = manifest if number == 1 else Manifest.read(config.data)
        lengths += [c.manifest.max_seq_len for c in components] if components else [phase1.max_seq_len]
    if number == 2:
        lengths.append(manifest.max_seq_len)
    return Phase(number, manifest, train_stream, valid, flops, max(lengths))


def phase_of(step: int, config: TrainConfig) -> int:
    return 2 if config.phase2_data and step >= config.phase2_begins else 1


