"""`clozeforge senses fit|predict|evaluate`: word sense disambiguation by the nearest sense embedding.

    clozeforge senses fit MODEL --train URL --output DIR          DIR/senses.json, senses.npy (+ standardize.npz)
    clozeforge senses predict DIR --input URL --output X.jsonl    per row: the nearest sense, the runner-up, the margin
    clozeforge senses evaluate MODEL|RUN --train URL [--test URL] --output DIR [--checkpoints all] [--baseline scratch]

In:  an export (or any transformers encoder directory; evaluate also takes a training RUN, its latest checkpoint or
     those of --checkpoints exported on the fly as `clozeforge finetune` does: finetune/models.py); sense-labelled
     tables (instances.py: every row kept or dropped with a counted reason, a bad row one line naming file and line).
Out: fit: the sense embeddings with the model, layers, standardisation and data account they were made with.
     predict: one JSON line per kept row. evaluate: DIR/results.json (per arm: 1-NN accuracy, MFS and random with
     their SE, the paired gain over MFS; the data accounts), DIR/senses.md, and for a sweep DIR/senses.png: accuracy
     over pretraining steps, beside the fine-tuning gain of `clozeforge finetune RUN --checkpoints ...`
     (--finetune-results). Without --test, evaluate scores --train by leave-one-out (senses.py).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import sys
import tempfile

import numpy as np

from downstream.contextual import instances, senses
from downstream.contextual.encoder import Encoder
from downstream.contextual.plots import plot_sweep, short
from downstream.contextual.standardize import Stats, StatsError, fit_or_load
from downstream.contextual.vectors import LayersError, WordVectors, layer_indices
from downstream.stats import paired_difference
from process.devices import DEVICES
from process.exits import fail
from process.outputs import OutputDirError, check_destination, staged_directory, written_by
from schemas import ContractError
from schemas.config import Config, add_flags, flag, from_flags
from schemas.tables import QUOTINGS, TableError, TableReading

OWNER = "clozeforge senses"
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class Common(Config):
    batch_size: int = 32
    """Texts per forward pass."""
    device: str = flag(default="auto", choices=DEVICES)
    """Where the model runs: auto takes a CUDA GPU when torch sees one."""
    skip_bad_rows: bool = False
    """Count a bad row (a span outside its text, a word the tokenizer only knows as [UNK], a lemma with no fitted
    sense, a sense with no training instance, a malformed record) as a drop at its line instead of stopping."""
    quoting: str = flag(choices=QUOTINGS, doc_from=(TableReading, "quoting"))

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitConfig(Common):
    model: str = flag(default="", hidden=True)
    train: str
    """Sense-labelled instances: `text`, `start`/`end` (or `index`), `sense`, optionally `lemma`."""
    output: str = flag(metavar="DIR")
    """Directory to write (senses.json, senses.npy, standardize.npz); replaced whole."""
    overwrite: bool = False
    """Replace an --output directory this command did not write."""
    vectors: WordVectors = WordVectors()  # noqa: RUF009 (frozen)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PredictConfig(Common):
    senses: str = flag(default="", hidden=True)
    input: str
    """Instances to disambiguate: `text`, `start`/`end` (or `index`), `lemma` when the senses were fitted with one."""
    output: str = flag(metavar="FILE")
    """JSON lines: per kept row its line, lemma, sense, cosine, runner_up, runner_up_cosine, margin (and gold)."""
    model: str | None = flag(default=None, metavar="DIR")
    """The model to read --input with (default: the one the senses were fitted with); same shape required."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluateConfig(FitConfig):
    test: str | None = None
    """Held-out instances; without it every --train instance is scored by leave-one-out."""
    checkpoints: str | None = flag(default=None, metavar="all|STEP,...")
    """With a RUN directory: evaluate each of these checkpoints (senses.png: accuracy over pretraining steps)."""
    baseline: str = flag(default="none", choices=("none", "scratch"))
    """scratch: also the same architecture from random weights (seeded by --seed)."""
    seed: int = 0
    """The scratch model's initialisation."""
    finetune_results: tuple[str, ...] = flag(default=(), metavar="RESULTS_JSON")
    """results.json of `clozeforge finetune RUN --checkpoints ...`: its gain per step drawn beside (repeat)."""


_foreign = written_by(OWNER, "results.json", "senses.json")
"""A directory is ours when its results.json or senses.json says so."""


