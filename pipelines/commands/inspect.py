"""`clozeforge inspect DIR/pairs`: what a pairs directory holds, and whether every shard is intact.

In:  a pairs/ directory or its manifest.json (any fsspec URL).
Out: on stdout, the manifest summary (vocabulary, special tokens, the rows' format and packing, sources) and,
     per split, the row count, the random-next fraction (NSP pairs), the tokens (a row's mean num_tokens, special
     tokens included), the padding fraction (the mean share of a max_seq_len-long row that is padding) and a
     length histogram; each shard's sha256, schema and row count are checked against the manifest. Exit status 1 if any shard fails, 2 for a user error.
Reads with pyarrow only: no Beam, no torch.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import fsspec
import numpy as np
import pyarrow as pa

from process.exits import fail
from schemas import ContractError, Manifest, validate_pairs_schema
from schemas.pairs import NSP_PAIRS


def shard_stats(manifest: Manifest, split: str) -> tuple[dict, list[str]]:
    lengths, random_next, problems = [], 0, []
    for shard in manifest.split_shards(split):
        url = manifest.resolve(shard.path)
        try:
            with fsspec.open(url, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            problems.append(f"{shard.path}: missing")
            continue
        except OSError as e:
            problems.append(f"{shard.path}: cannot read ({type(e).__name__}: {e})")
            continue
        if hashlib.sha256(data).hexdigest() != shard.sha256:
            problems.append(f"{shard.path}: sha256 mismatch")
            continue
        try:  # the sha256 matched, so the manifest itself names this file: still, it may not be a shard at all
            reader = pa.ipc.open_file(pa.BufferReader(data))
            validate_pairs_schema(reader.schema, shard.path, manifest.row_format.kind)
            table = reader.read_all()
        except ContractError as e:
            problems.append(str(e))
            continue
        except pa.ArrowException as e:
            problems.append(f"{shard.path}: not an Arrow IPC file ({e})")
            continue
        if table.num_rows != shard.rows:
            problems.append(f"{shard.path}: {table.num_rows} rows, manifest says {shard.rows}")
        lengths.append(table.column("num_tokens").to_numpy())
        if "is_random_next" in table.column_names:  # NSP pairs
            random_next += int(np.count_nonzero(table.column("is_random_next").to_numpy(zero_copy_only=False)))
    n = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    return {"pairs": int(n.size), "random_next": random_next, "tokens": int(n.sum()), "lengths": n}, problems


def histogram(lengths: np.ndarray, max_len: int, bins: int = 8, width: int = 40) -> list[str]:
    if lengths.size == 0:
        return []
    edges = np.linspace(0, max_len, bins + 1).astype(int)
    counts, _ = np.histogram(lengths, bins=edges)
    peak = max(int(counts.max()), 1)
    return [f"    {lo:4d}-{hi:<4d} {'#' * round(width * c / peak):<{width}} {c}" for lo, hi, c in zip(edges[:-1], edges[1:], counts)]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge inspect", description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", help="pairs/ directory or manifest.json")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        manifest = Manifest.read(args.pairs)
    except ContractError as e:
        return fail("inspect", str(e))
    except Exception as e:  # noqa: BLE001  (a file where a directory should be, an object store's own errors)
        text = (str(e).strip().splitlines() or [""])[0][:200]
        return fail("inspect", f"{args.pairs}: cannot read a manifest there ({type(e).__name__}: {text})")
    v = manifest.vocab
    print(f"manifest  {manifest.url} (format {manifest.format_version}, fingerprint {manifest.fingerprint[:16]})")
    print(f"vocab     {v['size']} {manifest.tokenizer} tokens, {'uncased' if v['lowercase'] else 'cased'}, sha256 {v['sha256'][:16]}")
    print(f"specials  {' '.join(f'{t}={i}' for t, i in manifest.special_tokens.items())}")
    print(f"max_seq   {manifest.max_seq_len}")
    separator = manifest.packing.get("separator")
    between = f", documents separated by {separator['token']}={separator['id']}" if separator else ""
    print(f"format    {manifest.row_format.kind} v{manifest.row_format.version} (--packing {manifest.packing['mode']}{between})")
    print(f"sources   {' '.join(f'{k}={n}' for k, n in manifest.sources.items())}")
    failed = []
    for split in sorted(manifest.splits):
        stats, problems = shard_stats(manifest, split)
        failed += problems
        pairs = max(stats["pairs"], 1)
        nsp = manifest.row_format == NSP_PAIRS
        padding = 1.0 - stats["tokens"] / (pairs * manifest.max_seq_len)
        print(
            f"{split + ' ':<10}{len(manifest.split_shards(split)):>2} shards, {stats['pairs']} {'pairs' if nsp else 'rows'}, "
            + (f"random-next {stats['random_next'] / pairs:.3f}, " if nsp else "")
            + f"{stats['tokens']} tokens (mean {stats['tokens'] / pairs:.1f} a row), padding {padding:.3f}"
        )
        print("\n".join(histogram(stats["lengths"], manifest.max_seq_len)))
    for problem in failed:
        print(f"FAILED    {problem}")
    print("checksums " + ("all shards verified" if not failed else f"{len(failed)} problem(s)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
