"""The models a fine-tuning job compares, its arms: MODEL (an export, or each chosen checkpoint of a training RUN,
exported before the job starts) and the baseline (scratch: MODEL's architecture from random weights; or MODEL2, an
export or RUN), each with its tokenizer, learning-rate grid and epochs; and the sequence length every arm reads.

In:  a FinetuneConfig; a temporary directory that holds the exports of a RUN's checkpoints while the command runs.
Out: `export_dirs(config, root)` → `ModelDirs`: MODEL's and MODEL2's export directories, both checked before any
     work (one line when either is neither an export nor a RUN); `exported` → those of one MODEL's sources (what
     `clozeforge senses evaluate` compares too); `Models.resolve` → the arms (each an export
     directory, its tokenizer, lr grid and epochs), the baseline arm, the sequence length and where it came from.

An export directory is used as it is. A RUN's checkpoint (any ZeRO stage) is consolidated on the CPU and written as
an export under the temporary directory (downstream/export.py), once per (RUN, tag) for the whole command, before
the job (or a suite's first task) starts: the job reads export directories only. Every arm gets the same epoch
budget (--epochs, with early stopping on validation) and a learning-rate grid that grows while its best rate sits
at an edge (protocol.py: scratch's starts a rung higher), unless the flags set them apart (--baseline-epochs, --lr,
--baseline-lr)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from downstream.finetune import protocol
from schemas import ContractError, families, run_dir


def model_sources(model: str, checkpoints: str | None) -> list[tuple[int | None, str | None]]:
    """[(pretraining step, checkpoint tag)]: one (None, None) for an export directory."""
    if os.path.exists(os.path.join(model, "config.json")):
        if checkpoints:
            raise ContractError(f"--checkpoints needs a training RUN directory; {model} is an export")
        return [(None, None)]
    root = run_dir.checkpoint_dir(model)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{model}: neither an export (no config.json) nor a training run (no checkpoints/)")
    tags = run_dir.checkpoint_tags(model)
    if not tags:
        raise FileNotFoundError(f"{root}: no checkpoint")
    if checkpoints in (None, "latest"):
        return [(None, None)]  # export_checkpoint resolves the latest intact tag
    if checkpoints == "all":
        chosen = tags
    else:
        try:
            steps = [int(s) for s in checkpoints.split(",") if s.strip()]
        except ValueError:
            raise ContractError(f"--checkpoints: expected all or STEP,STEP,..., got {checkpoints!r}") from None
        chosen = [run_dir.tag_for(s) for s in steps]
        missing = [t for t in chosen if t not in tags]
        if missing:
            raise FileNotFoundError(f"{root}: no checkpoint {missing[0]} (there are: {', '.join(tags)})")
    return [(run_dir.step_of(t), t) for t in chosen]


@dataclasses.dataclass(frozen=True)
class ModelDirs:
    """MODEL and MODEL2 as export directories, all a job reads of them (a RUN's checkpoints exported before it starts)."""

    model: tuple[tuple[int | None, str], ...]
    """(pretraining step, export directory) per arm of MODEL: one, or one per checkpoint of a sweep (--checkpoints);
    the step is None for an export given as it is."""
    baseline: str | None = None
    """MODEL2's export directory (--baseline MODEL2); None for scratch or none."""


def export_dirs(config, root: str) -> ModelDirs:
    """MODEL's and MODEL2's export directories, both checked before any is written (one line when either is neither
    an export nor a RUN): an export as it is, a RUN's chosen checkpoints exported under `root`, once each."""
    sources = model_sources(config.model, config.checkpoints)
    if config.baseline in ("none", "scratch"):
        return ModelDirs(exported(config.model, sources, root))
    model_sources(config.baseline, None)
    model = exported(config.model, sources, root)
    if config.baseline == config.model and sources == [(None, None)]:  # the same model, exported once
        return ModelDirs(model, model[0][1])
    return ModelDirs(model, _export_dir(config.baseline, None, os.path.join(root, "baseline"))[1])


def exported(model: str, sources: list[tuple[int | None, str | None]], root: str) -> tuple[tuple[int | None, str], ...]:
    """(pretraining step, export directory) of each of MODEL's `sources` (`model_sources`): an export as it is, each
    checkpoint of a RUN exported under `root`."""
    return tuple(_export_dir(model, tag, os.path.join(root, str(i))) for i, (_, tag) in enumerate(sources))


def _export_dir(model: str, tag: str | None, target: str) -> tuple[int | None, str]:
    """(pretraining step, export directory) of MODEL: itself when it is an export; else its checkpoint `tag` (None:
    the latest intact one) written to `target` as `clozeforge export` writes it (its model_max_length the trained
    length), consolidated on the CPU."""
    if os.path.exists(os.path.join(model, "config.json")):
        return None, model
    from downstream.export import export_checkpoint

    _, client, _ = export_checkpoint(model, tag, target)
    return client.get("step"), target


def trained_length(model_dir: str) -> tuple[int, int]:
    """(the longest sequence the model trained on, its position embeddings): the tokenizer's model_max_length
    when it is set and within the positions (export writes it), else the positions."""
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        positions = int(json.load(f).get("max_position_embeddings", 512))
    try:
        with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            length = json.load(f).get("model_max_length")
    except (OSError, ValueError):
        length = None
    if isinstance(length, int) and not isinstance(length, bool) and 0 < length <= positions:
        return length, positions
    return positions, positions  # absent, or transformers' "no limit" 1e30


@dataclasses.dataclass
class Arm:
    name: str
    """How the output names it: "pretrained", "step 2000", "scratch", or the baseline model's name."""
    model_dir: str
    pretrained: bool
    lrs: tuple[float, ...]
    grid: str
    """Where the lr grid came from (a flag, or which default)."""
    epochs: int
    extend: int = 0
    """Rates its grid may add at an edge (protocol.Search); 0: the grid as given."""
    step: int | None = None
    tokenizer: object = None
    saved: bool = True
    """model/ may come from it (the model's arms; not the baseline's)."""


@dataclasses.dataclass
class Models:
    """The arms of a job and what they share."""

    arms: list[Arm]
    """MODEL's: one, or one per checkpoint of a sweep (--checkpoints)."""
    baseline: Arm | None
    max_len: int
    length_from: str
    """Where max_len came from (the trained length, or --max-seq-len)."""

    @classmethod
    def resolve(cls, config, dirs: ModelDirs) -> Models:
        import transformers

        first_dir = dirs.model[0][1]
        for model_dir in (first_dir, dirs.baseline):
            _readable(model_dir, transformers.__version__)
        tokenizer = transformers.AutoTokenizer.from_pretrained(first_dir)
        hidden = transformers.AutoConfig.from_pretrained(first_dir).hidden_size
        lrs, grid, extend = grid_of(config.lr, "--lr", hidden, config.lr_extend)
        arms = []
        for step, model_dir in dirs.model:
            arms.append(Arm("pretrained" if step is None else f"step {step}", model_dir, True, lrs, grid, config.epochs,
                            extend, step=step, tokenizer=tokenizer))
        baseline = _baseline_arm(config, first_dir, tokenizer, hidden, dirs.baseline)
        max_len, length_from = sequence_length(config, [first_dir] + ([baseline.model_dir] if baseline else []))
        return cls(arms, baseline, max_len, length_from)

    @property
    def everything(self) -> list[Arm]:
        """The arms in the order the job runs them: MODEL's, then the baseline's."""
        return self.arms + ([self.baseline] if self.baseline else [])


def sequence_length(config, model_dirs: list[str]) -> tuple[int, str]:
    """(--max-seq-len, where it came from): by default the shortest trained length among the arms' models, so
    both arms see the same inputs; longer than that only on request (one warning), never past the positions."""
    lengths = [trained_length(d) for d in dict.fromkeys(model_dirs)]
    trained, positions = min(t for t, _ in lengths), min(p for _, p in lengths)
    if config.max_seq_len is None:
        return trained, "the model's trained length (model_max_length, else its positions)"
    if config.max_seq_len > trained:
        cut = min(config.max_seq_len, positions)
        print(f"clozeforge finetune: warning: --max-seq-len {config.max_seq_len} is longer than the model trained on "
              f"({trained}); positions past it were never trained"
              + (f"; cut to the model's {positions} positions" if cut < config.max_seq_len else ""), file=sys.stderr, flush=True)
        return cut, "--max-seq-len"
    return config.max_seq_len, "--max-seq-len"


def grid_of(given: tuple[float, ...], flag: str, hidden: int, extend: int | None,
            from_scratch: bool = False) -> tuple[tuple[float, ...], str, int]:
    """(an arm's starting grid, where it came from, the rates it may add): the flag's rates, searched as given unless
    --lr-extend says otherwise, or protocol's default start for its width, which grows by protocol.DEFAULT_EXTEND."""
    if given:
        return given, flag, extend or 0
    where = "default: protocol.start" + (" (from scratch: a rung higher)" if from_scratch else "")
    return protocol.start(hidden, from_scratch=from_scratch), where, protocol.DEFAULT_EXTEND if extend is None else extend


def _readable(model_dir: str | None, version: str) -> None:
    """A ContractError naming `model_dir` where this transformers reads its family's export otherwise (families.py)."""
    if model_dir is None:
        return
    # the file itself, not AutoConfig: a release that refuses the config would otherwise raise its own traceback first
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        problem = families.transformers_problem(json.load(f).get("model_type"), version)
    if problem:
        raise ContractError(f"{model_dir}: {problem}")


def _baseline_arm(config, first_dir: str, tokenizer, hidden: int, model_dir: str | None) -> Arm | None:
    import transformers

    if config.baseline == "none":
        return None
    epochs = config.baseline_epochs or config.epochs  # the same budget (early stopping ends each run) unless set apart
    if config.baseline == "scratch":
        lrs, grid, extend = grid_of(config.baseline_lr, "--baseline-lr", hidden, config.lr_extend, from_scratch=True)
        return Arm("scratch", first_dir, False, lrs, grid, epochs, extend, tokenizer=tokenizer, saved=False)
    width = transformers.AutoConfig.from_pretrained(model_dir).hidden_size
    lrs, grid, extend = grid_of(config.baseline_lr, "--baseline-lr", width, config.lr_extend)
    name = os.path.basename(os.path.normpath(config.baseline)) or "baseline"
    return Arm(name, model_dir, True, lrs, grid, epochs, extend,
               tokenizer=transformers.AutoTokenizer.from_pretrained(model_dir), saved=False)