def _note(line: str) -> None:
    print(f"clozeforge senses: note: {line}", file=sys.stderr, flush=True)


def _read(url: str, config: Common, need_sense: bool):
    return instances.read(url, need_sense=need_sense, skip_bad_rows=config.skip_bad_rows, quoting=config.quoting)


def _encoder(model_dir: str, config: Common, scratch_seed: int | None = None) -> Encoder:
    from process.devices import resolve_device

    return Encoder(model_dir, resolve_device(config.device), scratch_seed=scratch_seed)


def _vectors(encoder: Encoder, config, split):
    """(the split's Instances, the layers, the statistics) for `encoder`, as config.vectors says."""
    layers, note = layer_indices(config.vectors.layers, encoder.num_layers)
    stats = fit_or_load(encoder, config.vectors, layers, per_layer=False, batch_size=config.batch_size, log=_note)
    data = instances.Instances.encode(split, encoder, layers, skip_bad_rows=config.skip_bad_rows,
                                      batch_size=config.batch_size, standardize=stats)
    if note:  # once the inputs hold: an error stays the one line
        _note(note)
    return data, layers, stats


def _accounted(split) -> str:
    dropped = f", dropped {dict(sorted(split.dropped.items()))}" if split.dropped else ""
    return f"{split.url}: {split.read} read, {len(split.examples)} instances{dropped}"


