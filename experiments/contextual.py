"""Study: what a checkpoint's contextual vectors are worth as the notes use them: 1-NN word sense
disambiguation on WordNet's gloss examples, word similarity on SimLex-999 and WordSim-353, and anisotropy.

In:  the demo's directory (CLOZEFORGE_DEMO, default ./clozeforge-demo: its export hf/, its run/ with checkpoints, and
     a `clozeforge finetune run --checkpoints all` result under finetune-sweep/ if one was run); WordNet 3.0 from
     Debian's wordnet-base (/usr/share/wordnet); SimLex-999 and WordSim-353 as the gensim wheel ships them
     (gensim/test/test_data, the `bench` extra; their headers name the original releases). `corpus` is unused.
Out: the last JSON line: per model (the demo's export; a BertForMaskedLM made here with transformers from random
     weights and saved with save_pretrained, with the demo's tokenizer, to show the commands take any BERT) and
     standardisation (none, zscore fitted on the training texts): 1-NN accuracy ± SE, the scratch model of the same
     shape, MFS (training counts), WordNet's first sense, random; the sweep over the run's checkpoints
     (experiments/senses_sweep.png); Spearman per layer raw and z-scored and the anisotropy figures
     (experiments/similarity_*.png). `quick`: six lemmas and 60 pairs, nothing copied into experiments/.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

from downstream.contextual import wordnet
from downstream.contextual.senses_command import senses_main
from downstream.contextual.similarity import similarity_main

HERE = os.path.dirname(os.path.abspath(__file__))
QUICK_LEMMAS = {"bank.n", "plant.n", "state.n", "line.n", "run.v", "light.a"}
PAIR_SETS = {"simlex999": "simlex999.txt", "wordsim353": "wordsim353.tsv"}


def transformers_bert(directory: str, tokenizer_from: str) -> str:
    """A BertForMaskedLM made and saved by transformers alone (random weights, seed 1), with a given tokenizer."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_from)
    torch.manual_seed(1)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=256, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=1024, max_position_embeddings=128)
    transformers.BertForMaskedLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def pair_table(name: str, directory: str, limit: int | None) -> str:
    """gensim's copy of a word-pair set as word1/word2/score TSV (its '#' header lines left out)."""
    spec = importlib.util.find_spec("gensim")
    if spec is None:
        raise LookupError("gensim is not installed (pip install -e '.[bench]'): it ships SimLex-999 and WordSim-353")
    source = os.path.join(spec.submodule_search_locations[0], "test", "test_data", PAIR_SETS[name])
    with open(source, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip() and not line.startswith("#")]
    path = os.path.join(directory, f"{name}.tsv")
    with open(path, "w", encoding="utf-8") as f:
        f.write("word1\tword2\tscore\n" + "".join("\t".join(r[:3]) + "\n" for r in rows[:limit]))
    return path


def first_sense(train: str, test: str) -> dict:
    """WordNet's first sense as a baseline: the lowest-numbered sense with training instances, on the scored test rows."""
    senses_of: dict[str, set[str]] = {}
    with open(train, encoding="utf-8") as f:
        for row in map(json.loads, f):
            senses_of.setdefault(row["lemma"], set()).add(row["sense"])
    hits = []
    with open(test, encoding="utf-8") as f:
        for row in map(json.loads, f):
            candidates = senses_of.get(row["lemma"], set())
            if len(candidates) > 1 and row["sense"] in candidates:
                hits.append(float(row["sense"] == min(candidates)))
    n = len(hits)
    mean = sum(hits) / n
    return {"instances": n, "accuracy": round(mean, 4), "se": round((mean * (1 - mean) / (n - 1)) ** 0.5, 4)}


