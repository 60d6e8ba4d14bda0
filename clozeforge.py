"""The `clozeforge` command: one entry point, one subcommand per stage, each importing only its own half.

    clozeforge prep      raw text → clean/, vocab/, pairs/, report.json   (Beam; never imports torch)
    clozeforge tokenize  text → word-piece ids with a prep vocabulary     (no Beam, no torch)
    clozeforge inspect   a pairs/ directory: manifest, statistics, checksums
    clozeforge train     pairs → DeepSpeed checkpoints                     (torch; never imports apache_beam)
    clozeforge export    a run's checkpoint → a HuggingFace directory
    clozeforge fill-mask / embed   use an exported model
    clozeforge finetune  fine-tune an export (or a run's checkpoints) on labelled data, beside a scratch baseline
    clozeforge demo      all of the above on a built-in corpus, no flags, no download

`demo` lives here too: it is no part of either half, it runs every command above in turn, each as its own
process, exactly as a user would type it.

Imports are deferred to the chosen subcommand so that `prep` runs on a Dataflow worker with no torch and
`train` on a GPU node with no Beam. User errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import re
import shlex
import signal
import site
import subprocess
import sys
import time

USAGE = __doc__.split("\n\n")[1]

COMMANDS = {
    "prep": ("pipelines.prep", "main"),
    "tokenize": ("pipelines.commands.tokenize", "main"),
    "inspect": ("pipelines.commands.inspect", "main"),
    "train": ("trainer.pretrain", "main"),
    "export": ("trainer.downstream.export", "export_main"),
    "fill-mask": ("trainer.downstream.fill_mask", "fill_mask_main"),
    "embed": ("trainer.downstream.embed", "embed_main"),
    "finetune": ("trainer.downstream.finetune.command", "finetune_main"),
    "demo": ("clozeforge", "demo"),
}


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("clozeforge")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the OpenMP defaults of every torch process this command is or starts (the demo's stages), before torch loads
    from trainer import cpu_sharing

    cpu_sharing.apply()
    if argv and argv[0] in ("-V", "--version"):
        print(f"clozeforge {version()}")
        return 0
    if not argv or argv[0] in ("-h", "--help", "help"):
        print("usage: clozeforge COMMAND [flags]   (clozeforge COMMAND --help for its flags; clozeforge --version)\n")
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"clozeforge: unknown command {command!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module_name, function = COMMANDS[command]
    try:
        module = __import__(module_name, fromlist=[function])
    except ImportError as e:
        extra = "prep" if module_name.startswith("pipelines") else "train"
        print(f"clozeforge {command}: missing dependency ({e.name}); install it with: pip install 'clozeforge[{extra}]'", file=sys.stderr)
        return 2
    try:
        return getattr(module, function)(rest) or 0
    except BrokenPipeError:  # `clozeforge inspect ... | head`: the reader left; stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


DEMO_DOC = """`clozeforge demo`: the whole flow on a built-in corpus, with no download and no flags.

In:  nothing (optional: --workdir, --corpus GLOB to use your own text, --steps, --nproc, --ranks-check-steps,
     --finetune-seeds).
Out: WORKDIR/corpus (docstrings of the installed Python modules, read with `ast`), WORKDIR/prep (clean/,
     vocab/, pairs/, report.json), WORKDIR/run (checkpoints, metrics.jsonl, curves.png), WORKDIR/hf (a
     HuggingFace directory), WORKDIR/run-2-ranks (the same job on 2 DeepSpeed ranks, a few steps), a
     fill-mask example on stdout, and WORKDIR/finetune/TASK: the export fine-tuned on each built-in downstream
     task (WORKDIR/tasks/TASK, made from the machine's man pages, GNU manuals and licence texts, none of them in
     the pretraining corpus; trainer/downstream/finetune/builtin/) beside the same model trained from scratch,
     as mean ± SE over seeds, and WORKDIR/finetune/gains.md: the gain per task and their mean.

Each stage runs as its own process, exactly the command a user would type, so prep never shares an
interpreter with torch and train never with Beam. The defaults suit a small corpus on a small machine: a
4,096-piece vocabulary and 64-token pairs (docstring sentences are short), the `tiny` model in one process
with every core and ZeRO stage 0 (on a 2-core box, faster than 2 ranks of one thread), bf16
where the CPU has it (`--precision auto`), and a recipe for a short run of a small model that underfits: 30% of
tokens masked (validation still masks 15%), no dropout, a learning rate of 3e-3 with 6% warm-up and linear
decay, the run bounded by steps (`python bench/run.py quality` measures what each of these buys). A short
2-rank DeepSpeed ZeRO-2 stage shows the distributed path on the same data.

