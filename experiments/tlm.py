"""Translation language modelling against masked LM alone, at equal steps (issue 44): does TLM align languages?
Not a timing: a quality comparison, scored by translation retrieval on pairs neither model saw.

`python experiments/run.py tlm [--quick]` (or `python experiments/tlm.py --work DIR --steps N --seeds 1 2`, which keeps DIR):
1. Monolingual text: the prose of this machine's man pages (one document a page; downstream/finetune/builtin's roff
   reader), English (man1-8) and the translations under /usr/share/man/<lang>/, one prep input a language.
   `clozeforge prep --packing full-sentences --cased` (uncased normalisation would strip Japanese voicing marks).
2. Translation pairs: the gettext catalogs under /usr/share/locale/<lang>/LC_MESSAGES, split by package (text
   domain): a seeded quarter of the domains is held out, the rest `prep --parallel --packing tlm --vocab` the
   monolingual run's vocabulary. A held-out pair that shares a side with any training pair (catalogs repeat
   "Cancel") is left out, so retrieval never meets a pair TLM trained on.
3. For each pretraining seed: `train --family xlm` (language embeddings, tiny) for STEPS on the monolingual rows alone
   (MLM), and for the same STEPS on a 1:1 --mix of the monolingual rows and the TLM rows (XLM's MLM + TLM).
4. `clozeforge retrieve` on each language's held-out pairs (en → xx, at most 1,000 drawn by seed 0): accuracy@1
   both directions, middle layer mean-pooled; TLM minus MLM per direction, paired over pairs (their hits per pair),
   with its SE; the mean over seeds.
5. With --transfer CODE: zero-shot transfer, `clozeforge finetune EXPORT --task man-sections --test-language CODE
   --baseline scratch` on each export (trained on English sections, tested on CODE's pages). CODE's man pages are then
   left out of the monolingual corpus (the test pages must not be pretraining text): CODE is seen only through its
   catalogs' translation pairs, and the MLM arm not at all beyond its language embedding.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
    sys.path[0] = ROOT  # run as a file: the repository root, so that the product's packages import

import pyarrow.parquet as pq  # noqa: E402

from downstream.finetune.builtin.man_sections import paragraphs  # noqa: E402
from downstream.stats import paired_difference  # noqa: E402
from experiments._stages import clozeforge  # noqa: E402

LANGUAGES = ("de", "fr", "ja", "ru", "zh_CN")
"""The languages beside English: man page translations and catalogs both exist for each; ja and zh_CN are CJK."""
HELD_OUT_SHARE = 4
"""One text domain in HELD_OUT_SHARE is held out (by a hash of its name), the same in every language."""


def _cli(*args: str, log: str) -> None:
    clozeforge(*args, log=log, study="tlm")


def man_corpus(directory: str, pages: int, leave_out: str | None = None) -> dict[str, int]:
    """DIR/<lang>.jsonl: the prose of up to `pages` man pages a section, one document a page (none of `leave_out`'s)."""
    counts = {}
    for language in ("en", *(c for c in LANGUAGES if c != leave_out)):
        root = "/usr/share/man" if language == "en" else f"/usr/share/man/{language}"
        docs = []
        for section in "12345678":
            for path in sorted(glob.glob(f"{root}/man{section}/*.gz"))[:pages]:
                try:
                    with gzip.open(path, "rt", encoding="utf-8") as f:
                        text = "\n".join(paragraphs(f.read(), min_words=3))
                except (OSError, UnicodeDecodeError, EOFError):
                    continue  # a page in a legacy encoding or damaged: not this corpus's
                if text:
                    docs.append(text)
        with open(os.path.join(directory, f"{language}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs)
        counts[language] = len(docs)
    return counts


def held_out(domain: str) -> bool:
    return int(hashlib.sha256(domain.encode()).hexdigest(), 16) % HELD_OUT_SHARE == 0


def split_catalogs(directory: str, domains_cap: int | None) -> dict[str, list[str]]:
    """DIR/{train,held}/<lang>/LC_MESSAGES/*.mo: copies of the catalogs, by domain; the held-out domains' names."""
    held_names: dict[str, list[str]] = {}
    for language in LANGUAGES:
        paths = sorted(glob.glob(f"/usr/share/locale/{language}/LC_MESSAGES/*.mo"))[:domains_cap]
        for path in paths:
            domain = os.path.basename(path)
            side = "held" if held_out(domain) else "train"
            target = os.path.join(directory, side, language, "LC_MESSAGES")
            os.makedirs(target, exist_ok=True)
            shutil.copyfile(path, os.path.join(target, domain))
            if side == "held":
                held_names.setdefault(language, []).append(domain)
    return held_names


def _pairs(prep_dir: str) -> list[dict]:
    return [row for path in sorted(glob.glob(os.path.join(prep_dir, "parallel", "*.parquet")))
            for row in pq.read_table(path).to_pylist()]


def held_out_tsvs(train_prep: str, held_prep: str, directory: str) -> dict[str, dict[str, int]]:
    """DIR/en-<lang>.tsv: the held-out pairs of each direction that share no side with a training pair."""
    seen_source = {p["source"] for p in _pairs(train_prep)}
    seen_target = {p["target"] for p in _pairs(train_prep)}
    kept: dict[str, list[tuple[str, str]]] = {}
    counts: dict[str, dict[str, int]] = {}
    for pair in _pairs(held_prep):
        direction = f"{pair['source_language']}-{pair['target_language']}"
        tally = counts.setdefault(direction, {"held_out": 0, "seen_in_training": 0, "kept": 0})
        tally["held_out"] += 1
        if pair["source"] in seen_source or pair["target"] in seen_target:
            tally["seen_in_training"] += 1
            continue
        tally["kept"] += 1
        kept.setdefault(direction, []).append((pair["source"], pair["target"]))
    for direction, pairs in kept.items():
        with open(os.path.join(directory, f"{direction}.tsv"), "w", encoding="utf-8") as f:
            f.writelines(f"{s}\t{t}\n" for s, t in pairs)
    return counts


VARIANTS = {"plain": (), "centered": ("--center",), "scratch": ("--scratch", "0"), "scratch_centered": ("--scratch", "0", "--center")}
"""How each export is scored: as `retrieve` does by default, with each side's mean subtracted (--center), and its
architecture with random weights (--scratch: the lexical floor a trained model should clear), both ways."""


def retrieval(hf: str, tsv_dir: str, out: str, max_pairs: int, log: str, variants: tuple[str, ...]) -> dict[str, dict]:
    scores: dict[str, dict] = {}
    for variant in variants:
        for tsv in sorted(glob.glob(os.path.join(tsv_dir, "*.tsv"))):
            direction = os.path.basename(tsv)[:-4]
            result = f"{out}-{variant}-{direction}.json"
            if not os.path.exists(result):
                _cli("retrieve", hf, "--pairs", tsv, "--languages", direction, "--max-pairs", str(max_pairs), *VARIANTS[variant],
                     "--output", result, log=log)
            with open(result) as f:
                scores.setdefault(variant, {})[direction] = json.load(f)
    return scores


def _row(result: dict, direction: str) -> dict:
    return result["language_pairs"][direction]


def _hits(result: dict, direction: str) -> tuple[list[int], list[int]]:
    """The per-pair hits (source → target, target → source) of one direction's retrieve result."""
    row = _row(result, direction)
    return [int(c) for c in row["hits_source_to_target"]], [int(c) for c in row["hits_target_to_source"]]


def paired(a: list[int], b: list[int]) -> tuple[float, float]:
    """(mean of b - a in points, its SE over pairs)."""
    mean, se = paired_difference(b, a)
    return 100.0 * mean, 100.0 * se


def transfer(hf: str, language: str, out: str, seeds: int, log: str) -> dict:
    """The man-sections zero-shot transfer of one export against scratch: results.json's test scores and gain."""
    if not os.path.exists(os.path.join(out, "results.json")):
        _cli("finetune", hf, "--task", "man-sections", "--test-language", language, "--baseline", "scratch", "--seeds",
             str(seeds), "--output", out, log=log)
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    arm = lambda r: {"lr": r["lr"], "mean": round(r["mean"], 1), "se": round(r["se"], 1), "scores": r["scores"]}  # noqa: E731
    gain = results["gain"]
    return {"pretrained": arm(results["pretrained"]), "scratch": arm(results["baseline"]),
            "gain": round(gain["mean"], 1), "se": round(gain["se"], 1), "bootstrap": gain["bootstrap"]}


def run(work: str, steps: int, seeds: list[int], pages: int, domains_cap: int | None, max_pairs: int, vocab_size: int,
        batch_size: int, transfer_to: str | None = None, transfer_seeds: int = 3) -> dict:
    log = os.path.join(work, "log.txt")
    corpus = os.path.join(work, "corpus")
    if not os.path.isdir(os.path.join(work, "mono")):
        os.makedirs(corpus, exist_ok=True)
        documents = man_corpus(corpus, pages, leave_out=transfer_to)
        held_names = split_catalogs(os.path.join(work, "catalogs"), domains_cap)
        inputs = [a for language in documents for a in ("--input", f"{language}={corpus}/{language}.jsonl")]
        common = ("--progress", "never", "--validation-fraction", "0.05")
        _cli("prep", *inputs, "--output", os.path.join(work, "mono"), "--packing", "full-sentences", "--cased",
             "--vocab-size", str(vocab_size), "--max-seq-len", "128", *common, log=log)
        vocab = os.path.join(work, "mono", "vocab")
        _cli("prep", "--parallel", os.path.join(work, "catalogs", "train", "*", "LC_MESSAGES", "*.mo"), "--packing", "tlm",
             "--vocab", vocab, "--max-seq-len", "128", "--output", os.path.join(work, "tlm"), *common, log=log)
        _cli("prep", "--parallel", os.path.join(work, "catalogs", "held", "*", "LC_MESSAGES", "*.mo"), "--packing", "tlm",
             "--vocab", vocab, "--max-seq-len", "128", "--output", os.path.join(work, "held"), *common, log=log)
        os.makedirs(os.path.join(work, "held-tsv"), exist_ok=True)
        heldout = held_out_tsvs(os.path.join(work, "tlm"), os.path.join(work, "held"), os.path.join(work, "held-tsv"))
        with open(os.path.join(work, "data.json"), "w") as f:
            json.dump({"documents": documents, "held_out_domains": held_names, "held_out_pairs": heldout}, f, indent=1)
    with open(os.path.join(work, "data.json")) as f:
        data = json.load(f)
    mono, tlm = os.path.join(work, "mono", "pairs"), os.path.join(work, "tlm", "pairs")
    arms = {"mlm": (), "mlm+tlm": ("--mix", f"mono={mono},weight=1", "--mix", f"tlm={tlm},weight=1")}
    results: dict[str, dict[int, dict]] = {}
    transfers: dict[str, dict[int, dict]] = {}
    for seed in seeds:
        for arm, mix in arms.items():
            run_dir, hf = os.path.join(work, f"{arm}-{seed}"), os.path.join(work, f"{arm}-{seed}-hf")
            if not os.path.isdir(hf):
                _cli("train", "--data", mono, *mix, "--family", "xlm", "--model", "tiny", "--output", run_dir, "--seed", str(seed),
                     "--batch-size", str(batch_size), "--max-steps", str(steps), "--lr", "1e-3", "--warmup-steps", str(steps // 10),
                     "--zero-stage", "0", "--log-every", str(max(1, steps // 10)), "--save-every", str(steps), log=log)
                _cli("export", run_dir, "--output", hf, "--verify", log=log)
            variants = ("plain", "centered", *(("scratch", "scratch_centered") if arm == "mlm" and seed == seeds[0] else ()))
            results.setdefault(arm, {})[seed] = retrieval(hf, os.path.join(work, "held-tsv"), os.path.join(work, f"retrieve-{arm}-{seed}"),
                                                          max_pairs, log, variants)
            if transfer_to:
                transfers.setdefault(arm, {})[seed] = transfer(hf, transfer_to, os.path.join(work, f"transfer-{arm}-{seed}"),
                                                               transfer_seeds, log)
    sides = ("source_to_target", "target_to_source")
    table: dict[str, dict] = {}
    for variant in ("plain", "centered"):
        for direction in sorted(results["mlm"][seeds[0]][variant]):
            row = {"n": _row(results["mlm"][seeds[0]][variant][direction], direction)["n"]}
            for arm in arms:  # accuracy %, per seed: [src→tgt, tgt→src, ...]
                row[arm] = [round(100 * _row(results[arm][s][variant][direction], direction)[k]["accuracy"], 1) for s in seeds for k in sides]
            floor = results["mlm"][seeds[0]].get("scratch" if variant == "plain" else "scratch_centered", {}).get(direction)
            if floor:
                row["random_weights"] = [round(100 * _row(floor, direction)[k]["accuracy"], 1) for k in sides]
            gains = []
            for s in seeds:
                pairs = zip(_hits(results["mlm"][s][variant][direction], direction), _hits(results["mlm+tlm"][s][variant][direction], direction))
                for k, (a, b) in zip(sides, pairs):
                    mean, se = paired(a, b)
                    gains.append({"seed": s, "direction": k, "gain": round(mean, 1), "se": round(se, 1)})
            row["tlm_minus_mlm"] = gains
            row["mean_gain"] = round(sum(g["gain"] for g in gains) / len(gains), 1)
            table.setdefault(variant, {})[direction] = row
    return {"steps": steps, "seeds": seeds, "batch_size": batch_size, "data": data, "retrieval": table,
            **({"transfer": {"language": transfer_to, "man_pages_left_out": True, "runs": transfers}} if transfer_to else {})}


def main(corpus: str | None = None, quick: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as work:
        if quick:
            return run(work, steps=20, seeds=[1], pages=3, domains_cap=8, max_pairs=100, vocab_size=2000, batch_size=8)
        return run(work, steps=2000, seeds=[1, 2], pages=60, domains_cap=None, max_pairs=1000, vocab_size=16000, batch_size=32)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="working directory, kept (reruns reuse its data and finished runs)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--pages", type=int, default=60, help="man pages a section a language")
    ap.add_argument("--domains", type=int, default=None, help="at most this many catalogs a language (default: all)")
    ap.add_argument("--max-pairs", type=int, default=1000)
    ap.add_argument("--vocab-size", type=int, default=16000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--transfer", default=None, metavar="CODE", help="also score man-sections zero-shot in CODE (its man "
                    "pages then leave the monolingual corpus)")
    ap.add_argument("--transfer-seeds", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    print(json.dumps(run(args.work, args.steps, args.seeds, args.pages, args.domains, args.max_pairs, args.vocab_size,
                         args.batch_size, args.transfer, args.transfer_seeds)))
