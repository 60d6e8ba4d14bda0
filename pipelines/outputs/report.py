"""The run report: every input record accounted for, per file and in total (pure, no Beam import).

In:  accounting tallies ((path, key), count) where key is 'file' (the file was matched), 'read', 'kept',
     'dropped:<reason>' or 'event:<kind>', plus the pair statistics, the vocabulary summary and the shard list.
Out: the report.json body; per split of "pairs", beside the counts, `tokens_per_row` (the mean num_tokens:
     a row's ids with the special tokens the trainer adds) and `padding_fraction` (the mean share of a
     max_seq_len-long row that is padding), for every --packing (`row_figures`). `read` is counted where
     records are read and `kept` where they leave deduplication, independently, so `read == kept + sum(dropped)`
     is a real check: a mismatch is reported under "unbalanced" (and fails the run in the CLI) instead of being
     made true by arithmetic.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def _empty() -> dict[str, Any]:
    return {"read": 0, "kept": 0, "dropped": Counter(), "events": Counter()}


def _add(entry: dict[str, Any], key: str, count: int) -> None:
    kind, _, detail = key.partition(":")
    if kind == "file":  # the file was matched: its entry exists, with whatever else it counts
        return
    if kind in ("read", "kept"):
        entry[kind] += count
    elif kind == "dropped":
        entry["dropped"][detail] += count
    elif kind == "event":
        entry["events"][detail] += count
    else:
        raise ValueError(f"unknown accounting key {key!r}")


def _finish(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "read": entry["read"],
        "kept": entry["kept"],
        "dropped": dict(sorted(entry["dropped"].items())),
        "events": dict(sorted(entry["events"].items())),
    }


def is_balanced(entry: dict[str, Any]) -> bool:
    return entry["read"] == entry["kept"] + sum(entry["dropped"].values())


def row_figures(stats: dict[str, int], max_seq_len: int) -> dict[str, float]:
    """tokens_per_row and padding_fraction of a split, from its `rows` and `row_tokens` (Σ num_tokens); a row
    of n tokens is (max_seq_len - n) / max_seq_len padding, so their mean is 1 - row_tokens / (rows * max_seq_len)."""
    rows, tokens = stats.get("rows", 0), stats.get("row_tokens", 0)
    if not rows:
        return {}
    return {"tokens_per_row": round(tokens / rows, 3), "padding_fraction": round(1.0 - tokens / (rows * max_seq_len), 5)}


def language_report(tallies: list[tuple[tuple[str, str], int]], vocab: dict[str, dict]) -> dict[str, Any]:
    """report.json's `languages` (prep --identify-languages): per language code, read, kept and dropped by reason
    (balanced as the files are; "und" also holds the records no identifier saw, dropped as they were read), and
    `vocab`, the vocabulary's figures on its held-out documents, the most read language first."""
    table: dict[str, dict[str, Any]] = {}
    for (code, key), count in tallies:
        _add(table.setdefault(code, _empty()), key, count)
    ordered = sorted(table.items(), key=lambda kv: (-kv[1]["read"], kv[0]))
    out = {}
    for code, entry in ordered:
        finished = _finish(entry)
        del finished["events"]
        out[code] = {**finished, "vocab": vocab.get(code, {})}
    return out


def parallel_report(tallies: list[tuple[tuple[str, str, str], int]], shards: int) -> dict[str, Any]:
    """report.json's `parallel` (prep --parallel): read, kept and dropped translation pairs by reason in total, per
    language direction (`en-fr`) and per file, and `unbalanced`, the files and directions where
    read != kept + sum(dropped) (counted where they are read, written and dropped: a real check)."""
    scopes: dict[str, dict[str, dict[str, Any]]] = {"file": {}, "direction": {}}
    total = _empty()
    for (scope, name, key), count in tallies:
        _add(scopes[scope].setdefault(name, _empty()), key, count)
        if scope == "file":
            _add(total, key, count)

    def finished(entry):
        out = _finish(entry)
        del out["events"]
        return out

    directions = {name: finished(e) for name, e in sorted(scopes["direction"].items(), key=lambda kv: (-kv[1]["read"], kv[0]))}
    files = {name: finished(e) for name, e in sorted(scopes["file"].items())}
    unbalanced = [f"{scope} {name}" for scope, table in (("file", files), ("direction", directions))
                  for name, entry in table.items() if not is_balanced(entry)]
    return {"total": finished(total), "directions": directions, "files": files, "shards": shards, "unbalanced": unbalanced}


def tlm_unbalanced(pairs: dict[str, dict[str, int]], kept: int) -> list[str]:
    """--packing tlm's balance: each split's translation_pairs (counted as the pairs were assigned to it) are its rows
    (counted by the shard writer) plus its drops (tlm.DROP_REASONS), and all the splits hold the `kept` pairs of
    report.json's `parallel` (counted by WriteParallel): the splits that do not add up, as `unbalanced` lists them."""
    from pipelines.documents.tlm import DROP_REASONS

    out = [f"tlm {split}" for split, stats in pairs.items()
           if stats.get("translation_pairs", 0) != stats.get("rows", 0) + sum(stats.get(r, 0) for r in DROP_REASONS)]
    if sum(stats.get("translation_pairs", 0) for stats in pairs.values()) != kept:
        out.append("tlm translation pairs")
    return out


def build_report(
    tallies: list[tuple[tuple[str, str], int]],
    *,
    pairs: dict[str, dict[str, int]],
    shards: list[Any],
    vocab: dict[str, Any],
    config: dict[str, Any],
) -> dict[str, Any]:
    files: dict[str, dict[str, Any]] = {}
    total = _empty()
    for (path, key), count in tallies:
        _add(files.setdefault(path, _empty()), key, count)
        _add(total, key, count)
    per_file = {path: _finish(entry) for path, entry in sorted(files.items())}
    totals = _finish(total)
    rows: dict[str, Counter] = {}
    for shard in shards:
        rows.setdefault(shard.split, Counter())["rows"] += shard.rows
        rows[shard.split]["shards"] += 1
    pair_stats = {split: {**stats, **rows.get(split, {})} for split, stats in pairs.items()}
    for stats in pair_stats.values():
        stats.update(row_figures(stats, config["max_seq_len"]))
    return {
        "total": totals,
        "files": per_file,
        "unbalanced": [path for path, entry in per_file.items() if not is_balanced(entry)],
        "pairs": pair_stats,
        "vocab": {k: v for k, v in vocab.items() if k not in ("directory", "staged")},  # where it was staged is not what it is
        "config": config,
    }
