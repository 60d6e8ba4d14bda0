"""The demo's two flows, each stage the command a user would type, run by supervisor.run_stage.

`pretrain_and_score`: the built-in corpus (this machine's documentation, demo/corpus.py) and tasks
(downstream/finetune/builtin/) → prep, decontaminated against every task's evaluation files → train (one rank, then a
short 2-rank DeepSpeed run on the same data) → export → fill-mask → fine-tuning of the export beside the same model
from scratch on each of the demo's tasks, with the gains.
`adapt`: after a finished demo, the continued-pretraining story on its export (man pages, decontaminated against the
man-sections task's files, `train --init-from` the export, export, `score` of both on the task's held-out test text,
`finetune ADAPTED --baseline SOURCE`); with `--from DIR` or `--from-package NAME`, the same story from a public
encoder (a bare one's fresh MLM head warms up first: trainer/start/warmup.py; a source without an MLM head is not
scored, only the adapted model).

The defaults suit a small corpus on a small machine (command.py's DEMO_DOC says why each).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time

from demo import corpus as builtin  # standard library only (its writers import their readers when they run)
from demo.prep_cache import prep
from demo.supervisor import run_stage, stage_command, training_kept
from process.cpu_sharing import usable_cores  # standard library only
from process.exits import fail
from schemas import ContractError

EXAMPLES = [
    "Return a new [MASK] with the same elements.",
    "Raise a [MASK] if the file does not exist.",
    "The [MASK] of the list is not changed.",
]

DEMO_GRID = ("1e-3", "3e-3")
DEMO_FINETUNE = [*(f for lr in DEMO_GRID for f in ("--lr", lr)), "--epochs", "10",
                 *(f for lr in DEMO_GRID for f in ("--baseline-lr", lr)), "--baseline-epochs", "10", "--patience", "0"]
"""The demo's fine-tuning recipe: both arms search the same grid, 10 epochs, all kept (--patience 0), at the export's
trained length (finetune's default --max-seq-len), where a user's own run would be. Why one grid for both: the export
held to one rate lost 3-4 points a set of tasks to scratch's two (experiments/README.md "race"); why this grid and
not finetune's wider default search: the same mean gain over the five built-in tasks in half the time
(experiments/README.md "Issue 46, part 0")."""

CLOZEFORGE = stage_command("clozeforge")


def train_command(args: argparse.Namespace, pairs: str) -> list[str]:
    """The demo's pretraining recipe on the prepared `pairs`, from the pretraining seed `--seed`."""
    return [*stage_command("trainer.pretrain"), "--data", pairs, "--model", "tiny", "--batch-size", "32", "--lr", "3e-3",
            "--mask-prob", "0.3", "--dropout", "0", "--seed", str(args.seed), "--precision", args.precision]


def pretrain_and_score(args: argparse.Namespace) -> int:
    work = os.path.abspath(args.workdir)
    started = time.time()
    corpus, inputs = args.corpus, ["--input", f"text={args.corpus}"]  # --corpus: your own files
    if corpus is None:
        kind = builtin.CORPORA[args.builtin_corpus]
        megabytes = args.corpus_mb or kind.megabytes
        print(f"== corpus: {kind.says} ({megabytes:g} MB)", flush=True)
        written = builtin.write(os.path.join(work, "corpus"), int(megabytes * 1e6), args.builtin_corpus)
        corpus = os.path.join(work, "corpus", "*.jsonl")
        inputs = builtin.inputs(os.path.dirname(corpus), args.builtin_corpus)
        print("   " + ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in written.items()) + f" under {os.path.dirname(corpus)}")
    # every built-in task's validation and test text is kept out of pretraining (the tasks are written first)
    tasks = write_tasks(work)
    evaluation = builtin.decontaminate_flags(directory for directory, _ in tasks.values())
    prep_dir, run, hf = (os.path.join(work, name) for name in ("prep", "run", "hf"))
    prep(work, corpus, [*inputs, "--output", prep_dir, "--vocab-size", "4096", "--max-seq-len", "64", *evaluation,
                        "--validation-fraction", "0.05", "--rows-per-shard", "50000",
                        "--overwrite"])  # the demo owns its workdir: a rerun with another --corpus replaces its prep
    pairs = os.path.join(prep_dir, "pairs")
    train = train_command(args, pairs)
    # One rank has nothing to partition: ZeRO stage 0 skips stage 2's gradient bucketing (14,200 against 11,700
    # tokens/s on 2 cores, experiments/README.md "demo"); more ranks keep the trainer's default, stage 2.
    zero = ["--zero-stage", "0"] if args.nproc == 1 else []
    run_stage("train", [*train, f"--nproc-per-node={args.nproc}", *zero, "--output", run, "--max-steps", str(args.steps),
                        "--log-every", str(max(1, args.steps // 20)), "--eval-every", str(max(1, args.steps // 4)),
                        # three checkpoints kept, so `clozeforge finetune RUN --checkpoints all` draws a curve from the run
                        "--save-every", str(max(1, args.steps // 3)), "--keep-last", "3"], saved=training_kept(run, args.steps))
    if args.ranks_check_steps:
        ranks_run = os.path.join(work, "run-2-ranks")
        run_stage("train on 2 DeepSpeed ranks (ZeRO-2 over gloo; a short run on the same data)",
                  [*train, "--nproc-per-node=2", "--output", ranks_run, "--max-steps", str(args.ranks_check_steps),
                   "--log-every", str(max(1, args.ranks_check_steps // 2)), "--eval-every", "0", "--eval-batches", "2",
                   "--save-every", str(args.ranks_check_steps)], saved=training_kept(ranks_run, args.ranks_check_steps))
    # --verify reloads the export with transformers, which the `demo` extra installs and `train` does not
    verify = ["--verify"] if importlib.util.find_spec("transformers") else []
    if not verify:
        print("\n(transformers is not installed: the export is not reloaded to compare logits; pip install transformers)")
    run_stage("export", [*CLOZEFORGE, "export", run, "--output", hf, *verify])
    run_stage("fill-mask", [*CLOZEFORGE, "fill-mask", hf, *EXAMPLES])
    finetune = os.path.join(work, "finetune")
    if args.finetune_seeds and verify:  # fine-tuning runs on transformers' heads
        finetune_tasks(hf, work, args.finetune_seeds, tasks, finetune_ranks(args))
    print(f"\n== done in {time.time() - started:.0f} s")
    for label, path in (("corpus", corpus), ("report", os.path.join(prep_dir, "report.json")), ("vocabulary", os.path.join(prep_dir, "vocab")),
                        ("pair shards", pairs), ("checkpoints", os.path.join(run, "checkpoints")),
                        ("metrics", os.path.join(run, "metrics.jsonl")), ("loss curves", os.path.join(run, "curves.png")),
                        ("HF model", hf), ("fine-tuned", os.path.join(finetune, "gains.md"))):
        if label == "fine-tuned" and not os.path.exists(path):  # skipped: no transformers, or --finetune-seeds 0
            continue
        print(f"   {label:<12} {path}")
    print(f"\nLoad it with transformers:  AutoModelForMaskedLM.from_pretrained({hf!r})")
    return 0


def write_tasks(work: str) -> dict[str, tuple[str, list[str]]]:
    """Write every built-in task (the demo's and the held-out ones) under WORKDIR/tasks: {name: (its directory, its
    classes)}, the
    tasks this machine has the text for (a machine without man pages or manuals skips theirs, and says so)."""
    from downstream.finetune.builtin import TASKS  # standard library only

    written = {}
    for name, task in TASKS.items():
        directory = os.path.join(work, "tasks", name)
        try:
            written[name] = directory, task.write(directory)
        except LookupError as e:
            print(f"\n(skipped {name}: {e})")
    return written


def finetune_ranks(args: argparse.Namespace) -> list[str]:
    """finetune's --nproc-per-node for the demo's fine-tuning: --finetune-ranks, else one rank per usable core, at most 4
    (command.py's DEMO_DOC says why); [] for one."""
    ranks = args.finetune_ranks or min(usable_cores(), 4)
    return ["--nproc-per-node", str(ranks)] if ranks > 1 else []


def finetune_tasks(hf: str, work: str, seeds: int, tasks: dict[str, tuple[str, list[str]]], ranks: list[str] = ()) -> None:
    """Fine-tune the export and a scratch model on each of the demo's built-in tasks (written by write_tasks before
    prep), then print the gains."""
    from downstream.finetune.builtin import DEMO, TASKS, report  # standard library only

    results = {}
    for name in (n for n in DEMO if n in tasks):  # a task the machine lacks the text for was skipped, and said so
        task, (directory, classes) = TASKS[name], tasks[name]
        print(f"\n== downstream task {name}: {task.kind}, {len(classes)} classes ({', '.join(classes)}), "
              f"from {task.source}; its validation and test text kept out of pretraining", flush=True)
        out = os.path.join(work, "finetune", name)
        run_stage(f"finetune {name}: the export and the same model from scratch",
                  [*CLOZEFORGE, "finetune", hf, "--task", task.kind, *_splits(directory), "--output", out,
                   "--baseline", "scratch", "--seeds", str(seeds), *DEMO_FINETUNE, *ranks])
        results[name] = os.path.join(out, "results.json")
    if results:
        text = report.table(report.gains(results))
        with open(os.path.join(work, "finetune", "gains.md"), "w", encoding="utf-8") as f:
            f.write(text)
        print(f"\n== gain from pretraining, test points, mean ± SE over {seeds} seeds (paired)\n{text}", end="")


def _splits(directory: str) -> list[str]:
    return [f"--{split}={os.path.join(directory, split)}.jsonl" for split in ("train", "validation", "test")]


def adapt(args: argparse.Namespace) -> int:
    """`clozeforge demo --adapt` (see the module docstring)."""
    from downstream.finetune.builtin import TASKS  # standard library only
    from downstream.finetune.builtin.man_sections import write_pages

    work = os.path.abspath(args.workdir)
    source, adapted = os.path.join(work, "hf"), os.path.join(work, "adapt")
    public = getattr(args, "source", None) or getattr(args, "from_package", None)
    init_from = source
    if public:
        try:
            init_from, source = adapt_source(args, work)
        except (ContractError, OSError) as e:
            return fail("demo", f"--from: {e}")
    elif not os.path.exists(os.path.join(source, "config.json")):
        return fail("demo", f"--adapt continues a finished demo's export, and {source} has none; "
                    f"run `clozeforge demo --workdir {args.workdir}` first, or adapt a public encoder: --from DIR")
    started, task = time.time(), TASKS["man-sections"]
    tasks = os.path.join(adapted, "task")
    try:
        task.write(tasks)
    except LookupError as e:  # a machine without man pages
        return fail("demo", f"--adapt needs the man pages its task and corpus are made of: {e}")
    os.makedirs(os.path.join(adapted, "corpus"), exist_ok=True)
    corpus = os.path.join(adapted, "corpus", "man.jsonl")
    size = write_pages(corpus, int((args.corpus_mb or 6.0) * 1e6))  # 6 MB of man pages unless --corpus-mb
    origin = "--from" if public else "the demo export"
    print(f"== adapt: {source} ({origin}) continued on man pages "
          f"({size / 1e6:.1f} MB: {corpus})", flush=True)
    prep_dir, run, hf = (os.path.join(adapted, name) for name in ("prep", "run", "hf"))
    prep(adapted, corpus, ["--input", f"manpages={corpus}", "--output", prep_dir, "--vocab", source, "--max-seq-len", "64",
                           "--validation-fraction", "0.05", "--rows-per-shard", "50000",
                           "--decontaminate", os.path.join(tasks, "*.jsonl"), "--overwrite"])
    run_stage(f"continue pretraining (--init-from {origin})",
              # no --lr: --init-from takes the rate the export's card records, the 3e-3 the demo trained at, and for a
              # public encoder the width rule (trainer/start/rate.py); the masking and dropout are the demo's short-run
              # recipe, as in its training. A sentence-transformers directory is named whole: its pooling reaches the card
              [*stage_command("trainer.pretrain"), "--data", os.path.join(prep_dir, "pairs"), "--init-from", init_from,
               "--batch-size", "32", "--mask-prob", "0.3", "--dropout", "0", "--zero-stage", "0",
               "--output", run, "--max-steps", str(args.adapt_steps), "--log-every", str(max(1, args.adapt_steps // 10)),
               "--eval-every", str(max(1, args.adapt_steps // 4)), "--save-every", str(args.adapt_steps)],
              saved=training_kept(run, args.adapt_steps))
    run_stage("export", [*CLOZEFORGE, "export", run, "--output", hf])
    score_both(source, hf, tasks, adapted, source_scored=has_masked_lm(source))
    # the demo's tiny export fine-tunes at 1e-3; a public encoder at 1e-4 (MiniLM's rate in issue 60's trial)
    rate = "1e-4" if public else "1e-3"
    run_stage("finetune man-sections: the adapted model against its source",
              [*CLOZEFORGE, "finetune", hf, "--task", task.kind, *_splits(tasks), "--output", os.path.join(adapted, "finetune"),
               "--baseline", source, "--seeds", str(args.finetune_seeds or 3), "--lr", rate, "--epochs", "10",
               "--baseline-lr", rate, "--baseline-epochs", "10", "--patience", "0", *finetune_ranks(args)])
    print(f"\n== adapt done in {time.time() - started:.0f} s: {os.path.join(adapted, 'finetune', 'results.json')}")
    return 0


def adapt_source(args: argparse.Namespace, work: str) -> tuple[str, str]:
    """(the directory of --from DIR or of the --from-package encoder extracted to WORKDIR/sources/NAME, its files
    checked by sha256; its encoder's folder: a sentence-transformers directory's Transformer module's, which prep
    --vocab and finetune --baseline read)."""
    from downstream.public_encoders import installed, missing
    from schemas import encoder_layout

    if args.from_package:
        row = installed(args.from_package)
        if row is None:
            raise ContractError(f"{args.from_package} is not installed: {missing(args.from_package)}")
        directory = row.extract(os.path.join(work, "sources", args.from_package))
    else:
        directory = os.path.abspath(args.source)

    def cat(path: str) -> bytes:
        with open(os.path.join(directory, path), "rb") as f:
            return f.read()

    layout = encoder_layout.read(cat, directory)
    if layout is None:
        raise ContractError(f"{directory}: neither config.json nor modules.json there (a transformers or "
                            "sentence-transformers directory)")
    return directory, os.path.join(directory, layout.encoder_dir) if layout.encoder_dir else directory


def has_masked_lm(model_dir: str) -> bool:
    """Whether config.json names a class with a masked-LM head (a bare encoder's `architectures` does not)."""
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        classes = json.load(f).get("architectures") or []
    return any(c.endswith(("ForMaskedLM", "ForPreTraining", "WithLMHeadModel")) for c in classes)


def score_both(source: str, adapted_hf: str, task: str, adapted: str, source_scored: bool = True) -> None:
    """`clozeforge score` of the export and of its adaptation on the man-sections task's test text (one line a row),
    which --decontaminate kept out of the adaptation corpus: held-out text of the new domain, with the same masks for
    both (one vocabulary, one seed). A source without a masked-LM head (a bare or sentence-transformers encoder) is
    not scored: its head would be random."""
    heldout = os.path.join(adapted, "heldout.txt")
    with open(os.path.join(task, "test.jsonl"), encoding="utf-8") as f, open(heldout, "w", encoding="utf-8") as out:
        out.writelines(" ".join(json.loads(line)["text"].split()) + "\n" for line in f if line.strip())
    reports = {}
    for name, model in ((("source", source),) if source_scored else ()) + (("adapted", adapted_hf),):
        reports[name] = os.path.join(adapted, f"score-{name}.json")
        run_stage(f"score the {name} model on held-out man-page text", [*CLOZEFORGE, "score", model, "--input", heldout,
                                                                        "--output", reports[name]])
    figures = {}
    for name, path in reports.items():
        with open(path, encoding="utf-8") as f:
            figures[name] = json.load(f)
    after = figures["adapted"]
    if not source_scored:
        print(f"\n== held-out masked-LM accuracy of the adapted model {after['mlm_accuracy']:.3f}, pseudo-perplexity "
              f"{after['pseudo_perplexity']:.1f} ({after['lines']['scored']} lines of {heldout}; the source has no MLM head)")
        return
    before = figures["source"]
    print(f"\n== held-out masked-LM accuracy {before['mlm_accuracy']:.3f} -> {after['mlm_accuracy']:.3f}, pseudo-perplexity "
          f"{before['pseudo_perplexity']:.1f} -> {after['pseudo_perplexity']:.1f} ({after['lines']['scored']} lines of {heldout})")
