"""The one train entry point: `clozeforge train`, `python -m trainer.pretrain`, `deepspeed --module trainer.pretrain`,
`torchrun -m trainer.pretrain`; pairs → checkpoints.

In:  a prep run's pairs/ (manifest + shards, any fsspec URL) and the flags generated from trainer/config.py's
     TrainConfig, plus --nproc-per-node N.
Out: RUN/train_config.json (and RUN/mixture.json with --mix), RUN/vocab/ (a copy, so export needs nothing else),
     RUN/checkpoints/ (resumable DeepSpeed checkpoints), RUN/metrics.jsonl, RUN/curves.png, and RUN/run.lock
     while it runs (one trainer per RUN: trainer/run/lock.py). A rerun with the same RUN resumes from its newest
     intact checkpoint: model, optimizer, scheduler, data position; dropout is re-seeded per step. SIGTERM/SIGINT
     to any rank stops every rank at one step with a checkpoint (process/stopping.py) and exits 0, as a
     complete run does: `RUN/checkpoints/latest` short of --max-steps tells them apart (the demo reads it).
     Errors are one line: status 2 for a user error or bad input, 1 for an I/O error outside checkpoints.

Without a launcher and with --nproc-per-node 1 it trains in this process (world size 1). With --nproc-per-node N
it becomes the launcher of N ranks of itself (process/launch.py). Under `deepspeed` or `torchrun` (RANK is
set) it is one rank and picks up RANK/WORLD_SIZE/LOCAL_RANK from the environment. Never imports apache_beam.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from process.exits import exit_with, fail, one_line
from process.launch import launch
from process.logs import quiet_startup
from process.stopping import follow_launcher
from schemas import ContractError
from schemas.config import add_flags, from_flags
from schemas.objectives import OBJECTIVES
from trainer.builders import read_user_deepspeed_config
from trainer.config import TrainConfig, TrainError
from trainer.data.mixture_config import ComponentSpec, MixtureConfig
from trainer.loop import train
from trainer.run.runtime import shutdown_runtime, start_runtime
from trainer.start.preflight import problem
from trainer.start.steps import family_of, settle


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge train", description="Pre-train a BERT on prep's pair shards with DeepSpeed ZeRO.")
    add_flags(ap, TrainConfig)
    ap.add_argument("--nproc-per-node", type=_positive, default=1, metavar="N",
                    help="Training processes (ranks) to start on this machine, each `python -m trainer.pretrain` "
                         "(process/launch.py); one per GPU, or a few on a CPU box. Under deepspeed or torchrun, "
                         "which start the ranks themselves, it is ignored (default: 1)")
    ap.add_argument("--verbose", action="store_true", help="also show third-party start-up messages (DeepSpeed's accelerator detection)")
    ap.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # set by the deepspeed launcher
    return ap


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig of parsed flags; a value a config dataclass rejects is a one-line TrainError."""
    try:
        return from_flags(TrainConfig, args)
    except ValueError as e:
        raise TrainError(str(e)) from None


def output_problem(output: str) -> str | None:
    """Why --output cannot be a run directory here (a file in its path, no permission), or None."""
    probe = os.path.abspath(output)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"--output {output}: {probe} is a file, not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"--output {output}: no permission to write in {probe}"
    return None


QUIET_RANK_WAIT_S = 5.0
"""How long a rank that leaves an error's line to another waits before it exits. NOTE: deepspeed's and torchrun's
launchers end every rank as soon as one exits with an error; a quiet rank that exited first would have the one that
says the error killed before it printed (seen in CI: both ranks exited 2, no line). The launcher ends the waiting rank
once the other has spoken and exited, so the wait costs nothing then."""


def said_once(error: TrainError, *, per_node: bool = False) -> TrainError:
    """`error`, quiet on all ranks of a launcher (deepspeed, torchrun: RANK is set) but the one that says it for
    them all: rank 0 for a flag, which every rank reads alike; local rank 0 for a file, which may be missing
    on one node only. Without a launcher the checks run once, before any rank starts."""
    rank = os.environ.get("LOCAL_RANK" if per_node else "RANK")
    error.quiet = rank not in (None, "0")  # type: ignore[attr-defined]
    return error


