"""Continued pretraining scored on held-out text of the new domain, with transformers.

    python experiments/adapt.py run SOURCE --work DIR [--steps 1500] [--without-record] [--name NAME] [-- TRAIN FLAGS]
    python experiments/adapt.py score MODEL [MODEL ...] --lines FILE [--max-lines 1000] [--seed 0]

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


def main(argv: list[str] | None = None) -> int:
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
    sys.exit(main())
