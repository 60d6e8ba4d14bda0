"""Translation retrieval (Tatoeba-style): held-out translation pairs read, deduplicated and sampled per language
pair, and the share of each side whose nearest neighbour in the other language is its own translation (no model).

In:  pairs: a `clozeforge prep --parallel` output (DIR, or DIR/parallel: Parquet shards of schemas/parallel.py), or
     a plain TSV of `source<TAB>target` lines whose languages the caller names; then, per language pair, the two
     sides' sentence vectors (retrieve_command.py makes them).
Out: `read_pairs` → {(source language, target language): [Pair, ...]} in a fixed order (path, line, texts: not the
     shards' seeded order, so the same pairs give the same sample however prep sharded them) and the TSV's count of
     blank lines; `distinct_pairs` → the pairs left when each source and each target text occurs once, and the count
     of each kind dropped; `sample` → a seeded subset of at most N pairs, in order; `retrieval_accuracy` → hits and
     accuracy@1 with the binomial standard error, in both directions.

Why dedupe per side: a source text read twice (catalogs repeat "Cancel" in every package, translated alike or not)
makes "its translation" two candidates, and retrieving from either target finds two copies of the same text, one
of them "wrong"; the score would depend on which copy argmax meets first. So, walking the pairs in the order above,
a pair whose source (whitespace-collapsed, exact) was kept already is `same_source`, then of the rest one whose
target was kept already is `same_target`: what is left maps sources to targets one to one. The key is the text, not
the model's token ids, so every model scores the same pairs (a comparison of two exports stays paired). Texts that
differ only in what a tokenizer erases (case, accents for an uncased vocabulary; every CJK character of an English
WordPiece vocabulary, which is `[UNK]`) stay distinct pairs, but the model reads them as one: `retrieval_accuracy`
takes them as a group with one vector, and a query whose translation is in a group of several is a miss (the model
cannot single it out; an argmax would credit whichever copy came first). The command counts such texts.
"""

from __future__ import annotations

import dataclasses
import os
import zlib

import numpy as np

from downstream import stats
from schemas import ContractError
from schemas.parallel import PARALLEL_FORMAT_VERSION, parallel_pair_schema

KIND_KEY, VERSION_KEY = b"clozeforge.schema", b"clozeforge.format_version"
DROP_REASONS = ("same_source", "same_target")


class PairsError(ValueError):
    """Pairs that cannot be scored: the message is one line naming the file, line or flag."""


@dataclasses.dataclass(frozen=True)
class Pair:
    source: str
    target: str
    path: str
    line: int


def _shards(path: str) -> list[str] | None:
    """The Parquet shards of a prep output (DIR or DIR/parallel), or None when `path` is no directory."""
    if not os.path.isdir(path):
        return None
    folder = os.path.join(path, "parallel") if os.path.isdir(os.path.join(path, "parallel")) else path
    found = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".parquet"))
    if not found:
        raise PairsError(f"--pairs {path}: no parallel/*.parquet shards (a `clozeforge prep --parallel` output, or a TSV)")
    return found


def _read_shard(path: str) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise PairsError(f"{path}: not a readable Parquet shard ({str(e).splitlines()[0]})") from None
    meta = table.schema.metadata or {}
    version = meta.get(VERSION_KEY, b"?").decode()
    if meta.get(KIND_KEY) != b"parallel_pairs" or version != str(PARALLEL_FORMAT_VERSION):
        raise ContractError(f"{path}: expected parallel_pairs version {PARALLEL_FORMAT_VERSION} (schemas/parallel.py), found "
                            f"{meta.get(KIND_KEY, b'no schema tag').decode()} version {version}")
    expected = parallel_pair_schema()
    if table.schema.remove_metadata() != expected.remove_metadata():
        raise ContractError(f"{path}: columns {table.schema.names} do not match schemas/parallel.py's {expected.names}")
    return table.to_pylist()


def _read_tsv(path: str, languages: tuple[str, str]) -> tuple[dict, int]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise PairsError(f"{path}: not UTF-8 text (byte {e.start})") from None
    pairs, blank = [], 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            blank += 1
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise PairsError(f"{path}:{number}: expected source<TAB>target, found {len(parts) - 1} tabs")
        source, target = (" ".join(p.split()) for p in parts)
        if not source or not target:
            raise PairsError(f"{path}:{number}: an empty {'source' if not source else 'target'}")
        pairs.append(Pair(source, target, path, number))
    return {languages: pairs}, blank


def read_pairs(path: str, languages: tuple[tuple[str, str], ...] = ()) -> tuple[dict[tuple[str, str], list[Pair]], int]:
    """({(source language, target language): pairs in (path, line, texts) order}, blank TSV lines skipped).
    A directory is read whole and `languages` (when given) selects from it; a TSV needs exactly one language pair."""
    if not os.path.exists(path):
        raise PairsError(f"--pairs {path}: no such file or directory")
    shards = _shards(path)
    if shards is None:
        if len(languages) != 1:
            raise PairsError(f"--pairs {path}: a TSV of source<TAB>target needs its languages: --languages SRC-TGT (one pair)")
        return _read_tsv(path, languages[0])
    grouped: dict[tuple[str, str], list[Pair]] = {}
    for shard in shards:
        for row in _read_shard(shard):
            key = (row["source_language"], row["target_language"])
            grouped.setdefault(key, []).append(Pair(row["source"], row["target"], row["path"], row["line"]))
    if languages:
        missing = [f"{a}-{b}" for a, b in languages if (a, b) not in grouped]
        if missing:
            held = ", ".join(f"{a}-{b}" for a, b in sorted(grouped)) or "none"
            raise PairsError(f"--languages {','.join(missing)}: not in {path} (it holds {held})")
        grouped = {key: grouped[key] for key in languages}
    return {key: sorted(pairs, key=lambda p: (p.path, p.line, p.source, p.target)) for key, pairs in sorted(grouped.items())}, 0


