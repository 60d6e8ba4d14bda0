"""The recipe race (issue 46): every candidate pretrains for the same seconds, and is scored on tasks kept apart.

`python experiments/run.py race` (the defaults) or `python experiments/race.py [--budget SECONDS] [--seeds 1 2] [--only NAME ...]
[--work DIR] [--precision fp32]`.

In:  CANDIDATES (one row each: a recipe as experiments/recipe_trial.py's flags), a training budget in seconds, the pretraining
     seeds. The candidates run one after another on this machine, never side by side.
Out: WORK/race.json, and the same as the last line: per candidate the steps its budget buys here (a short probe of
     its own training measures its steps a second), the seconds each seed's training took, and its mean gain over
     scratch on two sets of tasks kept apart:
     - selection: the demo's tasks (man pages, GNU info manuals, licence texts): they choose the winner;
     - confirmation: the held-out tasks (the standard library's error messages and comments: text no selection task
       reads), never looked at while choosing.
     Each set's gain is the mean over its tasks, pretraining seeds and fine-tuning seeds; its SE counts both seeds:
     the larger of the spread between the pretraining seeds' means (sd / sqrt(seeds)) and the fine-tuning seeds'
     paired SE carried through the mean. The winner is the candidate with the highest selection mean.

Every recipe is the demo's before the race (tiny, 64-token rows, batch 32, lr 3e-3, dropout 0, 4,096 WordPiece pieces
learnt once from 6 MB of docstrings; a row with another corpus kind learns its own) but for its row's flags, and fine-tunes with the demo's protocol (demo/flows.py
DEMO_FINETUNE: both arms on the same grid). Candidates of one model shape and corpus kind share one scratch arm (the
same architecture, vocabulary, seeds and grid give the same scratch runs); experiments/recipe_trial.py does each run and keeps
its files under WORK/NAME-sSEED.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[0] = ROOT  # run as a file: the repository root, so that the product's packages and `experiments` import

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from experiments import recipe_trial  # noqa: E402
from downstream.finetune.builtin import DEMO, HELD_OUT  # noqa: E402
from downstream.stats import mean_and_se  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    what: str
    flags: tuple[str, ...] = ()

    def recipe(self) -> argparse.Namespace:
        """The row as experiments/recipe_trial.py reads it: its flags over its defaults (the demo's recipe)."""
        return recipe_trial.recipe_parser().parse_args([self.name, *self.flags])


CANDIDATES = (
    Candidate("bert-nsp", "the demo's recipe before the race: NSP pairs, 30% masked, 6 MB of docstrings"),
    Candidate("mask-40", "40% masked (Wettig et al. 2023)", ("--mask-prob", "0.4")),
    Candidate("electra", "ELECTRA (Clark et al. 2020): generator 1/4 of the width, 15% masked, discriminator weight 50",
              ("--objective", "electra", "--mask-prob", "0.15")),
    Candidate("corpus-24mb", "4x the distinct text: 24 MB of docstrings, not the demo's 6 MB, decontaminated against every task",
              ("--corpus-mb", "24")),
    Candidate("documentation", "the machine's documentation, 15 MB: 6 MB of docstrings, 6 MB of man pages, the GNU manuals' "
              "3 MB, decontaminated against every task; its own vocabulary (and scratch arm)",
              ("--corpus", "documentation", "--corpus-mb", "15")),
    Candidate("mini", "a wider, deeper model (mini: 4 layers, 256 wide) for the same seconds: fewer steps",
              ("--model", "mini")),
    Candidate("roberta", "RoBERTa's recipe (Liu et al. 2019): byte-level BPE, packed full sentences, MLM only, 30% masked, "
              "on the demo's corpus (documentation's 15 MB)",
              ("--tokenizer", "bpe", "--packing", "full-sentences", "--family", "roberta",
               "--corpus", "documentation", "--corpus-mb", "15")),
    Candidate("modernbert", "ModernBERT's recipe (Warner et al. 2024): its network (rotary, GeGLU, local/global attention, "
              "no biases) at tiny's width, RoBERTa's rows attended per document, 30% masked, warmup-stable-decay, batch "
              "warmup, on the demo's corpus (documentation's 15 MB)",
              ("--tokenizer", "bpe", "--packing", "full-sentences", "--family", "modernbert",
               "--corpus", "documentation", "--corpus-mb", "15")),
)
"""The candidates, in the order they run."""

TOLERANCE = 0.05
"""How far a first run's steps may be from what the budget buys at its own rate before it is trained again."""

PROBE_STEPS = 200
"""Steps of a candidate's probe: its rate is the median of its 20-step windows after the first (start-up left
out). 60 steps were too few: one candidate's probe ran 17% below its own run's rate, and that run trained 207 s of
a 240 s budget."""


def _train_rate(candidate: Candidate, work: str, precision: str, log: str) -> float:
    """Steps a second of the candidate's training on this machine: a short run of the same command."""
    r = candidate.recipe()
    prep = recipe_trial.prepared(work, r.seq, r.corpus_mb, log, r.tokenizer, r.packing, r.corpus)
    pairs = os.path.join(prep, "pairs")
    run = os.path.join(work, "probes", candidate.name)
    if not os.path.exists(os.path.join(run, "metrics.jsonl")):
        subprocess.run(["rm", "-rf", run], check=True)
        recipe_trial._cli("train", "--data", pairs, "--output", run, "--model", r.model, "--batch-size", str(r.batch_size),
                    "--lr", r.lr, "--mask-prob", r.mask_prob, "--dropout", r.dropout,
                    "--objective", r.objective, "--precision", precision, "--zero-stage", "0",
                    *(["--family", r.family] if r.family else []), "--max-steps", str(PROBE_STEPS), "--log-every", "20", "--eval-every", "0", "--save-every", str(PROBE_STEPS), log=log)
    return _run_rate(run, pairs, r.batch_size)


def _run_rate(run: str, pairs: str, batch_size: int) -> float:
    """Steps a second of a finished run: the median of its logged windows after the first."""
    with open(os.path.join(run, "metrics.jsonl")) as f:
        windows = [json.loads(line) for line in f if line.strip()]
    rates = [r["tokens_per_s"] for r in windows if "tokens_per_s" in r][1:]
    return statistics.median(rates) / (batch_size * recipe_trial.mean_pair_tokens(pairs))


def _read_steps(here: str) -> int:
    """The steps of WORK/NAME's run, from its last checkpoint's record of the flags."""
    with open(os.path.join(here, "run", "train_config.json")) as f:
        return json.load(f)["max_steps"]


def combined(per_seed: list[list[dict]]) -> tuple[float, float]:
    """(mean gain, SE) over tasks, pretraining seeds and fine-tuning seeds: per_seed holds each pretraining seed's rows
    (report.gains: a task's paired gain and its SE over fine-tuning seeds). The SE is the larger of the pretraining
    seeds' spread (sd of their means / sqrt(seeds)) and the fine-tuning seeds' SE through the mean."""
    means = [sum(r["gain"] for r in rows) / len(rows) for rows in per_seed]
    within = math.sqrt(sum(r["se"] ** 2 for rows in per_seed for r in rows)) / (len(per_seed) * len(per_seed[0]))
    mean, between = mean_and_se(means)  # the pretraining seeds' spread
    return mean, max(within, between)


def table(results: list[dict]) -> str:
    lines = ["| candidate | steps | tokens/s | training s (each seed) | selection gain (per seed) | confirmation gain (per seed) |",
             "|---|---|---|---|---|---|"]
    for r in results:
        sel, con = r["selection"], r["confirmation"]
        lines.append(f"| {r['name']}: {r['what']} | {r['steps']:,} | {r.get('tokens_per_s', 0):,} | {' / '.join(f'{s:.0f}' for s in r['train_seconds'])} "
                     f"| **{sel['mean']:+.1f} ± {sel['se']:.1f}** ({' / '.join(f'{m:+.1f}' for m in sel['per_seed'])}) "
                     f"| {con['mean']:+.1f} ± {con['se']:.1f} ({' / '.join(f'{m:+.1f}' for m in con['per_seed'])}) |")
    return "\n".join(lines) + "\n"


def main(corpus: str | None = None, quick: bool = False, argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="experiments/race.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="race", help="work directory, shared by every candidate (default: %(default)s)")
    ap.add_argument("--budget", type=float, default=240.0, help="training seconds of each run (default: %(default)s)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="pretraining seeds (default: 1 2)")
    ap.add_argument("--only", nargs="+", default=None, metavar="NAME", help="these candidates (default: all)")
    ap.add_argument("--precision", default="fp32", help="train --precision (default: fp32, the arithmetic of a CPU without bf16)")
    ap.add_argument("--probes-only", action="store_true", help="only each candidate's probe: its steps and tokens a second "
                                                               "here (e.g. ModernBERT's network against BERT's at one width)")
    args = ap.parse_args([] if argv is None else argv)
    if quick:  # a smoke run: seconds of training, one fine-tuning seed
        args.budget, args.seeds = 5.0, args.seeds[:1]
    chosen = [c for c in CANDIDATES if args.only is None or c.name in args.only]
    unknown = set(args.only or ()) - {c.name for c in CANDIDATES}
    if unknown:
        raise SystemExit(f"experiments race: unknown candidate {', '.join(sorted(unknown))}; candidates: {', '.join(c.name for c in CANDIDATES)}")
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "log.txt")
    scratch: dict[tuple, str] = {}  # (model shape, corpus kind, tokenizer, family) -> the run whose scratch arm others share
    results = []
    if args.probes_only:
        rates = {}
        for candidate in chosen:
            r = candidate.recipe()
            rate = _train_rate(candidate, work, args.precision, log)
            pairs = os.path.join(recipe_trial.prepared(work, r.seq, r.corpus_mb, log, r.tokenizer, r.packing, r.corpus), "pairs")
            rates[candidate.name] = {"steps_per_s": round(rate, 3),
                                     "tokens_per_s": round(rate * r.batch_size * recipe_trial.mean_pair_tokens(pairs))}
            print(f"== {candidate.name}: {rates[candidate.name]}", flush=True)
        return {"probes": rates, "probe_steps": PROBE_STEPS, "precision": args.precision}
    for candidate in chosen:
        rate = _train_rate(candidate, work, args.precision, log)
        steps = max(10, int(round(args.budget * rate / 10)) * 10)
        print(f"== {candidate.name}: {rate:.2f} steps/s here, {steps} steps in {args.budget:g} s", flush=True)
        r = candidate.recipe()
        # a corpus kind or tokenizer learns its own vocabulary, a family has its own network: its scratch arm is its own
        shape = (r.model, r.corpus, r.tokenizer, r.family)
        # the first seed's own run is the better measure (its whole length, not a probe's): off by more than
        # TOLERANCE, that run is trained again with the steps its rate gives, and the other seeds train those
        first = os.path.join(work, f"{candidate.name}-s{args.seeds[0]}")
        base = [f"{candidate.name}-s{args.seeds[0]}", "--work", work, "--seed", str(args.seeds[0]), "--precision", args.precision]
        recipe_trial.main([*base, "--steps", str(steps), "--tasks", "none", *candidate.flags])
        trained = _read_steps(first)
        pairs = os.path.join(recipe_trial.prepared(work, r.seq, r.corpus_mb, log, r.tokenizer, r.packing, r.corpus), "pairs")
        corrected = max(10, int(round(args.budget * _run_rate(os.path.join(first, "run"), pairs, r.batch_size) / 10)) * 10)
        scored = os.path.exists(os.path.join(first, "recipe.json"))  # fine-tuned already: kept as it is, and said so
        if scored and corrected != trained:
            print(f"   {candidate.name}: kept as scored, at {trained / corrected:.2f}x the steps its own rate gives", flush=True)
        elif abs(corrected - trained) > TOLERANCE * trained:
            print(f"   {candidate.name}: its run trained {corrected / trained:.2f}x the steps it should: again with {corrected}", flush=True)
            subprocess.run(["rm", "-rf", first], check=True)
            recipe_trial.main([*base, "--steps", str(corrected), "--tasks", "none", *candidate.flags])
            trained = corrected
        steps = trained
        summaries = []
        for seed in args.seeds:
            name = f"{candidate.name}-s{seed}"
            shared = ["--scratch-from", scratch[shape]] if shape in scratch else []
            recipe_trial.main([name, "--work", work, "--seed", str(seed), "--steps", str(steps), "--precision", args.precision,
                         "--tasks", "all", "--seeds", "1" if quick else "3", *shared, *candidate.flags])
            scratch.setdefault(shape, name)
            with open(os.path.join(work, name, "recipe.json")) as f:
                summaries.append(json.load(f))
        sets = {}
        for label, members in (("selection", DEMO), ("confirmation", HELD_OUT)):
            per_seed = [[r for r in s["tasks"] if r["task"] in members] for s in summaries]
            mean, se = combined(per_seed)
            sets[label] = {"mean": round(mean, 2), "se": round(se, 2),
                           "per_seed": [round(sum(r["gain"] for r in rows) / len(rows), 2) for rows in per_seed],
                           "tasks": {t: [round(r["gain"], 2) for rows in per_seed for r in rows if r["task"] == t] for t in members}}
        steps = summaries[0]["steps"]  # what the runs trained (a run made before is reused as it is)
        results.append({"name": candidate.name, "what": candidate.what, "flags": list(candidate.flags), "steps": steps,
                        "steps_per_s": round(rate, 3), "tokens_per_s": round(rate * r.batch_size * recipe_trial.mean_pair_tokens(pairs)), "budget_steps": corrected, "train_seconds": [s.get("train_seconds") or 0.0 for s in summaries],
                        "valid_mlm_accuracy": [s.get("valid_mlm_accuracy") for s in summaries], **sets})
        print(table(results), end="", flush=True)
    winner = max(results, key=lambda r: r["selection"]["mean"])
    figures = {"budget_s": args.budget, "seeds": args.seeds, "precision": args.precision, "candidates": results,
               "winner": winner["name"], "winner_confirmation": winner["confirmation"]}
    with open(os.path.join(work, "race.json"), "w") as f:
        json.dump(figures, f, indent=2)
    return figures


if __name__ == "__main__":
    started = time.time()
    print(json.dumps({"study": "race", **main(argv=sys.argv[1:]), "wall_s": round(time.time() - started, 1)}))
