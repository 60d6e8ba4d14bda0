"""`clozeforge retrieve MODEL --pairs DIR|TSV [--languages en-de,en-ja] [--layer middle] [--output results.json]`:
translation retrieval, Tatoeba-style (Artetxe & Schwenk 2019; XTREME, Hu et al. 2020), per language pair.

In:  a model directory (any transformers encoder with a fast tokenizer: a clozeforge export of BERT, RoBERTa, XLM-R,
     ELECTRA or XLM); held-out translation pairs (retrieval.py: a `prep --parallel` output, or a TSV with
     --languages SRC-TGT).
Out: per language pair, the share of source sentences whose nearest neighbour (cosine) among all the pair's target
     sentences is their own translation, and the same from the target side, each with its binomial standard error
     over pairs (a query whose translation the model reads as the same tokens as another candidate is a miss:
     retrieval.py); a table on stdout, and with --output a JSON file: per pair the counts read, dropped (retrieval.py's
     per-side dedupe) and scored, both accuracies with their hits per pair (a later comparison of two models on the
     same sample stays paired), the sample's digest, the layer and the model. --scratch SEED scores the architecture
     with random weights instead (the floor that tokens shared across languages reach untrained); --against an
     earlier report adds each language pair's difference from it, in points with the paired SE over pairs.

A sentence's vector is the mean over its real tokens of one hidden state, by default the middle layer, ⌈L/2⌉ of L
(6 of 12): the issue asks for mean-pooled middle-layer vectors as XLM-R's paper reports them, and XTREME's Tatoeba
task pools an intermediate layer the same way (a masked LM's last layers serve its token predictions). An XLM export
with language embeddings (config `use_lang_emb`, `n_langs` > 1) gets each side's language id from its `lang2id` at
every token, as XLM reads monolingual text; a language the model lacks is embedded without (one note). At most
--max-pairs pairs per language pair are scored (Tatoeba's 1000), drawn with --seed: accuracy falls as the
candidates grow, so only figures of equal n compare.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys

import numpy as np

from downstream.contextual import retrieval
from downstream.contextual.retrieval import PairsError
from process.devices import DEVICES
from process.exits import fail
from process.outputs import write_json
from schemas import ContractError
from schemas.config import Config, add_flags, flag, from_flags

OWNER = "clozeforge retrieve"
_PAIR_RE = re.compile(r"^([A-Za-z]{2,3}(?:[_@][A-Za-z0-9]+)?)-([A-Za-z]{2,3}(?:[_@][A-Za-z0-9]+)?)$")
"""SRC-TGT as prep --parallel writes a direction: `en-de`, `en-zh_CN`, `en-sr@latin`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetrievalConfig(Config):
    """Translation retrieval"""

    model: str = flag(default="", hidden=True)
    pairs: str = flag(metavar="DIR|TSV")
    """Held-out translation pairs: a `clozeforge prep --parallel` output directory (or its parallel/), or a TSV of
    source<TAB>target lines with --languages SRC-TGT."""
    languages: str | None = flag(default=None, metavar="SRC-TGT[,...]")
    """The language pairs to score (default: every one the directory holds); a TSV's own pair."""
    layer: str = flag(default="middle", metavar="middle|last|N")
    """The hidden state that is mean-pooled: middle (layer ⌈L/2⌉), last, or N (0: the embedding output, 1..L)."""
    max_pairs: int = 1000
    """At most this many pairs per language pair, drawn with --seed (Tatoeba scores 1000 per language)."""
    seed: int = 0
    """The draw of --max-pairs."""
    scratch: int | None = flag(default=None, metavar="SEED")
    """Score the model's architecture with random weights from this seed instead, on the same sample: the baseline
    that tokens shared across the languages (numbers, names, punctuation) reach with no training."""
    against: str | None = flag(default=None, metavar="FILE")
    """An earlier retrieve's JSON (another model, or --scratch) on the same pairs and seed: each language pair's
    difference from it, in points with the paired SE over pairs."""
    center: bool = False
    """Subtract each side's mean vector (over its sampled sentences) before the cosine: removes what every sentence of
    one language shares (its language embedding, the common direction of anisotropic vectors), which otherwise
    dominates a small model's similarities (Libovický et al. 2020, language-neutral representations)."""
    langs: bool = flag(default=True, name="--no-langs")
    """Give an XLM export each side's language id (its lang2id) as `langs`; --no-langs embeds both sides without."""
    output: str | None = flag(default=None, metavar="FILE")
    """Write the results as JSON here (replaced whole)."""
    batch_size: int = 32
    """Texts per forward pass."""
    device: str = flag(default="auto", choices=DEVICES)
    """Where the model runs: auto takes a CUDA GPU when torch sees one."""

    def __post_init__(self) -> None:
        if self.max_pairs < 2:
            raise ValueError(f"--max-pairs must be >= 2, got {self.max_pairs}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        self.language_pairs()
        layer_of(self.layer, None)

    def language_pairs(self) -> tuple[tuple[str, str], ...]:
        found = []
        for part in filter(None, (p.strip() for p in (self.languages or "").split(","))):
            match = _PAIR_RE.match(part)
            if not match:
                raise ValueError(f"--languages {self.languages}: {part!r} is not SRC-TGT (en-de, en-zh_CN)")
            found.append((match[1], match[2]))
        if len(set(found)) != len(found):
            raise ValueError(f"--languages {self.languages}: a language pair named twice")
        return tuple(found)


def layer_of(spec: str, num_layers: int | None) -> int:
    """The index into hidden_states that --layer names; with num_layers None only the syntax is checked."""
    text = spec.strip().lower()
    if text in ("middle", "last"):
        return 0 if num_layers is None else ((num_layers + 1) // 2 if text == "middle" else num_layers)
    if not text.isdigit():
        raise ValueError(f"--layer {spec}: expected middle, last or a layer number")
    if num_layers is not None and int(text) > num_layers:
        raise ValueError(f"--layer {spec}: no layer {int(text)} (0 is the embedding output, 1..{num_layers} the layers)")
    return int(text)


def _grouped(encoder, texts: list[str]) -> tuple[list[str], np.ndarray]:
    """(the first text of each group of texts the model reads as the same token ids, cut at its length; each text's
    group): each group is embedded once, so texts the model cannot tell apart have one and the same vector."""
    numbers: dict[tuple, int] = {}
    firsts, group = [], []
    for text, ids in zip(texts, encoder.tokenizer(texts, truncation=True, max_length=encoder.max_length)["input_ids"]):
        if tuple(ids) not in numbers:
            numbers[tuple(ids)] = len(firsts)
            firsts.append(text)
        group.append(numbers[tuple(ids)])
    return firsts, np.array(group, dtype=np.int64)


def _side(encoder, texts: list[str], layer: int, language_id: int | None, batch_size: int):
    """(vectors per group, each text's group, how many texts share their group with another)."""
    firsts, group = _grouped(encoder, texts)
    shared = int((np.bincount(group)[group] > 1).sum())
    return encoder.sentences(firsts, layer, language_id=language_id, batch_size=batch_size), group, shared


def measure(encoder, config: RetrievalConfig, groups: dict, say) -> dict:
    layer = layer_of(config.layer, encoder.num_layers)
    ids = {}
    for code in sorted({c for key in groups for c in key}):
        ids[code], note = encoder.language_id(code) if config.langs else (None, "")
        if note:
            say(note)
    rows = {}
    for (source_language, target_language), group in groups.items():
        pairs = group["sample"]
        sources, targets = [p.source for p in pairs], [p.target for p in pairs]
        (s, s_group, s_shared), (t, t_group, t_shared) = (
            _side(encoder, texts, layer, ids[language], config.batch_size)
            for texts, language in ((sources, source_language), (targets, target_language)))
        if config.center:
            s, t = s - s.mean(axis=0), t - t.mean(axis=0)
        score = retrieval.retrieval_accuracy(s, t, s_group, t_group)
        digest = hashlib.sha256("\n".join(f"{p.path}\t{p.line}\t{p.source}\t{p.target}" for p in pairs).encode()).hexdigest()
        rows[f"{source_language}-{target_language}"] = {
            "source_language": source_language, "target_language": target_language, "read": group["read"],
            "dropped": group["dropped"], "distinct": group["distinct"], "n": len(pairs), "sample_sha256": digest,
            "language_ids": {source_language: ids[source_language], target_language: ids[target_language]},
            "indistinct": {"source": s_shared, "target": t_shared}, **score}
    return {"written_by": OWNER, "model": os.path.abspath(config.model), "pairs": os.path.abspath(config.pairs),
            "weights": "trained" if config.scratch is None else f"scratch (random, seed {config.scratch})",
            "layer": layer, "layer_flag": config.layer, "centered": config.center, "langs": config.langs, "num_layers": encoder.num_layers,
            "pooling": "mean of the hidden state over the attention mask's tokens", "max_pairs": config.max_pairs,
            "seed": config.seed, "language_pairs": rows}


DIRECTIONS = (("source_to_target", "src→tgt"), ("target_to_source", "tgt→src"))


def read_against(path: str) -> dict:
    """An earlier report of this command (JSON: data, never code)."""
    try:
        with open(path, encoding="utf-8") as f:
            other = json.load(f)
    except OSError as e:
        raise PairsError(f"--against {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise PairsError(f"--against {path}: not JSON ({e})") from None
    if not isinstance(other, dict) or other.get("written_by") != OWNER:
        raise PairsError(f"--against {path}: not a JSON file written by {OWNER}")
    return other


def compare(report: dict, other: dict, path: str, say) -> None:
    """Each language pair's paired difference from the --against report `other` (the same sample, by its digest)."""
    for name, row in report["language_pairs"].items():
        theirs = other.get("language_pairs", {}).get(name)
        if theirs is None or theirs.get("sample_sha256") != row["sample_sha256"]:
            say(f"--against {path}: {name} was not scored on the same sample there (other pairs, seed or --max-pairs): "
                "no difference for it")
            continue
        row["against"] = {"model": other.get("model"), "weights": other.get("weights"), **{
            key: retrieval.paired_difference(row[f"hits_{key}"], theirs[f"hits_{key}"]) for key, _ in DIRECTIONS}}


def table(report: dict) -> str:
    lines = [f"layer {report['layer']} of {report['num_layers']}, mean-pooled, {report['weights']} weights; accuracy@1 in % ± SE over pairs",
             "| pair | n | src→tgt | tgt→src | mean | read | same_source | same_target |", "|---|---|---|---|---|---|---|---|"]
    show = lambda d: f"{100 * d['accuracy']:.1f} ± {100 * d['se']:.1f}"
    for name, row in report["language_pairs"].items():
        lines.append(f"| {name} | {row['n']} | {show(row['source_to_target'])} | {show(row['target_to_source'])} | "
                     f"{100 * row['mean']:.1f} | {row['read']} | {row['dropped']['same_source']} | {row['dropped']['same_target']} |")
    against = [(name, row["against"]) for name, row in report["language_pairs"].items() if "against" in row]
    if against:
        lines.append(f"against {against[0][1]['model']} ({against[0][1]['weights']}): points, paired SE over pairs")
        lines += [f"  {name}: " + ", ".join(f"{label} {d[key]['points']:+.1f} ± {d[key]['se']:.1f}" for key, label in DIRECTIONS)
                  for name, d in against]
    return "\n".join(lines) + "\n"


def groups_of(config: RetrievalConfig) -> tuple[dict, int]:
    """{(src, tgt): {"read", "dropped", "distinct", "sample"}} and the TSV's blank lines: everything the model is not
    needed for, so bad input fails before a model loads."""
    grouped, blank = retrieval.read_pairs(config.pairs, config.language_pairs())
    if not grouped:
        raise PairsError(f"--pairs {config.pairs}: no translation pairs")
    out = {}
    for key, pairs in grouped.items():
        distinct, dropped = retrieval.distinct_pairs(pairs)
        if len(distinct) < 2:
            raise PairsError(f"{key[0]}-{key[1]}: {len(distinct)} distinct pair(s) in {config.pairs} (read {len(pairs)}, "
                             f"dropped {dropped}): retrieval needs at least 2")
        out[key] = {"read": len(pairs), "dropped": dropped, "distinct": len(distinct),
                    "sample": retrieval.sample(distinct, config.max_pairs, config.seed, key)}
    return out, blank


def run(config: RetrievalConfig) -> int:
    from downstream.contextual.encoder import Encoder
    from process.devices import resolve_device

    if config.output and os.path.isdir(config.output):
        raise PairsError(f"--output {config.output}: a directory (name the JSON file to write)")
    if config.output and os.path.exists(config.pairs) and os.path.realpath(config.output) == os.path.realpath(config.pairs):
        raise PairsError(f"--output {config.output}: that is --pairs (this command never writes what it reads)")
    if config.against and config.output and os.path.realpath(config.against) == os.path.realpath(config.output):
        raise PairsError(f"--against {config.against}: that is --output (this command never reads what it writes)")
    groups, blank = groups_of(config)
    other = read_against(config.against) if config.against else None
    encoder = Encoder(config.model, resolve_device(config.device), scratch_seed=config.scratch)
    layer_of(config.layer, encoder.num_layers)  # before any note: an error stays the one line
    say = lambda line: print(f"{OWNER}: note: {line}", file=sys.stderr)
    if blank:
        say(f"{config.pairs}: {blank} blank line(s) skipped")
    report = measure(encoder, config, groups, say)
    report["blank_lines"] = blank
    if other is not None:
        compare(report, other, config.against, say)
    for name, row in report["language_pairs"].items():
        if row["indistinct"]["source"] or row["indistinct"]["target"]:
            say(f"{name}: {row['indistinct']['source']} source and {row['indistinct']['target']} target texts read as "
                "the same tokens as another of their side: a query whose translation is one of them is a miss")
    if config.output:
        try:
            write_json(report, config.output)
        except OSError as e:
            raise PairsError(f"--output {config.output}: {e.strerror or e}") from None
    print(table(report), end="")
    if config.output:
        print(f"wrote {config.output}")
    return 0


def retrieve_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge retrieve", description="Translation retrieval (Tatoeba-style): the "
                                 "share of held-out pairs whose nearest neighbour in the other language is their translation.")
    ap.add_argument("model", metavar="MODEL", help="an export (or any transformers encoder directory)")
    add_flags(ap, RetrievalConfig)
    return ap


def retrieve_main(argv: list[str] | None = None) -> int:
    args = retrieve_parser().parse_args(argv)
    try:
        config = dataclasses.replace(from_flags(RetrievalConfig, args), model=args.model)
        if not os.path.isdir(config.model):
            raise PairsError(f"{config.model}: no such model directory")
        return run(config)
    except (PairsError, ContractError, FileNotFoundError) as e:
        return fail("retrieve", str(e))
    except (ValueError, OSError) as e:
        return fail("retrieve", str(e).splitlines()[0])