def fit(config: FitConfig) -> int:
    split = _read(config.train, config, need_sense=True)
    check_destination(config.output, overwrite=config.overwrite, foreign=_foreign)
    encoder = _encoder(config.model, config)
    data, layers, stats = _vectors(encoder, config, split)
    inventory = senses.Inventory.fit(data.vectors, data.lemmas, data.senses)
    record = {"written_by": OWNER, "format_version": FORMAT_VERSION, "model": os.path.abspath(config.model),
              "num_layers": encoder.num_layers, "hidden_size": encoder.hidden_size, "layers": list(layers),
              "standardize": config.vectors.standardize, "data": split.report(),
              "senses": [{"lemma": lemma, "sense": sense, "instances": int(n)}
                         for (lemma, sense), n in zip(inventory.keys, inventory.counts)]}
    with staged_directory(config.output, overwrite=config.overwrite, foreign=_foreign) as out:
        np.save(os.path.join(out, "senses.npy"), inventory.vectors)
        if stats is not None:
            stats.save(os.path.join(out, "standardize.npz"))
        with open(os.path.join(out, "senses.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
    print(_accounted(split))
    print(f"{len(inventory.keys)} senses of {len(inventory.candidates())} lemmas -> {config.output}")
    return 0


def load_inventory(directory: str) -> tuple[senses.Inventory, dict, Stats | None]:
    """A fit's senses (checked: written by fit, vectors matching the record), its record and its statistics."""
    try:
        with open(os.path.join(directory, "senses.json"), encoding="utf-8") as f:
            record = json.load(f)
        vectors = np.load(os.path.join(directory, "senses.npy"), allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ContractError(f"{directory}: not the output of `clozeforge senses fit` ({e})") from None
    if record.get("written_by") != OWNER or record.get("format_version") != FORMAT_VERSION \
            or vectors.shape != (len(record.get("senses", ())), record.get("hidden_size")):
        raise ContractError(f"{directory}: not the output of `clozeforge senses fit` (format {FORMAT_VERSION})")
    keys = [(s["lemma"], s["sense"]) for s in record["senses"]]
    inventory = senses.Inventory(keys, vectors, np.array([s["instances"] for s in record["senses"]]))
    stats_file = os.path.join(directory, "standardize.npz")
    return inventory, record, Stats.load(stats_file) if record["standardize"] != "none" else None


def predict(config: PredictConfig) -> int:
    inventory, record, stats = load_inventory(config.senses)
    split = _read(config.input, config, need_sense=False)
    encoder = _encoder(config.model or record["model"], config)
    if (encoder.num_layers, encoder.hidden_size) != (record["num_layers"], record["hidden_size"]):
        raise ContractError(f"{config.model or record['model']}: {encoder.num_layers} layers of {encoder.hidden_size}; "
                            f"the senses were fitted on {record['num_layers']} of {record['hidden_size']}")
    layers = tuple(record["layers"])
    data = instances.Instances.encode(split, encoder, layers, skip_bad_rows=config.skip_bad_rows,
                                      batch_size=config.batch_size, standardize=stats)
    data = data.restrict(set(inventory.keys), need_sense=False, skip_bad_rows=config.skip_bad_rows)
    lines = []
    for line, lemma, gold, p in zip(data.lines, data.lemmas, data.senses, senses.predict(inventory, data.vectors, data.lemmas)):
        row = {"line": line, "lemma": lemma, **dataclasses.asdict(p)}
        lines.append(json.dumps({**row, **({"gold": gold} if gold is not None else {})}, ensure_ascii=False) + "\n")
    partial = f"{config.output}.tmp-{os.getpid()}"  # written beside, then renamed: an earlier output stays whole
    try:
        with open(partial, "w", encoding="utf-8") as f:
            f.writelines(lines)
        os.replace(partial, config.output)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    print(_accounted(split))
    print(f"{len(lines)} predictions -> {config.output}")
    return 0


def evaluate(config: EvaluateConfig) -> int:
    from downstream.finetune import models

    sources = models.model_sources(config.model, config.checkpoints)  # one line when neither export nor RUN
    train_split = _read(config.train, config, need_sense=True)
    test_split = _read(config.test, config, need_sense=True) if config.test else None
    finetune = [_finetune_gains(path) for path in config.finetune_results]
    check_destination(config.output, overwrite=config.overwrite, foreign=_foreign)
    arms = []
    with tempfile.TemporaryDirectory(prefix="clozeforge-senses-exports.") as root:
        plan = [((model_dir, step), None) for step, model_dir in models.exported(config.model, sources, root)]
        if config.baseline == "scratch":
            plan.append(((plan[0][0][0], None), config.seed))
        hits = []  # per arm, {line: 1-NN's hit} of its scored instances, for the paired gain over scratch
        for (model_dir, step), seed in plan:
            name = "scratch" if seed is not None else ("pretrained" if step is None else f"step {step}")
            arm, arm_hits = _evaluate_arm(config, name, _encoder(model_dir, config, seed), step, train_split, test_split)
            arms.append(arm)
            hits.append(arm_hits)
            s = arms[-1]["score"]
            print(f"{name:<12} 1-NN {100 * s['accuracy']:.1f} ± {100 * s['accuracy_se']:.1f}   MFS {100 * s['mfs']:.1f} ± "
                  f"{100 * s['mfs_se']:.1f}   random {100 * s['random']:.1f}   ({s['instances']} instances)", flush=True)
    if config.baseline == "scratch":
        for arm, arm_hits in zip(arms[:-1], hits):
            common = sorted(set(arm_hits) & set(hits[-1]))
            mean, se = paired_difference([arm_hits[k] for k in common], [hits[-1][k] for k in common])
            arm["score"].update(gain_over_scratch=round(mean, 6), gain_over_scratch_se=round(se, 6), paired_instances=len(common))
    results = {"written_by": OWNER, "format_version": FORMAT_VERSION, "model": os.path.abspath(config.model),
               "protocol": "held-out --test" if config.test else "leave-one-out over --train",
               "layers": config.vectors.layers, "standardize": config.vectors.standardize, "arms": arms,
               "finetune_results": [os.path.abspath(p) for p in config.finetune_results]}
    with staged_directory(config.output, overwrite=config.overwrite, foreign=_foreign) as out:
        with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
        with open(os.path.join(out, "senses.md"), "w", encoding="utf-8") as f:
            f.write(table(arms))
        if len(sources) > 1:
            plot_sweep(arms, finetune, os.path.join(out, "senses.png"),
                       f"1-NN WSD on {short(config.train)} ({results['protocol']}): {short(config.model)}")
    print(f"wrote {config.output}/results.json, senses.md" + (", senses.png" if len(sources) > 1 else ""))
    return 0


def _evaluate_arm(config: EvaluateConfig, name: str, encoder: Encoder, step, train_split, test_split) -> tuple[dict, dict]:
    train_split = copy.deepcopy(train_split)  # each arm drops what its own model cannot read, counted in its own copy
    train, layers, stats = _vectors(encoder, config, train_split)
    data = {"train": train_split.report()}
    if test_split is None:
        score = senses.leave_one_out(train.vectors, train.lemmas, train.senses)
        lines = train.lines
    else:
        inventory = senses.Inventory.fit(train.vectors, train.lemmas, train.senses)
        test_split = copy.deepcopy(test_split)
        test = instances.Instances.encode(test_split, encoder, layers, skip_bad_rows=config.skip_bad_rows,
                                          batch_size=config.batch_size, standardize=stats)
        test = test.restrict(set(inventory.keys), need_sense=True, skip_bad_rows=config.skip_bad_rows)
        score, _ = senses.held_out(inventory, test.vectors, test.lemmas, test.senses)
        data["test"] = test_split.report()
        lines = test.lines
    return ({"name": name, "step": step, "model": encoder.model_dir if name != "scratch" else "scratch",
             "score": score.record(), "data": data}, {lines[i]: hit for i, hit in zip(score.scored, score.hits)})


def _finetune_gains(path: str) -> dict:
    """A finetune results.json's gain per pretraining step: {task, points: [(step, gain, se)]}."""
    try:
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        raise ContractError(f"--finetune-results {path}: cannot read it ({e})") from None
    if not isinstance(results, dict) or results.get("written_by") != "clozeforge finetune":
        raise ContractError(f"--finetune-results {path}: not a results.json of clozeforge finetune")
    points = [(p["step"], p["gain"]["mean"], p["gain"]["se"]) for p in results.get("checkpoints") or [] if p.get("gain")]
    if not points and results.get("gain"):
        points = [(None, results["gain"]["mean"], results["gain"]["se"])]  # one model: drawn at the sweep's last step
    if not points:
        raise ContractError(f"--finetune-results {path}: no gain (fine-tune with --baseline scratch|MODEL2)")
    return {"task": results.get("task"), "data": os.path.basename(os.path.dirname(os.path.abspath(path))), "points": points}


def table(arms: list[dict]) -> str:
    """The arms in points: accuracy ± SE, the baselines, and the paired gains over MFS and over scratch."""
    lines = ["| model | instances | 1-NN accuracy | MFS | random | 1-NN − MFS (paired) | 1-NN − scratch (paired) |",
             "|---|---|---|---|---|---|---|"]
    for a in arms:
        s = a["score"]
        scratch = (f"{100 * s['gain_over_scratch']:+.1f} ± {100 * s['gain_over_scratch_se']:.1f}"
                   if "gain_over_scratch" in s else "")
        lines.append(f"| {a['name']} | {s['instances']} | {100 * s['accuracy']:.1f} ± {100 * s['accuracy_se']:.1f} | "
                     f"{100 * s['mfs']:.1f} ± {100 * s['mfs_se']:.1f} | {100 * s['random']:.1f} ± {100 * s['random_se']:.1f} | "
                     f"{100 * s['gain_over_mfs']:+.1f} ± {100 * s['gain_over_mfs_se']:.1f} | {scratch} |")
    return "\n".join(lines) + "\n"


ACTIONS = {"fit": (FitConfig, "model", "MODEL", fit), "predict": (PredictConfig, "senses", "SENSES_DIR", predict),
           "evaluate": (EvaluateConfig, "model", "MODEL", evaluate)}


def senses_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge senses", description="Word sense disambiguation by the nearest "
                                 "sense embedding (the mean contextual vector of a sense's labelled instances).")
    actions = ap.add_subparsers(dest="action", required=True, metavar="fit|predict|evaluate",
                                help="fit: sense embeddings; predict: the nearest sense; evaluate: accuracy beside baselines")
    helps = {"fit": "sense embeddings from labelled instances", "predict": "the nearest sense of new instances",
             "evaluate": "1-NN accuracy beside the most-frequent-sense baseline and random"}
    for action, (cls, field, metavar, _) in ACTIONS.items():
        sub = actions.add_parser(action, help=helps[action], description=helps[action])
        sub.add_argument(field, metavar=metavar, help="an export (or any transformers encoder directory)"
                         + ("; evaluate: also a training RUN" if action == "evaluate" else "") if field == "model"
                         else "a directory written by `clozeforge senses fit`")
        add_flags(sub, cls)
    return ap


def senses_main(argv: list[str] | None = None) -> int:
    args = senses_parser().parse_args(argv)
    cls, field, _, run = ACTIONS[args.action]
    try:
        config = dataclasses.replace(from_flags(cls, args), **{field: getattr(args, field)})
        return run(config)
    except (TableError, ContractError, OutputDirError, StatsError, LayersError, FileNotFoundError) as e:
        return fail("senses", str(e))
    except ValueError as e:  # a config's own checks, export's refusals
        return fail("senses", str(e).splitlines()[0])
    except KeyboardInterrupt:
        print("clozeforge senses: interrupted; --output is as it was", file=sys.stderr)
        return 130

