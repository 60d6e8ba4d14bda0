"""`clozeforge similarity MODEL --pairs URL --contexts URL --output DIR`: word similarity and anisotropy, per layer.

In:  a model directory (any transformers encoder with a fast tokenizer); --pairs, a table of `word1`, `word2` and a
     human `score` (a SimLex-999 or WordSim-353 layout; read by finetune's reader, every row kept or dropped with a
     counted reason; a word the tokenizer reads as [UNK] only is one line naming file and line, or a counted drop
     with --skip-bad-rows); --contexts, texts whose words in context measure anisotropy.
Out, in DIR (written beside it, then swapped in): similarity.json, similarity.md, similarity.png, and the statistics
     (standardize.npz per layer: `--stats` of a later similarity run; standardize.pooled.npz over --layers: `--stats`
     of embed --pooling words and senses). Per hidden state (0: the embedding output, 1..L the layers, then the
     mean over --layers):
     - Spearman's rho between the cosine of each pair's vectors and the human scores, raw and standardised. A word's
       vector is the word read alone ([CLS] word [SEP]), the mean of its pieces;
     - anisotropy (Ethayarajh 2019): the mean cosine between the vectors of random word occurrences of different
       --contexts texts, before and after standardisation; and the share of that mean carried by the top 1, 3 and
       10 dimensions, a dimension's share being its mean contribution u_i v_i / (|u| |v|) to the cosine (Timkey &
       van Schijndel 2021).
     The statistics are fitted on the even-numbered texts of --contexts and the anisotropy is measured on the odd
     ones, so "after" is measured on words the statistics never saw (with --stats, on every text).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np

from downstream.contextual import instances, plots
from downstream.contextual.encoder import Encoder
from downstream.contextual.standardize import Moments, Stats, StatsError
from downstream.contextual.vectors import (
    STANDARDIZERS,
    LayersError,
    WordVectors,
    layer_indices,
)
from downstream.finetune.data import BadRow, DataError, Drop, read_split
from process.devices import DEVICES
from process.exits import fail
from process.outputs import OutputDirError, check_destination, staged_directory, written_by
from schemas import ContractError
from schemas.config import Config, add_flags, flag, from_flags
from schemas.tables import QUOTINGS, TableError, TableReading

OWNER = "clozeforge similarity"
TOP_DIMENSIONS = (1, 3, 10)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimilarityConfig(Config):
    model: str = flag(default="", hidden=True)
    pairs: str
    """Word pairs with human scores: a table with `word1`, `word2` and `score` columns."""
    contexts: str
    """Texts (a text file's lines, or a table's `text`) whose words in context measure anisotropy and fit the
    standardisation."""
    output: str = flag(metavar="DIR")
    """Directory to write (similarity.json/.md/.png, the statistics); replaced whole."""
    overwrite: bool = False
    """Replace an --output directory this command did not write."""
    layers: str = flag(doc_from=(WordVectors, "layers"))
    standardize: str = flag(default="zscore", choices=STANDARDIZERS[1:])
    """center or zscore (see embed --standardize); the report shows every figure before and after it."""
    stats: str | None = flag(default=None, metavar="FILE")
    """Per-layer statistics of an earlier similarity run (its standardize.npz) instead of fitting new ones."""
    samples: int = 2000
    """Random pairs of word occurrences the anisotropy is averaged over."""
    max_words: int = 20000
    """At most this many word occurrences of --contexts are kept to draw the pairs from (the statistics see all)."""
    seed: int = 0
    """The draw of the random pairs."""
    batch_size: int = 32
    """Texts per forward pass."""
    device: str = flag(default="auto", choices=DEVICES)
    """Where the model runs: auto takes a CUDA GPU when torch sees one."""
    skip_bad_rows: bool = False
    """Count a bad pair (a word the tokenizer reads as [UNK] only, a score that is no number, a malformed record)
    as a drop at its line instead of stopping."""
    quoting: str = flag(choices=QUOTINGS, doc_from=(TableReading, "quoting"))

    def __post_init__(self) -> None:
        for ok, message in ((self.samples >= 10, f"--samples must be >= 10, got {self.samples}"),
                            (self.max_words >= 2, f"--max-words must be >= 2, got {self.max_words}"),
                            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}")):
            if not ok:
                raise ValueError(message)
        layer_indices(self.layers, None)


class PairReader:
    """finetune's read_split asks a task for its columns and to make a row an example."""

    def required(self) -> list[tuple[str, str]]:
        return [("word1", "a `word1` column"), ("word2", "a `word2` column"), ("score", "a `score` column")]

    def read(self, row: dict, where: str) -> dict:
        words = [row["word1"], row["word2"]]
        if any(w is None or not str(w).strip() for w in words):
            raise Drop("empty_word")
        try:
            score = float(row["score"])
        except (TypeError, ValueError):
            raise BadRow("bad_score", f"score {row['score']!r} is not a number") from None
        if not np.isfinite(score):
            raise BadRow("bad_score", f"score {row['score']!r} is not a finite number")
        return {"word1": str(words[0]).strip(), "word2": str(words[1]).strip(), "score": score}


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rho (None where it is undefined: fewer than 3 pairs, or a constant side)."""
    from scipy.stats import spearmanr

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return round(float(spearmanr(a, b).statistic), 6)


def spearman_se(rho: float | None, n: int) -> float | None:
    """The standard error of Spearman's rho from n pairs: Fieller et al. (1957)'s variance 1.06 / (n - 3) of its
    Fisher z, carried back to rho's scale (d rho / d z = 1 - rho^2)."""
    if rho is None or n < 4:
        return None
    return round(float((1 - rho * rho) * np.sqrt(1.06 / (n - 3))), 6)


