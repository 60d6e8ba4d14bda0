"""A run's start-up, in order: where the run starts, what trains, what it reads (`start`, which trainer/loop.py's
`train` calls first).

  0. `family_of(config, given)` and `settle(config, given)` (trainer/pretrain.py, in every process before any rank
     starts): the family (--family, or --data's: schemas/families.py); then a new run from random weights, a new run
     from `--init-from SOURCE` (its recipe defaults: trainer/start/defaults.py), or the resume of either; a
     --init-from on a run that has checkpoints is refused, since rerunning without it resumes.
  1. where it starts: the data checked (trainer/start/preflight.py), the source to start from (a new --init-from
     run), the run's batch resolved for this world size, RUN/ prepared and its record written, and the checkpoint
     to resume, verified (trainer/checkpoint/resume.py).
  2. what trains: the model (the source's weights, or random) inside the DeepSpeed engine, with the checkpoint's
     state loaded when the run resumes; the heads a source lacked warm up on its held weights first (warmup.py).
  3. what it reads: the phase's data streams, at the saved position when resuming.

In:  the TrainConfig of the flags, the flags the user gave, the Runtime. Out: a `Started` run: its settled config
     and data, the model and its engine, the phase and the step to start at.
"""

from __future__ import annotations

import dataclasses
import json
import os

from schemas import ContractError, Manifest, encoder_layout, families, objectives
from trainer.builders import Phase, build_engine, build_model, open_phase, phase_of
from trainer.checkpoint import resume, store
from trainer.checkpoint.resume import recorded
from trainer.config import TrainConfig, TrainError
from trainer.data.mixture import MixtureStream
from trainer.data.mixture_config import ComponentSpec
from trainer.run.runtime import Runtime
from trainer.start import defaults, preflight, rate, warmup
from trainer.start.sources import ARCHITECTURE, open_source

ARCHITECTURE_KEY = "init_architecture"
"""The key of RUN/train_config.json holding an --init-from run's architecture, so its resume needs no source."""


def family_of(config: TrainConfig, given: set[str]) -> tuple[TrainConfig, list[str]]:
    """The config with its family settled: --family, or the family of --data's vocabulary and packing (its
    manifest); refused in one line when the data is not that family's (another tokenizer, NSP pairs for RoBERTa).
    NSP is off (weight 0) unless the family has it and the rows are NSP pairs; --nsp-weight is then an error. A
    family with a sampling default (XLM-R's alpha 0.3) sets --mix-alpha when --mix is given without it. A manifest
    that cannot be read leaves the config as it is: preflight says why in one line, after the other flags' checks
    (start() tries again first, in case it has become readable since)."""
    try:
        manifest = Manifest.read(config.data)
    except (ContractError, OSError):
        return config, []
    packing = manifest.packing["mode"]
    mix, notes = config.mix, []
    if config.sample_languages:
        if config.mix:
            raise TrainError("--sample-languages makes the --mix components itself (one per language of --data): give one or the other")
        mix = language_components(config.data, manifest)
        notes.append(f"--sample-languages: {len(mix)} languages ({', '.join(ComponentSpec.parse(m).label for m in mix)})")
    try:
        row = families.family(config.family) if config.family else families.of_data(manifest.tokenizer, packing)
    except ContractError as e:
        raise TrainError(str(e)) from None
    refusal = families.refusal(row, manifest.tokenizer, packing)
    if refusal:
        raise TrainError(refusal)
    goal = objectives.objective(config.objective)
    if not goal.trains(row.name):
        raise TrainError(f"--objective {goal.name} trains the {' or '.join(goal.families)} family; this run's is {row.name}"
                         + ("" if config.family else " (from --data's vocabulary)"))
    if not goal.variants and (config.masking.heads or config.pre_layernorm):
        raise TrainError(f"--objective {goal.name} has no SBO head (--masking span) nor a pre-LN network (--pre-layernorm)")
    changes = {"family": row.name, **({"mix": mix} if config.sample_languages else {})}
    if not (row.nsp and packing == "nsp" and goal.nsp):
        if "nsp_weight" in given and config.nsp_weight:
            why = (f"--family {row.name} has no NSP head" if not row.nsp else f"--objective {goal.name} has no NSP head"
                   if not goal.nsp else f"--data's {packing} rows carry no next-sentence label")
            raise TrainError(f"--nsp-weight {config.nsp_weight:g}: {why}")
        changes["nsp_weight"] = 0.0
    if row.languages and not config.languages:
        changes["languages"], pairs = data_languages(config.data, manifest, mix)
        notes.append(f"languages: {', '.join(changes['languages'])} (--data's and --mix's)"
                     + (f"; TLM on {', '.join(pairs)}'s translation pairs" if pairs else ""))
    elif config.languages and not row.languages:
        raise TrainError(f"--languages: the {row.name} family has no language embeddings (the xlm family has)")
    weighted = any(ComponentSpec.parse(m).weight is not None for m in mix)
    if row.mix_alpha is not None and mix and config.mix_alpha is None and not weighted:
        changes["mix_alpha"] = row.mix_alpha
        notes.append(f"mix_alpha {row.mix_alpha:g} ({row.name}'s language sampling)")
    recipe = [(key, value) for key, value in row.train_defaults if key not in given]  # the family's own recipe
    masking = {key.split(".", 1)[1]: value for key, value in recipe if key.startswith("masking.")}
    changes.update({key: value for key, value in recipe if not key.startswith("masking.")})
    if masking:
        changes["masking"] = dataclasses.replace(config.masking, **masking)
    if recipe:
        notes.append(f"{row.name}'s recipe: " + ", ".join(f"--{key.split('.')[-1].replace('_', '-')} {value:g}"
                                                          if isinstance(value, float) else f"--{key.replace('_', '-')} {value}"
                                                          for key, value in recipe))
    return dataclasses.replace(config, **changes), notes


