"""`clozeforge finetune MODEL --task classify|pair|tag|span --train URL --validation URL [--test URL] --output DIR`;
or `--builtin-task NAME` (builtin/run.py), or `--suite NAME --data DIR` (suites/) in place of --task and its files.

In:  MODEL, an export directory or a training RUN (its latest checkpoint, or those of --checkpoints, exported
     before the job starts, models.export_dirs); labelled splits (data.py, read row by row by the task: tasks/);
     the recipe flags (config.py); --baseline scratch|MODEL2, the arm the model is compared with.
Out, in DIR (written beside it, then renamed in, by output.py):
    results.json       task, metric; per data file its sha256, lines and records read,
                       examples kept, drops per reason with their first line numbers (read == kept + dropped,
                       checked); the sequence
                       length; per arm (the model or each checkpoint, the baseline): its lr grid, how it grew
                       (protocol.py: each round of the search) and its epochs,
                       each lr's validation mean ± SE, the chosen lr, per-seed validation (and test) metrics;
                       the gain over the baseline: paired mean ± SE over seeds and a bootstrap 95% interval
                       over test examples (protocol.py)
    model/             the chosen lr's best seed (by validation) as a HuggingFace directory with its tokenizer
                       and label names: transformers.pipeline(<the task's pipeline>, model=DIR/model) loads it
                       with no clozeforge code
    predictions.jsonl  that model's predictions on the test split (with --test)
    downstream.png, downstream.md   with --checkpoints: score against pretraining step (mean ± SE)
Scores are in points (x 100): on the test split when there is one, else on validation (which also picked the
lr, so it flatters a little; results.json says which).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile

from downstream.finetune import data as data_mod
from downstream.finetune import models, output, ranks
from downstream.finetune.builtin import run as builtin_run
from downstream.finetune.config import FinetuneConfig
from downstream.finetune.job import run_task
from downstream.finetune.suites import SuiteError
from process.exits import fail
from schemas import ContractError
from schemas.config import add_flags, field_docs, from_flags


def run(config: FinetuneConfig, dirs: models.ModelDirs) -> int:
    """The job (or the suite's jobs) on MODEL's and MODEL2's export directories (`models.export_dirs`)."""
    place = ranks.join_ranks(config.device, config.precision, config.data_parallel)
    try:
        if config.suite:  # each of the suite's tasks is one --task job (suites/run.py)
            from downstream.finetune.suites import run as suite_run

            if place.world_size > 1:
                raise ContractError(ranks.SUITE_IN_ONE_PROCESS)
            return suite_run.run_suite(config, place, dirs)
        return run_task(config, place, dirs)
    finally:
        ranks.leave_ranks()


def finetune_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge finetune",
                                 description="Fine-tune an exported model (or a run's checkpoints) on labelled data "
                                             "and score it, optionally beside the same model trained from scratch.")
    ap.add_argument("model", metavar="MODEL", help=field_docs(FinetuneConfig)["model"].removeprefix("(the positional MODEL) "))
    add_flags(ap, FinetuneConfig)
    return ap


def finetune_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = finetune_parser().parse_args(argv)
    try:
        config = dataclasses.replace(from_flags(FinetuneConfig, args), model=args.model)
    except ValueError as e:
        return _fail(str(e))
    try:
        import sklearn  # noqa: F401
        import transformers
    except ImportError as e:
        return _fail(f"missing dependency ({e.name}); install it with: pip install 'clozeforge[demo]'")
    if config.nproc_per_node > 1 and "RANK" not in os.environ:  # not yet inside a launcher: become one
        try:
            ranks.check(config.device, config.precision, config.nproc_per_node, suite=bool(config.suite))
        except ValueError as e:
            return _fail(str(e))
        return ranks.launch(config.nproc_per_node, argv)
    # "some weights were newly initialised" is the point of fine-tuning, and a bar per model load says nothing the
    # epoch lines do not; both are put back after, for a caller that runs this in its own process
    verbosity, bars = transformers.logging.get_verbosity(), transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        # a RUN's checkpoints exported once for the whole command, before any job starts
        with tempfile.TemporaryDirectory(prefix="clozeforge-finetune-exports.") as root:
            if config.builtin_task:  # its splits written from this machine's text: then an ordinary job
                config = builtin_run.written(config, root)
            return run(config, models.export_dirs(config, root))
    except (data_mod.DataError, output.OutputError, ContractError, FileNotFoundError, SuiteError) as e:
        return _fail(str(e))
    except ValueError as e:  # export's ExportError and the model's own refusals
        return _fail(str(e).splitlines()[0])
    except KeyboardInterrupt:  # the staged output is discarded: --output holds what it held before
        print("clozeforge finetune: interrupted; --output is as it was, rerun the same command", file=sys.stderr)
        return 130
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bars:
            transformers.utils.logging.enable_progress_bar()


def _fail(message: str) -> int:
    if os.environ.get("RANK", "0") != "0":  # every rank reads the same inputs: rank 0 says what is wrong, once
        return 2
    return fail("finetune", message)