def cosines(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-wise cosine of (n, hidden) arrays."""
    return (u * v).sum(-1) / np.maximum(np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1), 1e-12)


def anisotropy(u: np.ndarray, v: np.ndarray) -> dict:
    """The mean cosine of the pairs (u_k, v_k), each dimension's mean contribution to it, and the share of the top
    ones (Timkey & van Schijndel 2021: CC(f_i) = E[u_i v_i / (|u| |v|)], summing to the mean cosine)."""
    norms = np.maximum(np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1), 1e-12)
    contributions = ((u * v) / norms[:, None]).mean(0)  # (hidden,)
    mean = float(contributions.sum())
    order = np.argsort(-contributions, kind="stable")
    out = {"mean_cosine": round(mean, 6), "top_dimensions": [int(i) for i in order[:3]]}
    for k in TOP_DIMENSIONS:
        out[f"top{k}_share"] = round(float(contributions[order[:k]].sum() / mean), 6) if abs(mean) > 1e-9 else None
    return out


def _word_vectors(encoder: Encoder, split, layers, skip_bad_rows: bool) -> dict[str, np.ndarray]:
    """{word: (layers, hidden)} of every word of the kept pairs, each read alone; a pair with a word the
    tokenizer knows only as [UNK] is refused (one line) or dropped (counted)."""
    words = sorted({e[k] for e in split.examples for k in ("word1", "word2")})
    vectors, misses = encoder.targets(words, [("span", 0, len(w)) for w in words], layers, per_layer=True)
    missing = {w: m for w, m in zip(words, misses) if m is not None}
    keep = []
    for example in split.examples:
        miss = next((missing[example[k]] for k in ("word1", "word2") if example[k] in missing), None)
        if miss is None:
            keep.append(example)
        else:
            instances.refuse_or_drop(split, example, miss.reason, miss.message, skip_bad_rows)
    split.examples = keep
    split.account.check(len(keep), split.url)
    return dict(zip(words, vectors))


def _contexts(encoder: Encoder, config: SimilarityConfig, layers, pooled_layers):
    """(per-layer Stats, pooled Stats, the measured occurrences (n, layers, hidden), their text numbers, the report of
    every record of --contexts)."""
    from schemas.tables import read_texts

    texts, _, account = read_texts(config.contexts, "utf-8")
    per_layer, pooled, measured, owners = Moments(), Moments(), [], []
    positions = [layers.index(i) for i in pooled_layers]
    for first in range(0, len(texts), 256):
        batch = encoder.words(texts[first : first + 256], layers, per_layer=True, batch_size=config.batch_size)
        for number, words in enumerate(batch, first):
            if config.stats is None and number % 2 == 0:
                per_layer.add(words.vectors)
                pooled.add(words.vectors[:, positions].mean(1))
            elif sum(map(len, measured)) < config.max_words:
                measured.append(words.vectors[: config.max_words - sum(map(len, measured))])
                owners += [number] * len(measured[-1])
    shape = {"model": encoder.model_dir, "num_layers": encoder.num_layers, "hidden_size": encoder.hidden_size,
             "reference": config.contexts}
    if config.stats:
        stats = Stats.load(config.stats)
        stats.check(f"--stats {config.stats}", num_layers=encoder.num_layers, hidden_size=encoder.hidden_size,
                    layers=layers, per_layer=True)
        pooled_stats = None
    else:
        stats = per_layer.stats(config.standardize, {**shape, "layers": list(layers), "per_layer": True})
        pooled_stats = pooled.stats(config.standardize, {**shape, "layers": list(pooled_layers), "per_layer": False})
    occurrences = np.concatenate(measured) if measured else np.zeros((0, len(layers), encoder.hidden_size), np.float32)
    if len(set(owners)) < 2:
        raise DataError(f"{config.contexts}: anisotropy needs words of at least 2 texts to pair; "
                        f"{len(texts)} text(s) read")
    account.check(len(texts), config.contexts)
    return stats, pooled_stats, occurrences, np.array(owners), account.report(len(texts))


def _draw(owners: np.ndarray, samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`samples` pairs of occurrence indices from different texts."""
    rng = np.random.default_rng(seed)
    a, b = np.empty(0, np.int64), np.empty(0, np.int64)
    while len(a) < samples:
        x, y = rng.integers(0, len(owners), (2, 2 * samples))
        ok = owners[x] != owners[y]
        a, b = np.concatenate([a, x[ok]]), np.concatenate([b, y[ok]])
    return a[:samples], b[:samples]


def measure(encoder: Encoder, config: SimilarityConfig) -> tuple[dict, Stats, Stats | None]:
    layers = tuple(range(encoder.num_layers + 1))
    pooled_layers, note = layer_indices(config.layers, encoder.num_layers)
    split = read_split(config.pairs, PairReader(), skip_bad_rows=config.skip_bad_rows, quoting=config.quoting)
    vectors = _word_vectors(encoder, split, layers, config.skip_bad_rows)
    stats, pooled_stats, occurrences, owners, account = _contexts(encoder, config, layers, pooled_layers)
    if note:  # once the inputs hold: an error stays the one line
        print(f"clozeforge similarity: note: {note}", file=sys.stderr)
    scores = np.array([e["score"] for e in split.examples])
    first, second = (np.stack([vectors[e[k]] for e in split.examples]) for k in ("word1", "word2"))  # (pairs, layers, hidden)
    a, b = _draw(owners, config.samples, config.seed)
    rows, z = [], lambda x: stats.apply(x)
    pooled = [layers.index(i) for i in pooled_layers]
    views = [(str(i), lambda x, i=i: x[:, i], lambda x, i=i: z(x)[:, i]) for i in layers]
    views.append((f"mean {config.layers}", lambda x: x[:, pooled].mean(1),
                  (lambda x: pooled_stats.apply(x[:, pooled].mean(1))) if pooled_stats else (lambda x: z(x)[:, pooled].mean(1))))
    for name, raw, standardized in views:
        rho, rho_z = (spearman(cosines(f(first), f(second)), scores) for f in (raw, standardized))
        rows.append({"layer": int(name) if name.isdigit() else name,
                     "spearman": rho, "spearman_se": spearman_se(rho, len(scores)),
                     "spearman_standardized": rho_z, "spearman_standardized_se": spearman_se(rho_z, len(scores)),
                     "anisotropy": {"before": anisotropy(raw(occurrences[a]), raw(occurrences[b])),
                                    "after": anisotropy(standardized(occurrences[a]), standardized(occurrences[b]))}})
    report = {"written_by": OWNER, "model": os.path.abspath(config.model), "standardize": config.standardize,
              "stats": os.path.abspath(config.stats) if config.stats else "fitted on the even-numbered --contexts texts",
              "pairs": split.report(), "contexts": {**account, "url": config.contexts,
                                                    "occurrences_measured": len(owners), "random_pairs": config.samples},
              "top_dimensions": list(TOP_DIMENSIONS), "layers": rows}
    return report, stats, pooled_stats


def table(report: dict) -> str:
    kind = report["standardize"]
    lines = [f"| layer | Spearman raw (± SE) | Spearman {kind} | mean random cosine raw | {kind} | top-1 share | top-3 share |",
             "|---|---|---|---|---|---|---|"]
    show = lambda c: "n/a" if c is None else f"{c:.3f}"
    for row in report["layers"]:
        before, after = row["anisotropy"]["before"], row["anisotropy"]["after"]
        cells = [f"{show(row[k])} ± {show(row[k + '_se'])}" for k in ("spearman", "spearman_standardized")]
        cells += [show(c) for c in (before["mean_cosine"], after["mean_cosine"], before["top1_share"], before["top3_share"])]
        lines.append(f"| {row['layer']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_foreign = written_by(OWNER, "similarity.json")
"""A directory is ours when its similarity.json says so."""


def run(config: SimilarityConfig) -> int:
    from process.devices import resolve_device

    check_destination(config.output, overwrite=config.overwrite, foreign=_foreign)
    encoder = Encoder(config.model, resolve_device(config.device))
    report, stats, pooled_stats = measure(encoder, config)
    with staged_directory(config.output, overwrite=config.overwrite, foreign=_foreign) as out:
        with open(os.path.join(out, "similarity.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        with open(os.path.join(out, "similarity.md"), "w", encoding="utf-8") as f:
            f.write(table(report))
        stats.save(os.path.join(out, "standardize.npz"))
        if pooled_stats is not None:
            pooled_stats.save(os.path.join(out, "standardize.pooled.npz"))
        plots.plot_layers(report, os.path.join(out, "similarity.png"),
                          f"{plots.short(config.model)}: {plots.short(config.pairs)}, random words of {plots.short(config.contexts)}")
    pairs = report["pairs"]
    print(f"{config.pairs}: {pairs['read']} read, {pairs['kept']} pairs" + (f", dropped {pairs['dropped']}" if pairs["dropped"] else ""))
    print(table(report), end="")
    print(f"wrote {config.output}/similarity.json, similarity.md, similarity.png")
    return 0


def similarity_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge similarity", description="Spearman of cosine against human word "
                                 "similarity scores, and the anisotropy of the vectors, per layer.")
    ap.add_argument("model", metavar="MODEL", help="an export (or any transformers encoder directory)")
    add_flags(ap, SimilarityConfig)
    return ap


def similarity_main(argv: list[str] | None = None) -> int:
    args = similarity_parser().parse_args(argv)
    try:
        return run(dataclasses.replace(from_flags(SimilarityConfig, args), model=args.model))
    except (TableError, ContractError, OutputDirError, StatsError, LayersError, FileNotFoundError) as e:
        return fail("similarity", str(e))
    except ValueError as e:
        return fail("similarity", str(e).splitlines()[0])
