"""Seeded, runner-independent hashing: the source of every random choice prep makes per record.

Python's hash() is salted per process, so it would give other buckets on every Beam worker; these use
blake2b over (seed, purpose, value), which is the same everywhere and for every worker count.
"""

from __future__ import annotations

import hashlib

_TWO_64 = float(1 << 64)


def key64(seed: int, purpose: str, value: str) -> int:
    """A uniform 64-bit integer for (seed, purpose, value)."""
    digest = hashlib.blake2b(f"{seed}\0{purpose}\0{value}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def unit(seed: int, purpose: str, value: str) -> float:
    """A uniform float in [0, 1) for (seed, purpose, value)."""
    return key64(seed, purpose, value) / _TWO_64


def bucket(key: int, buckets: int) -> int:
    """Map a uniform 64-bit key onto [0, buckets) without modulo bias."""
    return (key * buckets) >> 64