def _scores(path: str) -> list[dict]:
    with open(os.path.join(path, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    keep = ("instances", "accuracy", "accuracy_se", "mfs", "mfs_se", "random", "gain_over_mfs", "gain_over_mfs_se")
    return [{"name": a["name"], "step": a["step"], **{k: a["score"][k] for k in keep}} for a in results["arms"]]


def _run(main, argv: list[str]) -> None:
    code = main(argv)
    if code != 0:
        raise RuntimeError(f"{main.__name__} {' '.join(argv)}: exit {code}")


def main(corpus: str | None, quick: bool) -> dict:
    demo = os.path.abspath(os.environ.get("CLOZEFORGE_DEMO", "clozeforge-demo"))
    if not os.path.exists(os.path.join(demo, "hf", "config.json")):
        raise SystemExit(f"experiments contextual: {demo}/hf: no export; run `clozeforge demo` first (or set CLOZEFORGE_DEMO)")
    out = os.path.join(HERE, "out", "contextual" + ("-quick" if quick else ""))
    os.makedirs(out, exist_ok=True)
    data = os.path.join(out, "wordnet")
    split = wordnet.write(data, only=QUICK_LEMMAS if quick else None)
    train, test, texts = (os.path.join(data, name) for name in ("train.jsonl", "test.jsonl", "texts.txt"))
    models = {"demo export": os.path.join(demo, "hf"),
              "transformers BertForMaskedLM": transformers_bert(os.path.join(out, "transformers-bert"), os.path.join(demo, "hf"))}
    figures: dict = {"wordnet": {k: v for k, v in split.items() if k != "files"},
                     "first_sense": first_sense(train, test), "wsd": {}, "similarity": {}}
    for name, model in models.items():
        for standardize in ("none", "zscore"):
            target = os.path.join(out, f"wsd-{name.split()[0]}-{standardize}")
            extra = ["--standardize", "zscore", "--reference", texts] if standardize == "zscore" else []
            _run(senses_main, ["evaluate", model, "--train", train, "--test", test, "--output", target, "--overwrite",
                               "--baseline", "scratch", "--skip-bad-rows", *extra])
            figures["wsd"][f"{name}, {standardize}"] = _scores(target)
    run = os.path.join(demo, "run")
    if os.path.isdir(os.path.join(run, "checkpoints")):
        gains = os.path.join(demo, "finetune-sweep", "man-sections", "results.json")
        target = os.path.join(out, "wsd-sweep")
        _run(senses_main, ["evaluate", run, "--checkpoints", "all", "--train", train, "--test", test, "--output", target,
                           "--overwrite", "--baseline", "scratch", "--skip-bad-rows",
                           *(["--finetune-results", gains] if os.path.exists(gains) else [])])
        figures["sweep"] = _scores(target)
        if os.path.exists(gains):
            with open(gains, encoding="utf-8") as f:
                figures["finetune_gain"] = [{"step": p["step"], **p["gain"]} for p in json.load(f)["checkpoints"]]
        if not quick:
            shutil.copy(os.path.join(target, "senses.png"), os.path.join(HERE, "senses_sweep.png"))
    for name, model in models.items():
        for pairs in PAIR_SETS:
            target = os.path.join(out, f"similarity-{name.split()[0]}-{pairs}")
            _run(similarity_main, [model, "--pairs", pair_table(pairs, out, 60 if quick else None), "--contexts", texts,
                                   "--output", target, "--overwrite", "--skip-bad-rows"])
            with open(os.path.join(target, "similarity.json"), encoding="utf-8") as f:
                report = json.load(f)
            figures["similarity"][f"{name}, {pairs}"] = {
                "pairs": {k: report["pairs"][k] for k in ("read", "kept", "dropped")},
                "layers": [{"layer": r["layer"], "spearman": r["spearman"], "spearman_se": r["spearman_se"],
                            "spearman_z": r["spearman_standardized"], "spearman_z_se": r["spearman_standardized_se"],
                            "cos_before": r["anisotropy"]["before"]["mean_cosine"],
                            "cos_after": r["anisotropy"]["after"]["mean_cosine"],
                            "top1": r["anisotropy"]["before"]["top1_share"], "top3": r["anisotropy"]["before"]["top3_share"],
                            "top10": r["anisotropy"]["before"]["top10_share"]} for r in report["layers"]]}
            if not quick and pairs == "simlex999":
                shutil.copy(os.path.join(target, "similarity.png"), os.path.join(HERE, f"similarity_{name.split()[0]}.png"))
    return figures