Ctrl-C (or SIGTERM) at any point: the running stage saves what it can and the demo exits 130 saying what was
kept; the same command continues from there.
"""

EXAMPLES = [
    "Return a new [MASK] with the same elements.",
    "Raise a [MASK] if the file does not exist.",
    "The [MASK] of the list is not changed.",
]


DEMO_FINETUNE = ["--lr", "1e-3", "--epochs", "10", "--baseline-lr", "1e-3", "--baseline-lr", "3e-3", "--baseline-epochs", "10"]
"""The demo's fine-tuning recipe (bench/README.md, "finetune" and "recipe"): the export at one learning rate, scratch
on its own, higher grid (finetune's default scratch grid, 4 rates x 20 epochs, would take 8 times the export's
time), both at the export's trained length (finetune's default --max-seq-len), where a user's own run would be."""


class Interrupted(Exception):
    """A stage stopped before its end (a signal to the demo or to the stage's own process); the message says
    what it saved."""


def _python(module: str) -> list[str]:
    """`python -m MODULE` that imports this installation's packages whatever the working directory holds (a
    folder named `clozeforge` or `trainer` there would otherwise shadow them): -P (3.11+) keeps the working
    directory off sys.path; 3.10 drops it by hand. PYTHONPATH (see _child_env) names where ours are."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return [sys.executable, "-c", "import runpy, sys; del sys.path[0]; runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)", module]


def _child_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    here = os.path.dirname(os.path.abspath(__file__))  # where this module and its packages were imported from
    if here not in site.getsitepackages() + [site.getusersitepackages()]:  # a checkout, or an editable install
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def _die_with_parent() -> None:
    """In the child, before exec (Linux): SIGTERM when the demo dies, even by kill -9, so a trainer checkpoints
    and exits instead of running on unseen in its own session."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run(title: str, command: list[str], saved=lambda: None) -> None:
    """Run one stage as its own process and wait for it; SIGINT/SIGTERM to the demo is passed on to it.

    The child runs in its own session so that a terminal's Ctrl-C reaches it once, through here (twice would
    stop a trainer at once, without its checkpoint). `saved()` says what an unfinished stage kept (None:
    the stage is complete); a stage stopped by a signal, to the demo or to the child alone, raises
    Interrupted instead of reporting success."""
    print(f"\n== {title}\n$ {' '.join(command)}", flush=True)
    started, signals, child = time.time(), [], []

    def forward(signum, _frame) -> None:
        signals.append(signum)
        print(f"\nclozeforge demo: {signal.Signals(signum).name}: passed on to {title}; waiting for it to save and exit",
              file=sys.stderr, flush=True)
        if child:
            child[0].send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        child.append(subprocess.Popen(command, env=_child_env(), start_new_session=True, preexec_fn=_die_with_parent))
        if signals:  # arrived while it was starting
            child[0].send_signal(signals[-1])
        status = child[0].wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    kept = saved()
    if signals or status in (130, -signal.SIGINT, -signal.SIGTERM) or (status == 0 and kept):
        raise Interrupted(f"{title} stopped before its end{f' ({signal.Signals(signals[0]).name})' if signals else ''}; "
                          + (kept or "nothing of it is kept"))
    if status != 0:
        raise SystemExit(f"clozeforge demo: {title} failed with exit status {status}")
    print(f"-- {title}: {time.time() - started:.0f} s", flush=True)


def _checkpoint_step(run: str) -> int | None:
    """The step of the run's complete checkpoint: `clozeforge train` names it in RUN/checkpoints/latest
    (step_<8 digits>, trainer/checkpoint.py), replaced only once a checkpoint is whole. Read here without
    importing torch."""
    try:
        with open(os.path.join(run, "checkpoints", "latest")) as f:
            found = re.fullmatch(r"step_(\d{8})", f.read().strip())
    except OSError:
        return None
    return int(found.group(1)) if found else None


def _training_kept(run: str, steps: int):
    """For _run: None once the run's checkpoint is at `steps`, else what is kept. `clozeforge train` stopped by
    a signal exits 0 after its checkpoint, like a complete run: the checkpoint's step tells them apart."""
    def kept() -> str | None:
        step = _checkpoint_step(run)
        if step == steps:
            return None
        return f"checkpoint at step {step} of {steps} in {run}" if step else f"no checkpoint yet in {run}"
    return kept