def given_flags(argv: list[str]) -> set[str]:
    """The settings the user gave on the command line (TrainConfig field names, nested ones dotted), whatever their
    value: what --init-from's recipe leaves alone (trainer/start/defaults.py)."""
    ap = parser()
    for action in ap._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    return set(vars(ap.parse_known_args(argv)[0]))


def checked_config(args: argparse.Namespace, given: set[str] | None = None) -> TrainConfig:
    """The run's config from its flags, settled (a resume, --init-from and its recipe, or random weights:
    trainer/start/steps.py), with --mix, --output and the user's DeepSpeed JSON checked: a TrainError (one line, once
    per job) before any rank starts. --data, the --mix components and the source's files: trainer/start/preflight.py."""
    try:  # each --mix component as typed, before --data's manifest is read (the mixture as a whole: below)
        for component in args.mix or ():
            ComponentSpec.parse(component)
    except ValueError as e:
        raise said_once(TrainError(f"--mix: {e}")) from None
    try:
        found = output_problem(args.output)
        if found:
            raise TrainError(found)
        # the source's files (and RUN's record) may be missing on one node only: said per node
        given = set() if given is None else given
        config, family_notes = family_of(config_from_args(args), given)
        config, notes = settle(config, given)
    except TrainError as e:
        raise said_once(e, per_node=True) from None
    if os.environ.get("RANK", "0") == "0" and (args.nproc_per_node == 1 or "RANK" in os.environ):
        words = OBJECTIVES[config.objective].words
        objectives = words.format(**vars(config)) if words else "mlm + nsp" if config.nsp_weight else "mlm"
        if config.family:  # else --data's manifest is unreadable, which preflight says
            print(f"family: {config.family} ({objectives}{'; ' + ', '.join(family_notes) if family_notes else ''})", flush=True)
        for note in notes:  # the rate and why, then the other defaults applied
            print(f"init-from {config.init_from}: {note}", flush=True)
    try:
        if config.mix:  # here, not when the mixture is first streamed: on every rank, after minutes of start-up
            try:
                MixtureConfig(components=tuple(ComponentSpec.parse(m) for m in config.mix), alpha=config.mix_alpha)
            except ValueError as e:
                raise TrainError(f"--mix: {e}") from None
    except TrainError as e:
        raise said_once(e) from None
    try:
        if config.deepspeed_config:
            read_user_deepspeed_config(config.deepspeed_config)
    except TrainError as e:
        raise said_once(e, per_node=True) from None
    return config


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser().parse_args(argv)  # a bad flag: one usage error here, not one per rank
        quiet_startup(args.verbose)
        config = checked_config(args, given_flags(argv))
        if args.nproc_per_node > 1 and "RANK" not in os.environ:  # not yet inside a launcher: become one
            found = problem(config)  # a bad --data or --mix: one line here, before any rank starts
            if found:
                raise TrainError(found)
            return launch(args.nproc_per_node, argv)
        rt = start_runtime(config.precision)
        if rt.world_size > 1:
            follow_launcher()  # a launcher killed by -9 leaves no orphan ranks training on
        try:
            train(config, rt)
        finally:
            shutdown_runtime()
    except (TrainError, ContractError) as e:
        if getattr(e, "quiet", False):  # a rank that only heard of rank 0's error leaves the line to it
            time.sleep(QUIET_RANK_WAIT_S)
            return 2
        return fail("train", one_line(e))
    except OSError as e:  # a write outside checkpoints (metrics, run config) on a full or read-only disk
        return fail("train", f"{e.filename or 'I/O'}: {e.strerror or one_line(e)}", status=1)
    except KeyboardInterrupt:
        print("clozeforge train: interrupted; resume from the last complete checkpoint", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    exit_with(main())