def distinct_pairs(pairs: list[Pair]) -> tuple[list[Pair], dict[str, int]]:
    """The pairs whose source and target texts each occur once, the first of each kept (see the module docstring),
    and {reason: pairs dropped} for DROP_REASONS."""
    sources, targets, kept = set(), set(), []
    dropped = dict.fromkeys(DROP_REASONS, 0)
    for pair in pairs:
        if pair.source in sources:
            dropped["same_source"] += 1
        elif pair.target in targets:
            dropped["same_target"] += 1
        else:
            sources.add(pair.source)
            targets.add(pair.target)
            kept.append(pair)
    return kept, dropped


def sample(pairs: list, limit: int, seed: int, languages: tuple[str, str]) -> list:
    """At most `limit` of `pairs`, drawn without replacement by a generator of (seed, the language pair), kept in
    their order: the same inputs and seed give the same sample, whichever other language pairs are read."""
    if len(pairs) <= limit:
        return list(pairs)
    rng = np.random.default_rng([seed, zlib.crc32("-".join(languages).encode())])
    return [pairs[i] for i in sorted(rng.choice(len(pairs), size=limit, replace=False))]


def normalised(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), so a dot product is the cosine."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


def nearest(queries: np.ndarray, candidates: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """For each unit-length query row, the index of the candidate of highest cosine (the first, on a tie)."""
    found = [np.argmax(queries[i : i + chunk] @ candidates.T, axis=1) for i in range(0, len(queries), chunk)]
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def binomial_se(accuracy: float, n: int) -> float:
    """The standard error of a share measured on n independent pairs: sqrt(p (1 - p) / n)."""
    return float(np.sqrt(accuracy * (1.0 - accuracy) / n))


def paired_difference(hits: str, other: str) -> dict:
    """A's accuracy minus B's in points, from their hits on the same sample ("0110...", pair by pair), with the
    standard error of the mean of the per-pair differences (paired: the pairs both find or both miss cancel)."""
    if len(hits) != len(other) or len(hits) < 2:
        raise ValueError(f"a paired difference needs two hit strings of one length >= 2, got {len(hits)} and {len(other)}")
    mean, se = stats.paired_difference([int(a) for a in hits], [int(b) for b in other])
    return {"points": round(100 * mean, 4), "se": round(100 * se, 4)}


def direction_score(hits: np.ndarray) -> dict:
    n = len(hits)
    accuracy = float(hits.mean())
    return {"accuracy": round(accuracy, 6), "se": round(binomial_se(accuracy, n), 6), "hits": int(hits.sum()), "n": n}


def retrieval_accuracy(source: np.ndarray, target: np.ndarray, source_group: np.ndarray | None = None,
                       target_group: np.ndarray | None = None) -> dict:
    """Accuracy@1 of cosine nearest-neighbour retrieval of n pairs, pair i being (source_group[i], target_group[i]):
    `source` (g_s, hidden) and `target` (g_t, hidden) hold one vector per group of texts the model reads alike (the
    same token ids), the groups default to one text each. A query is a hit when the nearest target group is its
    translation's and that group holds only its translation: a translation the model reads as the same tokens as
    another candidate cannot be singled out, whichever copy an argmax would meet first.
    → {"source_to_target": {...}, "target_to_source": {...}, "mean": ..., "hits_source_to_target": "0110...",
    "hits_target_to_source": ...}: one character per pair, 1 for a hit (the hits keep a comparison of two models on
    the same sample paired)."""
    source_group = np.arange(len(source)) if source_group is None else np.asarray(source_group)
    target_group = np.arange(len(target)) if target_group is None else np.asarray(target_group)
    if len(source_group) != len(target_group) or len(source_group) < 2:
        raise ValueError(f"retrieval needs two equal sides of >= 2 pairs, got {len(source_group)} and {len(target_group)}")
    s, t = normalised(source), normalised(target)
    alone_s = np.bincount(source_group, minlength=len(s))[source_group] == 1
    alone_t = np.bincount(target_group, minlength=len(t))[target_group] == 1
    forward = ((nearest(s[source_group], t) == target_group) & alone_t).astype(np.int8)
    backward = ((nearest(t[target_group], s) == source_group) & alone_s).astype(np.int8)
    out = {"source_to_target": direction_score(forward), "target_to_source": direction_score(backward)}
    out["mean"] = round((out["source_to_target"]["accuracy"] + out["target_to_source"]["accuracy"]) / 2, 6)
    out["hits_source_to_target"], out["hits_target_to_source"] = ("".join(map(str, h.tolist())) for h in (forward, backward))
    return out
