"""A pretraining recipe, scored by what it earns downstream: `python experiments/recipe_trial.py NAME [recipe flags]`.

In:  a recipe (tokenizer and packing, hence the family: BERT's WordPiece + NSP pairs, RoBERTa's byte-level BPE + full
     or doc sentences; model preset, sequence length, an optional short phase at 128 tokens, steps, lr, masking
     rate, dropout, seed) and a work directory shared by every recipe of a search.
Out: WORK/NAME/ (run, export, fine-tuning results per task) and WORK/NAME/recipe.json: pretraining tokens and
     steps, validation MLM accuracy, and per built-in task the export's test score against the same model from
     scratch (`clozeforge finetune --baseline scratch`, paired mean ± SE over seeds), their mean over the demo's
     tasks and over the held-out ones. Its last line is that JSON. experiments/README.md "recipe" holds the search.
     `python experiments/recipe_trial.py compare --work DIR A B`: recipe A's exports against B's, task by task, paired over the
     fine-tuning seeds (both fine-tuned with the same seeds and flags), and their mean; its last line is that JSON.

Every stage is the command a user would type, each in its own process, as `clozeforge demo` runs them. The corpus
and prep are made once per work directory (the demo's corpus and flags; a 128-token prep with the same
vocabulary for a phase at 128), so the recipes differ only in what the flags say. Gains are bounded by steps,
not time, so they mean the same on a busy machine; the wall times recorded here do not (marked contended).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[0] = ROOT  # run as a file: the repository root, so that the product's packages import

from demo import corpus as demo_corpus  # noqa: E402
from demo.flows import DEMO_FINETUNE  # noqa: E402  (the demo's fine-tuning recipe, both arms' grids)
from downstream.finetune.builtin import (  # noqa: E402
    DEMO,
    HELD_OUT,
    TASKS,
    report,  # noqa: E402
)
from experiments._stages import clozeforge  # noqa: E402


def _cli(*args: str, log: str) -> float:
    """Run `clozeforge ARGS` (experiments/_stages.py); its wall seconds."""
    return clozeforge(*args, log=log, study="recipe_trial")[0]


CORPUS_MB = 6.0
"""The demo's corpus size (demo --corpus-mb's default)."""


def prepared(work: str, seq: int, corpus_mb: float, log: str, tokenizer: str = "wordpiece", packing: str = "nsp",
             corpus_kind: str = "docstrings") -> str:
    """WORK/prep-SEQ (NSP pairs of at most SEQ tokens, WordPiece), or WORK/prep-SEQ-TOKENIZER-PACKING, made once; every
    prep of a tokenizer after its first reuses that first one's vocabulary, but for another corpus kind (demo/corpus.py),
    which learns its own as the demo would on it."""
    kind = "" if (tokenizer, packing) == ("wordpiece", "nsp") else f"-{tokenizer}-{packing}"
    variant = "" if corpus_mb == CORPUS_MB else f"-{corpus_mb:g}mb"  # another corpus size or kind: its own corpus and prep
    variant += "" if corpus_kind == "docstrings" else f"-{corpus_kind}"
    out = os.path.join(work, f"prep-{seq}{kind}{variant}")
    if os.path.exists(os.path.join(out, "pairs", "manifest.json")):
        return out
    corpus = os.path.join(work, f"corpus{variant}")
    if not os.path.isdir(corpus):
        demo_corpus.write(corpus, int(corpus_mb * 1e6), corpus_kind)
    # every prep of a tokenizer takes the vocabulary of its first (64 tokens; docstrings of any size: the demo's 6 MB)
    own = corpus_kind != "docstrings"
    first = os.path.join(work, "prep-64" + ("" if tokenizer == "wordpiece" else f"-{tokenizer}-full-sentences") + (variant if own else ""))
    if out != first and not os.path.exists(os.path.join(first, "pairs", "manifest.json")):
        prepared(work, 64, corpus_mb if own else CORPUS_MB, log, tokenizer, "nsp" if tokenizer == "wordpiece" else "full-sentences",
                 corpus_kind)
    vocab = ["--vocab", os.path.join(first, "vocab")] if out != first else ["--vocab-size", "4096"]
    clean = []
    if variant:  # text beyond the demo's: documents sharing a 13-word n-gram with any task's evaluation text dropped
        clean = demo_corpus.decontaminate_flags(written_tasks(work, (*DEMO, *HELD_OUT)))
    _cli("prep", *demo_corpus.inputs(corpus, corpus_kind), "--output", out, *vocab, *clean, "--max-seq-len", str(seq),
         "--tokenizer", tokenizer, "--packing", packing, "--validation-fraction", "0.05", "--rows-per-shard", "50000", log=log)
    return out


def written_tasks(work: str, names) -> list[str]:
    """WORK/tasks/NAME for each built-in task, its splits written once."""
    directories = []
    for name in names:
        directory = os.path.join(work, "tasks", name)
        if not os.path.exists(os.path.join(directory, "test.jsonl")):
            TASKS[name].write(directory)
        directories.append(directory)
    return directories


def mean_pair_tokens(pairs: str) -> float:
    """Real tokens per row over the first training shard: [CLS] A [SEP] B [SEP] for NSP pairs, <s> row </s> for
    packed rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from schemas import Manifest

    manifest = Manifest.read(pairs)
    shard = manifest.split_shards("train")[0]
    with pa.memory_map(manifest.resolve(shard.path)) as source:
        table = pa.ipc.open_file(source).read_all()
    if "tokens" in table.column_names:
        return float((pc.list_value_length(table.column("tokens")).to_numpy() + 2).mean())
    a = pc.list_value_length(table.column("tokens_a")).to_numpy()
    b = pc.list_value_length(table.column("tokens_b")).to_numpy()
    return float((a + b + 3).mean())


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def last_validation(run: str) -> dict:
    with open(os.path.join(run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return next((r for r in reversed(records) if r.get("split") == "validation"), {})


def compare(argv: list[str]) -> int:
    """Recipe A's fine-tuned exports against recipe B's on the tasks both ran: per task the paired difference of
    their test scores over the fine-tuning seeds (each seed's data order and head the same in both), then the mean
    over tasks with its SE, sqrt(sum of SE^2) / n (seed noise only, as the gains' mean)."""
    ap = argparse.ArgumentParser(prog="experiments/recipe_trial.py compare", description=compare.__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--work", default="recipes")
    args = ap.parse_args(argv)
    rows = []
    for task in sorted(os.listdir(os.path.join(args.work, args.a, "finetune"))):
        paths = [os.path.join(args.work, name, "finetune", task, "results.json") for name in (args.a, args.b)]
        if not all(os.path.exists(p) for p in paths):
            continue
        scores = []
        for path in paths:
            with open(path, encoding="utf-8") as f:
                scores.append(json.load(f)["pretrained"]["scores"])
        mean, se = report._paired(*scores)
        rows.append({"task": task, args.a: sum(scores[0]) / len(scores[0]), args.b: sum(scores[1]) / len(scores[1]),
                     "difference": round(mean, 4), "se": round(se, 4)})
        print(f"{task}: {rows[-1][args.a]:.1f} against {rows[-1][args.b]:.1f}: {mean:+.1f} ± {se:.1f}")
    if not rows:
        raise SystemExit(f"experiments recipe_trial compare: {args.a} and {args.b} share no fine-tuned task under {args.work}")
    mean = sum(r["difference"] for r in rows) / len(rows)
    se = math.sqrt(sum(r["se"] ** 2 for r in rows)) / len(rows)
    print(f"mean of {len(rows)}: {mean:+.1f} ± {se:.1f}")
    print(json.dumps({"a": args.a, "b": args.b, "tasks": rows, "mean_difference": [round(mean, 4), round(se, 4)]}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:
        return compare(argv[1:])
    args = recipe_parser().parse_args(argv)
    return run(args)


def recipe_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--work", default="recipes", help="shared work directory (default: %(default)s)")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--seq", type=int, default=64, help="phase-1 pair length (64 or 128)")
    ap.add_argument("--tokenizer", default="wordpiece", choices=("wordpiece", "bpe", "unigram"), help="prep --tokenizer")
    ap.add_argument("--packing", default="nsp", choices=("nsp", "full-sentences", "doc-sentences"), help="prep --packing")
    ap.add_argument("--seed", default="42", help="the pretraining seed (train --seed)")
    ap.add_argument("--phase2-steps", type=int, default=0, help="last steps at 128 tokens (0: none)")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", default="3e-3")
    ap.add_argument("--mask-prob", default="0.3")
    ap.add_argument("--dropout", default="0")
    ap.add_argument("--corpus-mb", type=float, default=CORPUS_MB, help="built-in corpus size (its own prep, the same vocabulary)")
    ap.add_argument("--corpus", default="docstrings", choices=sorted(demo_corpus.CORPORA),
                    help="the built-in corpus's kind (demo/corpus.py); another than docstrings learns its own vocabulary")
    ap.add_argument("--objective", default="mlm", choices=("mlm", "electra"), help="train --objective")
    ap.add_argument("--family", default=None, help="train --family (default: the data's; modernbert takes its recipe's "
                                                   "schedule and batch warmup from its row)")
    ap.add_argument("--precision", default="auto", help="train --precision (fp32: the arithmetic of a CPU without bf16)")
    ap.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per arm")
    ap.add_argument("--scratch-from", default=None, metavar="RECIPE",
                    help="reuse that recipe's scratch arm (same model, length, seeds and fine-tuning flags): fine-tune "
                         "only the export here, and pair it with those scratch runs")
    ap.add_argument("--tasks", default="demo", choices=("demo", "held-out", "all", "none"),
                    help="the built-in tasks to fine-tune on (none: train and export only)")
    ap.add_argument("--finetune", nargs=argparse.REMAINDER, default=DEMO_FINETUNE,
                    help="fine-tuning flags, last (default: the demo's)")
    return ap


def run(args: argparse.Namespace) -> int:
    work = os.path.abspath(args.work)
    here = os.path.join(work, args.name)
    os.makedirs(here, exist_ok=True)
    log = os.path.join(here, "log.txt")
    prep = prepared(work, args.seq, args.corpus_mb, log, args.tokenizer, args.packing, args.corpus)
    run, hf = os.path.join(here, "run"), os.path.join(here, "hf")
    phase2 = []
    if args.phase2_steps:
        phase2 = ["--phase2-data", os.path.join(prepared(work, 128, args.corpus_mb, log, corpus_kind=args.corpus), "pairs"),
                  "--phase2-start", str(args.steps - args.phase2_steps)]
    timing = os.path.join(here, "train_seconds.json")
    if not os.path.exists(os.path.join(hf, "config.json")):
        seconds = _cli("train", "--data", os.path.join(prep, "pairs"), "--output", run, "--model", args.model, "--batch-size",
                       str(args.batch_size), "--lr", args.lr, "--mask-prob", args.mask_prob, "--dropout", args.dropout,
                       "--objective", args.objective, "--precision", args.precision, "--zero-stage", "0", "--seed", args.seed,
                       *(["--family", args.family] if args.family else []), "--max-steps", str(args.steps), *phase2, "--log-every", str(max(1, args.steps // 20)),
                       "--eval-every", str(args.steps), "--save-every", str(args.steps), log=log)
        with open(timing, "w") as f:
            json.dump({"train_seconds": round(seconds, 1)}, f)
        _cli("export", run, "--output", hf, log=log)
    if args.tasks == "none":
        return 0
    tokens = (args.steps - args.phase2_steps) * args.batch_size * mean_pair_tokens(os.path.join(prep, "pairs"))
    if args.phase2_steps:
        tokens += args.phase2_steps * args.batch_size * mean_pair_tokens(os.path.join(work, "prep-128", "pairs"))
    with open(os.path.join(hf, "tokenizer_config.json")) as f:  # the trained length: fine-tune there, as a user would
        trained = json.load(f)["model_max_length"]
    names = {"demo": DEMO, "held-out": HELD_OUT, "all": (*DEMO, *HELD_OUT)}[args.tasks]
    results, scratch = {}, {}
    finetune = args.finetune
    baseline = ["--baseline", "scratch"]
    if args.scratch_from:
        baseline = ["--baseline", "none"]
        finetune = [a for i, a in enumerate(finetune) if not (a.startswith("--baseline") or
                                                              (i and finetune[i - 1].startswith("--baseline")))]
    for name, directory in zip(names, written_tasks(work, names), strict=True):
        out = os.path.join(here, "finetune", name)
        if not os.path.exists(os.path.join(out, "results.json")):
            _cli("finetune", hf, "--task", TASKS[name].kind, *(f"--{s}={os.path.join(directory, s)}.jsonl" for s in
                 ("train", "validation", "test")), "--output", out, *baseline, "--seeds", str(args.seeds),
                 "--max-seq-len", str(trained), "--overwrite", *finetune, log=log)
        results[name] = os.path.join(out, "results.json")
        if args.scratch_from:
            scratch[name] = os.path.join(work, args.scratch_from, "finetune", name, "results.json")
    rows = report.gains(results, scratch or None)
    valid = last_validation(run)
    summary = {"name": args.name, "recipe": {k: v for k, v in vars(args).items() if k not in ("name", "work")},
               "pretraining_tokens": round(tokens), "steps": args.steps, "trained_seq_len": trained,
               "valid_mlm_accuracy": valid.get("mlm_acc"), "valid_nsp_accuracy": valid.get("nsp_acc"),
               "train_seconds": _read_json(timing).get("train_seconds"),
               "mean_row_tokens": round(mean_pair_tokens(os.path.join(prep, "pairs")), 2),
               "tasks": rows}
    for group, members in (("demo", DEMO), ("held_out", HELD_OUT)):
        chosen = [r for r in rows if r["task"] in members]
        if chosen:
            summary[f"mean_gain_{group}"] = report.mean_gain(chosen)
    with open(os.path.join(here, "recipe.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(report.table(rows), end="")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
