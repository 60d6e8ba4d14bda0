"""Decontamination: which documents share a 13-word n-gram with evaluation text (pure, no Beam import).

In:  evaluation files (a benchmark's validation and test files: JSON such as SQuAD's, JSON lines, GLUE's TSV, CSV,
     Parquet, CoNLL's column files, plain text; any compression of schemas/formats.py) and documents' text.
Out: `EvalFile`s (URL and sha256, for report.json), an `NgramIndex` of their n-grams, and for a document the
     first n-gram it shares with them (or None): prep drops such a document as `contaminated`.

The convention is GPT-3's (Brown et al. 2020, appendix C; EleutherAI's lm-evaluation-harness describes it in
scripts/clean_training_data/README.md): n = 13 words, case and punctuation ignored, words split on white
space. GPT-3 cut the matching span out (and dropped a document cut into more than ten pieces); prep drops the
whole document, which errs on the side of removing. An evaluation text shorter than 13 words gives no n-gram
and cannot mark a document: most of CoLA's and SST-2's sentences are that short, the n-gram test's known blind
spot.

Evaluation text is every string of a JSON file (each string on its own, so n-grams never span two fields), each
tab-separated field of a line otherwise, and the sentences of a column file (first column, blank-line separated,
`-DOCSTART-` lines skipped). N-grams are kept as 64-bit hashes (a word's blake2b, rolled over 13 words), sorted in
one numpy array (8 bytes each); the chance that a document's n-gram collides with one of a million evaluation
n-grams is ~5e-14, so a billion-word corpus expects no false match.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import json
import re
import unicodedata
from collections.abc import Iterator, Sequence

import numpy as np

from schemas import formats

NGRAM = 13
"""Words per n-gram (GPT-3's)."""

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd, so the rolling hash is a bijection of each word's position
_TAG = re.compile(r"^(O|[BIES]-\S+)$")


@dataclasses.dataclass(frozen=True)
class EvalFile:
    url: str
    sha256: str
    long_texts: int = 0
    """Its texts of NGRAM words or more: the only ones that can mark a document (0: the file removes nothing)."""


@functools.lru_cache(maxsize=1 << 16)
def _is_punctuation(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def normalized_words(text: str) -> list[str]:
    """Lower-cased words with every punctuation character (Unicode category P) removed, split on white space."""
    text = text.lower()
    return text.translate({ord(c): None for c in set(text) if _is_punctuation(c)}).split()


@functools.lru_cache(maxsize=1 << 18)
def _word_hash(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def ngram_hashes(words: Sequence[str], n: int = NGRAM) -> np.ndarray:
    """(len(words) - n + 1,) uint64 hashes of the n-grams of `words`, in order; empty when there are fewer."""
    if len(words) < n:
        return np.zeros(0, np.uint64)
    w = np.fromiter((_word_hash(x) for x in words), np.uint64, len(words))
    count = len(words) - n + 1
    h = np.zeros(count, np.uint64)
    for k in range(n):  # uint64 arithmetic wraps: a polynomial hash mod 2^64
        h = h * _MULTIPLIER + w[k: k + count]
    return h


def evaluation_texts(url: str, data: bytes) -> Iterator[str]:
    """The texts of one evaluation file, by its format (schemas/formats.py; see the module docstring)."""
    data = formats.decompress(url, data)
    found = formats.format_of(url, data[: formats.SNIFF_BYTES])
    name = found.name if found is not None else "txt"
    if name in ("parquet", "arrow"):
        from schemas.tables import TABLE_FORMATS, Account, TableReading

        for _, row in TABLE_FORMATS[name].records(url, data, TableReading(), Account(format=name)):
            yield from _strings(row)
        return
    text = data.decode("utf-8-sig", errors="replace")
    if name == "jsonl":
        try:  # a whole JSON document (SQuAD's .json), else one object a line
            yield from _strings(json.loads(text))
            return
        except ValueError:
            pass
        for line in text.splitlines():
            if line.strip():
                yield from _strings(json.loads(line))
    elif name == "csv":
        for fields in csv.reader(io.StringIO(text, newline="")):
            yield from fields
    elif _is_column_file(text):
        yield from _column_sentences(text)
    else:
        for line in text.splitlines():
            yield from line.split("\t")


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _is_column_file(text: str) -> bool:
    """CoNLL's layout: a -DOCSTART- line first, or two columns or more ending in a tag on every non-empty line of
    the first 200."""
    lines = [line.split() for line in text.splitlines()[:200] if line.strip()]
    if not lines:
        return False
    if lines[0][0] == "-DOCSTART-":
        return True
    return all(len(f) >= 2 and "\t" not in " ".join(f) and _TAG.match(f[-1]) for f in lines)


def _column_sentences(text: str) -> Iterator[str]:
    words: list[str] = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                yield " ".join(words)
            words = []
        else:
            words.append(fields[0])
    if words:
        yield " ".join(words)


class NgramIndex:
    """The n-gram hashes of evaluation texts, sorted, and the test of a document against them."""

    def __init__(self, hashes: np.ndarray, n: int = NGRAM):
        self.hashes = np.unique(hashes.astype(np.uint64))
        self.n = n

    @classmethod
    def of_texts(cls, texts, n: int = NGRAM) -> NgramIndex:
        parts = [ngram_hashes(normalized_words(t), n) for t in texts]
        return cls(np.concatenate(parts) if parts else np.zeros(0, np.uint64), n)

    def __len__(self) -> int:
        return len(self.hashes)

    def shared_ngram(self, text: str) -> str | None:
        """The first n-gram of `text` (normalised words) that evaluation text holds too, or None."""
        if not len(self.hashes):
            return None
        words = normalized_words(text)
        h = ngram_hashes(words, self.n)
        if not len(h):
            return None
        at = np.minimum(np.searchsorted(self.hashes, h), len(self.hashes) - 1)
        hits = np.flatnonzero(self.hashes[at] == h)
        return " ".join(words[hits[0]: hits[0] + self.n]) if len(hits) else None


def match_files(globs: Sequence[str]) -> list[EvalFile]:
    """Every file the globs match (sorted, each once) with its sha256; a glob matching nothing, or a file that
    cannot be read, is a PrepError naming the flag."""
    import fsspec

    from pipelines.errors import PrepError

    found: dict[str, EvalFile] = {}
    for pattern in globs:
        try:
            fs, _ = fsspec.core.url_to_fs(pattern)
            paths = [pattern] if fs.isfile(pattern) else sorted(p for p in fs.glob(pattern) if fs.isfile(p))
        except Exception as e:  # noqa: BLE001  (each object store's client has its own errors)
            raise PrepError(f"--decontaminate {pattern}: cannot list it ({type(e).__name__}: {e})") from None
        if not paths:
            raise PrepError(f"--decontaminate {pattern}: matches no file")
        for path in paths:
            url = fs.unstrip_protocol(path) if "://" in pattern else path
            if url not in found:
                data = _read(url, pattern)
                found[url] = EvalFile(url, hashlib.sha256(data).hexdigest(), _long_texts(url, data))
    return sorted(found.values(), key=lambda f: f.url)


def _long_texts(url: str, data: bytes) -> int:
    """How many of the file's texts have NGRAM words or more; a file that cannot be parsed is a PrepError now,
    before the run starts, rather than in a worker."""
    from pipelines.errors import PrepError

    try:
        return sum(len(normalized_words(t)) >= NGRAM for t in evaluation_texts(url, data))
    except (ValueError, OSError, EOFError) as e:  # bad JSON, a truncated gzip stream
        raise PrepError(f"--decontaminate: {url}: cannot read its text ({type(e).__name__}: {e})") from None


def _read(url: str, pattern: str) -> bytes:
    import fsspec

    from pipelines.errors import PrepError

    try:
        with fsspec.open(url, "rb") as f:
            return f.read()
    except OSError as e:
        raise PrepError(f"--decontaminate {pattern}: {url}: cannot read it ({e})") from None


def load_index(files: Sequence[EvalFile], n: int = NGRAM) -> NgramIndex:
    """The n-grams of every file, each checked against the sha256 recorded when prep started: a file changed since
    is an error, not a silent mismatch between report.json and what was removed."""
    from pipelines.errors import PrepError

    parts = []
    for f in files:
        data = _read(f.url, f.url)
        if hashlib.sha256(data).hexdigest() != f.sha256:
            raise PrepError(f"--decontaminate: {f.url} changed while prep ran (its sha256 is not the one recorded at "
                            "the start)")
        try:
            parts.append(NgramIndex.of_texts(evaluation_texts(f.url, data), n).hashes)
        except (ValueError, OSError, EOFError) as e:  # checked at the start; kept for a file read another way here
            raise PrepError(f"--decontaminate: {f.url}: cannot read its text ({type(e).__name__}: {e})") from None
    return NgramIndex(np.concatenate(parts) if parts else np.zeros(0, np.uint64), n)
