"""Near-duplicate detection logic: MinHash signatures over word shingles, LSH band keys, exact-text hashes.

In:  a document's text and a `MinHashConfig`.
Out: `minhash_signature(text, config) -> np.ndarray` (num_perm,) uint64, each value < 2^32;
     `lsh_band_keys(signature, config) -> list[bytes]`, one key per band, to group candidate pairs;
     `estimated_jaccard(sig_a, sig_b) -> float`; `exact_hash(text) -> str` for exact deduplication.

Shingles are word n-grams of the lower-cased text (words = runs of letters/digits). Each word is hashed
with CRC-32 and Adler-32 (zlib: stable across processes, machines and Python versions, unlike `hash()`),
an n-gram's 64-bit key is a mix of its words' hashes, and permutation i maps a 32-bit shingle x to
((a_i * x + b_i) mod 2^64) >> 32 with odd a_i — multiply-shift hashing, a universal family
(Dietzfelbinger et al. 1997) — so all permutations are one broadcast multiply-add over a (perm, shingle)
matrix. The signature is the minimum per permutation.

LSH: the signature is cut into `bands` bands of `rows` rows; two documents with Jaccard similarity s share
at least one band key with probability 1 - (1 - s^rows)^bands. With the default 14 x 8 (FineWeb's
setting) that is 0.05 at s=0.5, 0.56 at s=0.7, 0.92 at s=0.8, 0.9996 at s=0.9; the curve's midpoint
(1/bands)^(1/rows) is 0.72. `candidate_probability` computes it for any setting.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import zlib

import numpy as np

_WORD_RE = re.compile(r"[^\W_]+")
_MIX = np.uint64(0x9E3779B97F4A7C15)
_CHUNK = 4096
"""Shingles per block of the (num_perm, shingles) matrix: bounds memory at num_perm * 4096 * 8 bytes."""
_EMPTY_VALUE = np.uint64(0xFFFFFFFF)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MinHashConfig:
    num_perm: int = 112
    """Signature length (hash permutations). Must equal bands * rows."""
    bands: int = 14
    """LSH bands; rows per band = num_perm // bands. 14 x 8 is FineWeb's choice: midpoint similarity
    (1/14)^(1/8) = 0.72, 92% of pairs at Jaccard 0.8 become candidates, 5% at 0.5."""
    shingle_words: int = 5
    """Words per shingle (FineWeb, Gopher and C4-derived pipelines use word 5-grams)."""
    seed: int = 1
    """Seeds the permutation parameters; signatures are comparable only under the same seed and num_perm."""

    def __post_init__(self) -> None:
        if self.num_perm < 1 or self.bands < 1 or self.num_perm % self.bands:
            raise ValueError(f"num_perm ({self.num_perm}) must be a positive multiple of bands ({self.bands})")
        if self.shingle_words < 1:
            raise ValueError(f"shingle_words must be >= 1, got {self.shingle_words}")
        if self.bands > 65535:
            raise ValueError(f"bands must fit a 2-byte band index, got {self.bands}")

    @property
    def rows(self) -> int:
        return self.num_perm // self.bands

    @property
    def threshold(self) -> float:
        """The similarity where the LSH candidate curve is steepest: (1/bands)^(1/rows)."""
        return (1.0 / self.bands) ** (1.0 / self.rows)


def candidate_probability(similarity: float, config: MinHashConfig) -> float:
    """P(two documents with this Jaccard similarity share at least one band key)."""
    return 1.0 - (1.0 - similarity**config.rows) ** config.bands


def _permutations(config: MinHashConfig) -> tuple[np.ndarray, np.ndarray]:
    """(a, b), each (num_perm, 1) uint64, a odd; from a numpy Generator seeded by config.seed."""
    rng = np.random.default_rng(config.seed)
    a = rng.integers(0, 2**63, size=(config.num_perm, 1), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 2**63, size=(config.num_perm, 1), dtype=np.uint64) * np.uint64(2)
    return a, b


_PERMUTATION_CACHE: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def _shingle_hashes(text: str, n: int) -> np.ndarray:
    """32-bit hashes of the distinct word n-grams of the lower-cased text, (shingles,) uint64."""
    words = _WORD_RE.findall(text.lower())
    if not words:
        return np.empty(0, dtype=np.uint64)
    encoded = [w.encode() for w in words]
    crc = np.fromiter(map(zlib.crc32, encoded), dtype=np.uint64, count=len(words))
    adler = np.fromiter(map(zlib.adler32, encoded), dtype=np.uint64, count=len(words))
    h = _mix64((crc << np.uint64(32)) | adler)  # (words,)
    n = min(n, len(words))  # a text shorter than one shingle is one shingle of all its words
    key = h[: len(h) - n + 1].copy()
    for k in range(1, n):
        key = _mix64(key * _MIX ^ h[k : len(h) - n + 1 + k])  # position-dependent: "a b" != "b a"
    return np.unique(key >> np.uint64(32))


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise (uint64 arithmetic wraps, which is the point)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def minhash_signature(text: str, config: MinHashConfig) -> np.ndarray:
    """(num_perm,) uint64 MinHash signature; a text with no word gets all 0xFFFFFFFF."""
    key = (config.seed, config.num_perm)
    if key not in _PERMUTATION_CACHE:
        _PERMUTATION_CACHE[key] = _permutations(config)
    a, b = _PERMUTATION_CACHE[key]
    shingles = _shingle_hashes(text, config.shingle_words)
    signature = np.full(config.num_perm, _EMPTY_VALUE, dtype=np.uint64)
    for start in range(0, len(shingles), _CHUNK):
        block = shingles[None, start : start + _CHUNK]  # (1, chunk)
        hashed = (a * block + b) >> np.uint64(32)  # (num_perm, chunk)
        np.minimum(signature, hashed.min(axis=1), out=signature)
    return signature


def lsh_band_keys(signature: np.ndarray, config: MinHashConfig) -> list[bytes]:
    """One key per band: 2-byte big-endian band index + the band's rows as big-endian uint32 (2 + 4*rows bytes)."""
    if signature.shape != (config.num_perm,):
        raise ValueError(f"signature shape {signature.shape} does not match num_perm={config.num_perm}")
    rows = signature.astype(">u4").reshape(config.bands, config.rows)  # values are < 2^32 by construction
    return [band.to_bytes(2, "big") + rows[band].tobytes() for band in range(config.bands)]


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """The fraction of equal signature positions: an unbiased estimate of the shingle sets' Jaccard similarity."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures differ in shape: {sig_a.shape} vs {sig_b.shape}")
    return float(np.count_nonzero(sig_a == sig_b)) / max(1, sig_a.size)


def exact_hash(text: str) -> str:
    """SHA-1 hex of the lower-cased text with white space collapsed: equal for texts that differ only there."""
    return hashlib.sha1(" ".join(text.lower().split()).encode("utf-8")).hexdigest()
