"""Benchmark: what canonical partitions cost the input path (trainer/data/partitions.py).

In:  random ids with BERT-like pair lengths (seq 128), written as one zstd Arrow shard + manifest, read back
     through ShardStream by one rank at a micro batch of 64 and a global batch of 64.
Out: sequences/s of the whole input path (read, decode, collate, mask, torch) with the global batch in one
     partition (the layout before partitions: one collate and one masking call per batch), and in 4, 8, 16
     and 64 partitions (chunks of 16, 8, 4 and 1 pairs, each collated and masked on its own); `ratio` = the
     4-partition speed (the default here: chunks of 16) over the one-partition speed, `ratio_64` for one pair
     per chunk (no peer library: this is the cost of world-size independence).
"""

from __future__ import annotations

import tempfile

import numpy as np

from bench.loader import BATCH, _random_data, _time_batches, _write_shard
from trainer.masking import Masker, MaskingConfig


def main(corpus: str | None, quick: bool) -> dict:
    import torch

    from schemas import Manifest
    from trainer.data import ShardStream

    if corpus is not None:
        raise SystemExit("bench elastic uses random ids; --corpus is not read")
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    batches = 20 if quick else 100
    vocab, pairs_a, pairs_b, data = _random_data(rng, batches * BATCH)
    url = _write_shard(tempfile.mkdtemp(prefix="bench-elastic-"), vocab, pairs_a, pairs_b, rng.random(len(pairs_a)) < 0.5)
    ids = {t: i for i, t in enumerate(vocab)}
    masker = Masker(MaskingConfig(), vocab_size=len(vocab), special_ids=[ids[t] for t in ids if t.startswith("[")],
                    mask_id=ids["[MASK]"])  # BERT's token masking needs no word marks
    manifest = Manifest.read(url)
    streams = {p: iter(ShardStream(manifest, split="train", batch_size=BATCH, masker=masker, seed=0, global_batch=BATCH, partitions=p))
               for p in (1, 4, 8, 16, 64)}
    seconds = _time_batches({f"p{p}": (lambda i, s=s: next(s)) for p, s in streams.items()}, batches)
    return {
        "data": data,
        "batch": BATCH,
        **{f"partitions_{p}_seqs_per_s": round(BATCH / seconds[f"p{p}"]) for p in streams},
        "ratio": round(seconds["p1"] / seconds["p4"], 2),
        **{f"ratio_{p}": round(seconds["p1"] / seconds[f"p{p}"], 2) for p in (8, 16, 64)},
    }
