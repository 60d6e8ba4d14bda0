"""Benchmark: the bytes of a shuffle run file's values (pipelines/shuffle/payload.py) against pickle.

In:  `corpus` (a glob, bench/_corpus.py) or None for the built-in docstring corpus: its text (2 MB; 0.5 MB
     with `quick`) cut into the three kinds of value prep's shuffles carry most: Doc (dedup, clean/ shards),
     TokenizedDoc (NSP buckets; ids made up from the words' hashes) and pair rows (the global pair shuffle).
Out: per kind and in total, seconds to encode then decode every value with ours (msgpack with the record
     types spelled out) and with pickle (protocol 5, what run files held before: fast, but it executes code
     from the file), and bytes written; `ratio` = pickle seconds / ours (above 1: ours is faster).
"""

from __future__ import annotations

import itertools
import pickle
import time
import zlib

import numpy as np

from bench._corpus import read_texts
from pipelines.documents.records import Doc, TokenizedDoc
from pipelines.shuffle import payload


def _values(corpus: str | None, size: int) -> dict[str, list]:
    docs, tokenized, rows = [], [], []
    for i, text in enumerate(read_texts(corpus, size)):
        sentences = tuple(s.strip() for s in text.split(".") if s.strip())
        if not sentences:
            continue
        docs.append(Doc(source="docs", path="corpus.jsonl", doc_id=f"{i:020x}", sentences=sentences))
        ids = tuple(tuple(zlib.crc32(w.encode()) % 8192 for w in s.split()) for s in sentences)
        tokenized.append(TokenizedDoc(source="docs", path="corpus.jsonl", doc_id=f"{i:020x}", sentences=ids))
        for a, b in itertools.pairwise(ids):
            rows.append({"tokens_a": np.asarray(a, np.uint16).tobytes(), "tokens_b": np.asarray(b, np.uint16).tobytes(),
                         "is_random_next": len(rows) % 2 == 0, "num_tokens": len(a) + len(b) + 3, "source": "docs",
                         "doc_id": f"{i:020x}"})
    return {"doc": docs, "tokenized_doc": tokenized, "pair_row": rows}


def _time(values: list, encode, decode) -> tuple[float, int]:
    started = time.process_time()
    blobs = [encode(v) for v in values]
    back = [decode(b) for b in blobs]
    seconds = time.process_time() - started
    assert len(back) == len(values)
    return seconds, sum(map(len, blobs))


def main(corpus: str | None, quick: bool) -> dict:
    kinds = _values(corpus, 500_000 if quick else 2_000_000)
    for kind, values in kinds.items():  # the round trip is exact (tuples for lists, which records hold anyway)
        assert all(payload.decode(payload.encode(v)) == v for v in values[:200]), kind
    figures, ours_total, pickle_total = {}, 0.0, 0.0
    for kind, values in kinds.items():
        ours_s, ours_bytes = _time(values, payload.encode, payload.decode)
        pickle_s, pickle_bytes = _time(values, lambda v: pickle.dumps(v, protocol=5), pickle.loads)
        figures[kind] = {"values": len(values), "ours_s": round(ours_s, 3), "pickle_s": round(pickle_s, 3),
                         "ours_bytes": ours_bytes, "pickle_bytes": pickle_bytes, "ratio": round(pickle_s / ours_s, 2)}
        ours_total += ours_s
        pickle_total += pickle_s
    return {"corpus": corpus or "built-in docstrings", "peer": "pickle protocol 5", "clock": "process CPU time",
            "ratio": round(pickle_total / ours_total, 2), **figures}