def data_languages(data: str, manifest: Manifest, mix: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """(the languages of --data and the --mix components, sorted: a tlm run's packing.languages, a monolingual run's
    row sources (of its named source only, for a component that names one); the components of translation pairs by
    label); a TrainError with fewer than two languages."""
    found, pairs = set(), []
    for spec in [ComponentSpec(data=data, name="--data"), *map(ComponentSpec.parse, mix)]:
        try:
            read = manifest if spec.data == data else Manifest.read(spec.data)
        except (ContractError, OSError) as e:
            raise TrainError(f"--mix {spec.data}: {e}") from None
        found |= set(read.packing.get("languages") or ([spec.source] if spec.source else read.sources))
        if read.packing.get("languages"):
            pairs.append(spec.label)
    if len(found) < 2:
        raise TrainError(f"the xlm family embeds two or more languages; --data and --mix hold {', '.join(sorted(found)) or 'none'} "
                         "(add a --mix component of another language, e.g. prep --packing tlm pairs, or name them: --languages)")
    return tuple(sorted(found)), pairs


def language_components(data: str, manifest: Manifest) -> tuple[str, ...]:
    """--sample-languages: a --mix component per language of --data (`fr=DATA,source=fr`), from a prep run that
    identified languages (its rows' sources are language codes); a TrainError otherwise."""
    if not (manifest.config.get("languages") or {}).get("identify_languages"):
        raise TrainError(f"--sample-languages: --data {data} was not prepared with --identify-languages, so its rows' "
                         f"sources ({', '.join(sorted(manifest.sources))}) are inputs, not languages")
    return tuple(f"{code}={data},source={code}" for code in sorted(manifest.sources))


def settle(config: TrainConfig, given: set[str]) -> tuple[TrainConfig, list[str]]:
    """The config the run trains with, and for an --init-from run the lines to print: its learning rate and why, the
    other continued-pretraining defaults applied (see the module)."""
    before = recorded(config.output)  # None for a new run
    if before is not None and config.init_from:
        raise TrainError(f"--init-from {config.init_from}: {config.output} already has checkpoints (latest "
                         f"{store.latest_tag(config.output)}), so this is a resume: rerun without --init-from")
    source_url = before.get("init_from") if before is not None else config.init_from
    if not source_url:
        return dataclasses.replace(config, model=config.model or "tiny"), []
    config = dataclasses.replace(config, init_from=source_url)
    if before is not None:  # a resume: the source may be gone; the run recorded what it took from it
        started = rate.Rate(before.get("lr", config.lr), f"the rate this run started with ({config.output}/train_config.json)")
        return defaults.with_defaults(config, given, before.get("masking"), started)
    source = open_source(source_url)
    found = defaults.agreement(config, source.architecture)
    if found:
        raise TrainError(found)
    if source.architecture.get("pre_layernorm"):
        config = dataclasses.replace(config, pre_layernorm=True)
    chosen = rate.for_source(source.architecture["hidden_size"], source.training, source.training_where)
    return defaults.with_defaults(config, given, source.masking, chosen)


@dataclasses.dataclass
class Started:
    """A run ready for its first step: its settled config and data, the model in its engine, the phase it is in."""

    config: TrainConfig
    manifest: Manifest
    model: object
    engine: object
    phase: Phase
    step: int
    next_phase: Phase | None = None
    """Phase 2 when the run is in phase 1 and will reach it (--phase2-data), opened at the start so that its data's
    errors stop the run before its first step, not at --phase2-start; its streams read nothing until then."""
    next_at: int | None = None
    """The step at which the run moves to next_phase."""
    head_warmup: int = 0
    """The steps of the heads' warm-up (trainer/start/warmup.py; 0: none): logged steps up to it are marked."""


def start(config: TrainConfig, rt: Runtime) -> Started:
    # 1. where it starts: the data, a new run's source (or a resumed --init-from run's recorded architecture), RUN/
    if config.family is None:  # its manifest was unreadable when the flags were checked: settled if readable now
        config, _ = family_of(config, set())
    preflight.check(config, rt)  # manifests, shard sizes and the source, before anything is written or trained
    manifest = Manifest.read(config.data)
    before = recorded(config.output)
    source, architecture = None, None
    if config.init_from and before is None:
        source = open_source(config.init_from)
        architecture = {k: source.architecture[k] for k in ARCHITECTURE if k in source.architecture}
    elif config.init_from:
        architecture = before.get(ARCHITECTURE_KEY)
    # the run's global batch and partitions, this world size's micro batches; RUN/ prepared; the checkpoint to resume
    # a resume keeps its warm-up and its source's sentence pooling (what export's card says); a new run records the pooling
    kept = ({k: before.get(k) for k in (warmup.RECORD_KEY, encoder_layout.RUN_KEY)} if before and config.init_from else
            {encoder_layout.RUN_KEY: source.pooling} if source is not None and source.pooling else {})
    config, tag, universal = resume.prepare(config, manifest, rt, before,
                                            extra={ARCHITECTURE_KEY: architecture, **kept} if architecture else None)
    # 2. what trains: the model (the source's weights, or random) in its DeepSpeed engine, a checkpoint loaded
    model = build_model(config, manifest, source=source, architecture=architecture, log=rt.log)
    if source is not None:  # the heads the source lacked, which the run trains, warm up first (recorded for a resume)
        heads, parts = warmup.plan(config, source.lacking, model.config)
        if rt.rank == 0:
            warmup.record(config.output, heads)
        if heads:
            rt.log(heads.line(parts))
    else:
        heads = warmup.recorded(before.get(warmup.RECORD_KEY)) if before and config.init_from else None
    engine = build_engine(model, config, rt, load_universal=universal is not None, head_warmup=heads)
    client = resume.load(engine, config.output, tag, universal, rt)
    # 3. what it reads: the data of the phase the run is in, at its saved position when resuming
    step = client["step"] if client else 0
    numbers = sorted({phase_of(step, config), phase_of(max(step, config.max_steps - 1), config)})  # the phases ahead
    phase, *later = [open_phase(n, config, rt, model, manifest.vocab["sha256"]) for n in numbers]
    if isinstance(phase.train, MixtureStream) and rt.rank == 0:
        with open(os.path.join(config.output, "mixture.json"), "w") as f:
            json.dump(phase.train.describe(), f, indent=2)
    if client and client.get("phase", 1) == phase.number:
        saved_world = client["data"].get("world_size", rt.world_size)
        if phase.number == 2 and saved_world != rt.world_size:
            raise TrainError(f"{config.output}: phase-2 data is laid out per rank and resumes only on the {saved_world} ranks "
                             f"that saved it, this run has {rt.world_size}")
        phase.train.load_state_dict(client["data"])
    if client:
        rt.log(f"resumed from {tag} at step {step} (phase {phase.number})")
    return Started(config, manifest, model, engine, phase, step, *later, config.phase2_begins if later else None,
                   head_warmup=heads.steps if heads else 0)