def demo_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge demo", description=DEMO_DOC.split("\n\n")[0])
    ap.add_argument("--workdir", default="clozeforge-demo", help="where everything goes (default: %(default)s)")
    ap.add_argument("--corpus", default=None, help="your own files (URL glob) instead of the built-in corpus")
    ap.add_argument("--corpus-mb", type=float, default=6.0, help="size of the built-in corpus (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=3000, help="training steps of 32 pairs (default: %(default)s)")
    ap.add_argument("--nproc", type=int, default=1, help="training ranks; one rank uses every core (default: %(default)s)")
    ap.add_argument("--ranks-check-steps", type=int, default=20,
                    help="steps of the extra 2-rank DeepSpeed run that shows the distributed path; 0 skips it (default: %(default)s)")
    ap.add_argument("--finetune-seeds", type=int, default=3,
                    help="seeds of the closing fine-tuning stage, pretrained and from scratch; 0 skips it (default: %(default)s)")
    ap.add_argument("--adapt", action="store_true",
                    help="after a finished demo in --workdir: continue its export on man pages (train --init-from, "
                         "decontaminated against the man-sections task) and score the adapted model against it")
    ap.add_argument("--adapt-steps", type=int, default=3000, help="continued-pretraining steps of --adapt (default: %(default)s)")
    return ap


def demo(argv: list[str] | None = None) -> int:
    """`clozeforge demo` (see DEMO_DOC): each stage as its own process, exactly the command a user would type.

    Ctrl-C or SIGTERM at any point: the running stage gets the signal and keeps what it can (train its
    checkpoint), the demo says what was kept and exits 130; the same command continues (the corpus is rewritten
    to the same bytes, a finished prep of the same corpus and flags is reused, and train resumes from its
    checkpoint)."""
    args = demo_parser().parse_args(argv)
    for ok, flag in ((args.corpus_mb > 0, "--corpus-mb must be > 0"), (args.steps >= 1, "--steps must be >= 1"),
                     (args.nproc >= 1, "--nproc must be >= 1"), (args.ranks_check_steps >= 0, "--ranks-check-steps must be >= 0"),
                     (args.finetune_seeds >= 0, "--finetune-seeds must be >= 0")):
        if not ok:
            demo_parser().error(flag)
    again = shlex.join(["clozeforge", "demo", *(sys.argv[2:] if argv is None else argv)])
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # outside a stage, SIGTERM ends the demo as Ctrl-C does
    try:
        return _adapt(args) if args.adapt else _demo(args)
    except Interrupted as e:
        print(f"\nclozeforge demo: {e}\nRun `{again}` to continue.", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"\nclozeforge demo: interrupted outside a stage; nothing is lost. Run `{again}` to continue.", file=sys.stderr)
    return 130


def _demo(args: argparse.Namespace) -> int:
    work = os.path.abspath(args.workdir)
    started = time.time()
    corpus = args.corpus
    if corpus is None:
        # no Beam import
        from pipelines.documents.builtin_corpus import write_builtin_corpus

        print(f"== corpus: docstrings of this environment's Python modules ({args.corpus_mb:g} MB)", flush=True)
        files = write_builtin_corpus(os.path.join(work, "corpus"), int(args.corpus_mb * 1e6))
        corpus = os.path.join(work, "corpus", "*.jsonl")
        print(f"   {len(files)} files under {os.path.dirname(files[0])}")
    prep, run, hf = (os.path.join(work, name) for name in ("prep", "run", "hf"))
    _prep(work, corpus, ["--input", f"docstrings={corpus}", "--output", prep, "--vocab-size", "4096", "--max-seq-len", "64",
                         "--validation-fraction", "0.05", "--rows-per-shard", "50000",
                         "--overwrite"])  # the demo owns its workdir: a rerun with another --corpus replaces its prep
    pairs = os.path.join(prep, "pairs")
    train = [*_python("trainer.pretrain"), "--data", pairs, "--model", "tiny", "--batch-size", "32", "--lr", "3e-3",
             "--mask-prob", "0.3", "--dropout", "0"]
    # One rank has nothing to partition: ZeRO stage 0 skips stage 2's gradient bucketing (14,200 against 11,700
    # tokens/s on 2 cores, bench/README.md "demo"); more ranks keep the trainer's default, stage 2.
    zero = ["--zero-stage", "0"] if args.nproc == 1 else []
    _run("train", [*train, f"--nproc-per-node={args.nproc}", *zero, "--output", run, "--max-steps", str(args.steps),
                   "--log-every", str(max(1, args.steps // 20)), "--eval-every", str(max(1, args.steps // 4)),
                   # three checkpoints kept, so `clozeforge finetune RUN --checkpoints all` draws a curve from the run
                   "--save-every", str(max(1, args.steps // 3)), "--keep-last", "3"], saved=_training_kept(run, args.steps))
    if args.ranks_check_steps:
        ranks_run = os.path.join(work, "run-2-ranks")
        _run("train on 2 DeepSpeed ranks (ZeRO-2 over gloo; a short run on the same data)",
             [*train, "--nproc-per-node=2", "--output", ranks_run, "--max-steps", str(args.ranks_check_steps),
              "--log-every", str(max(1, args.ranks_check_steps // 2)), "--eval-every", "0", "--eval-batches", "2",
              "--save-every", str(args.ranks_check_steps)], saved=_training_kept(ranks_run, args.ranks_check_steps))
    # --verify reloads the export with transformers, which the `demo` extra installs and `train` does not
    verify = ["--verify"] if importlib.util.find_spec("transformers") else []
    if not verify:
        print("\n(transformers is not installed: the export is not reloaded to compare logits; pip install transformers)")
    _run("export", [*_python("clozeforge"), "export", run, "--output", hf, *verify])
    _run("fill-mask", [*_python("clozeforge"), "fill-mask", hf, *EXAMPLES])
    finetune = os.path.join(work, "finetune")
    if args.finetune_seeds and verify:  # fine-tuning runs on transformers' heads
        _finetune_tasks(hf, work, args.finetune_seeds)
    print(f"\n== done in {time.time() - started:.0f} s")
    for label, path in (("corpus", corpus), ("report", os.path.join(prep, "report.json")), ("vocabulary", os.path.join(prep, "vocab")),
                        ("pair shards", pairs), ("checkpoints", os.path.join(run, "checkpoints")),
                        ("metrics", os.path.join(run, "metrics.jsonl")), ("loss curves", os.path.join(run, "curves.png")),
                        ("HF model", hf), ("fine-tuned", os.path.join(finetune, "gains.md"))):
        if label == "fine-tuned" and not os.path.exists(path):  # skipped: no transformers, or --finetune-seeds 0
            continue
        print(f"   {label:<12} {path}")
    print(f"\nLoad it with transformers:  AutoModelForMaskedLM.from_pretrained({hf!r})")
    return 0


def _finetune_tasks(hf: str, work: str, seeds: int) -> None:
    """Fine-tune the export and a scratch model on each of the demo's built-in tasks, then print the gains."""
    from trainer.downstream.finetune.builtin import DEMO, TASKS  # standard library only
    from trainer.downstream.finetune.builtin import report

    results = {}
    for name in DEMO:
        task, directory = TASKS[name], os.path.join(work, "tasks", name)
        try:
            classes = task.write(directory)
        except LookupError as e:  # a machine without man pages or manuals: the other tasks still run
            print(f"\n(skipped {name}: {e})")
            continue
        print(f"\n== downstream task {name}: {task.kind}, {len(classes)} classes ({', '.join(classes)}), "
              f"from {task.source}; not in the pretraining corpus", flush=True)
        out = os.path.join(work, "finetune", name)
        _run(f"finetune {name}: the export and the same model from scratch",
             [*_python("clozeforge"), "finetune", hf, "--task", task.kind, *(f"--{split}={os.path.join(directory, split)}.jsonl"
              for split in ("train", "validation", "test")), "--output", out, "--baseline", "scratch",
              "--seeds", str(seeds), *DEMO_FINETUNE])
        results[name] = os.path.join(out, "results.json")
    if results:
        text = report.table(report.gains(results))
        with open(os.path.join(work, "finetune", "gains.md"), "w", encoding="utf-8") as f:
            f.write(text)
        print(f"\n== gain from pretraining, test points, mean ± SE over {seeds} seeds (paired)\n{text}", end="")


def _adapt(args: argparse.Namespace) -> int:
    """`clozeforge demo --adapt`: the continued-pretraining story on the demo's own export (WORKDIR/hf) — a corpus
    of another domain (man pages) prepped with the export's vocabulary and decontaminated against the man-sections
    task's files, `train --init-from` the export, export, then `finetune ADAPTED --baseline SOURCE` on that task."""
    from trainer.downstream.finetune.builtin import TASKS  # standard library only
    from trainer.downstream.finetune.builtin.man_sections import write_pages

    work = os.path.abspath(args.workdir)
    source, adapt = os.path.join(work, "hf"), os.path.join(work, "adapt")
    if not os.path.exists(os.path.join(source, "config.json")):
        print(f"clozeforge demo: error: --adapt continues a finished demo's export, and {source} has none; "
              f"run `clozeforge demo --workdir {args.workdir}` first", file=sys.stderr)
        return 2
    started, task = time.time(), TASKS["man-sections"]
    tasks = os.path.join(adapt, "task")
    try:
        task.write(tasks)
    except LookupError as e:  # a machine without man pages
        print(f"clozeforge demo: error: --adapt needs the man pages its task and corpus are made of: {e}", file=sys.stderr)
        return 2
    os.makedirs(os.path.join(adapt, "corpus"), exist_ok=True)
    corpus = os.path.join(adapt, "corpus", "man.jsonl")
    size = write_pages(corpus, int(args.corpus_mb * 1e6))
    print(f"== adapt: {source} (the demo's export) continued on man pages ({size / 1e6:.1f} MB: {corpus})", flush=True)
    prep, run, hf = (os.path.join(adapt, name) for name in ("prep", "run", "hf"))
    _prep(adapt, corpus, ["--input", f"manpages={corpus}", "--output", prep, "--vocab", source, "--max-seq-len", "64",
                          "--validation-fraction", "0.05", "--rows-per-shard", "50000",
                          "--decontaminate", os.path.join(tasks, "*.jsonl"), "--overwrite"])
    _run("continue pretraining (--init-from the export)",
         # NOTE: --lr 1e-3, not --init-from's 1e-4 (BERT-base's): the demo's tiny model trained at 3e-3, and at 1e-4 1,000
         # steps moved its man-page MLM accuracy 0.212 -> 0.226, at 1e-3 3,000 steps to 0.344 (trainer/start/README.md)
         [*_python("trainer.pretrain"), "--data", os.path.join(prep, "pairs"), "--init-from", source, "--batch-size", "32", "--lr", "1e-3",
          "--mask-prob", "0.3", "--dropout", "0", "--zero-stage", "0", "--output", run, "--max-steps", str(args.adapt_steps),
          "--log-every", str(max(1, args.adapt_steps // 10)), "--eval-every", str(max(1, args.adapt_steps // 4)),
          "--save-every", str(args.adapt_steps)], saved=_training_kept(run, args.adapt_steps))
    _run("export", [*_python("clozeforge"), "export", run, "--output", hf])
    _run("finetune man-sections: the adapted model against its source",
         [*_python("clozeforge"), "finetune", hf, "--task", task.kind, *(f"--{split}={os.path.join(tasks, split)}.jsonl"
          for split in ("train", "validation", "test")), "--output", os.path.join(adapt, "finetune"), "--baseline", source,
          "--seeds", str(args.finetune_seeds or 3), "--lr", "1e-3", "--epochs", "10", "--baseline-lr", "1e-3", "--baseline-epochs", "10"])
    print(f"\n== adapt done in {time.time() - started:.0f} s: {os.path.join(adapt, 'finetune', 'results.json')}")
    return 0


def _prep(work: str, corpus: str, flags: list[str]) -> None:
    """Run prep, unless WORKDIR/prep is already what it would write: the same corpus bytes, flags and prep code
    as the finished prep recorded in WORKDIR/.prep-fingerprint.json, and its files as they were then
    (pipelines/outputs/fingerprint.py). A rerun of the demo then skips about a minute of identical work."""
    from pipelines.outputs import fingerprint  # no Beam import

    stamp, prep = os.path.join(work, ".prep-fingerprint.json"), flags[flags.index("--output") + 1]
    digest = fingerprint.inputs_fingerprint([corpus], flags)
    why = fingerprint.stale(stamp, prep, digest)
    if why is None:
        print(f"\n== prep: reusing {prep} (the same corpus, settings and code as its finished run, fingerprint "
              f"{digest[:12]}; its files verified)", flush=True)
        return
    if os.path.exists(stamp) or os.path.exists(prep):
        print(f"\n== prep: running again ({why})", flush=True)
    fingerprint.forget(stamp)
    _run("prep", [*_python("pipelines.prep"), *flags])
    fingerprint.record(stamp, prep, digest)


def cli() -> None:
    """The console script (and `python -m clozeforge`): main(), then exit with its status, which a signal that
    arrives while the process exits does not change (see schemas/exits.py)."""
    from schemas.exits import exit_with  # the standard library only: prep on a worker without torch uses it too

    exit_with(main())


if __name__ == "__main__":
    cli()
