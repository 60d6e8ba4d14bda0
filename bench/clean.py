"""Benchmark: our document cleaning (normalize + C4 / Gopher filters) and sentence splitter against peers.

In:  `corpus`, a glob of .txt / .jsonl(.gz|.zst) files ({"text": ...} per line; a .txt file is one
     document per blank-line-separated block), or None for the built-in docstring corpus (4 MB; 1 MB with
     `quick`).
Out: one dict of figures, single-threaded (MB/s per core, MB = 10^6 bytes of UTF-8 input):
  - normalize_mb_s, and per preset ("c4", "gopher"): ours = normalize_text + filter_document, beside
    datatrove's C4QualityFilter / GopherQualityFilter -> GopherRepetitionFilter (the order a datatrove
    pipeline runs them) on the same normalized texts, normalization outside their timed loop (their best
    case); `ratio` = ours / datatrove in MB/s, keep rates, per-document keep/drop agreement, drop reasons.
    Top-level `ratio` is the geometric mean of the two presets' ratios.
  - sentences: golden-set accuracy (tests/assets/sentences_golden.jsonl; exact, and with white space
    collapsed inside sentences, which is how peers that keep "\\n" are scored) and MB/s, for ours, pysbd
    and spaCy's rule-based sentencizer (`spacy.blank("en")` + "sentencizer", datatrove's English
    splitter), when installed; `ratio` = ours / pysbd in MB/s.

datatrove runs at ~0.3-0.6 MB/s here (its English word and sentence splitting is spaCy's tokenizer), so the
side-by-side runs on the first `peer_mb` of the corpus (0.25 MB quick, 1.5 MB full); ours-only figures use
the whole corpus. Timings alternate ours/theirs per chunk of documents so that load from other processes on a
shared machine lands on both sides, and time is this process's CPU time (`time.process_time`), which other
processes' load does not inflate the way it inflates wall time.

datatrove: `pip install datatrove spacy` (0.10.1 adds only dill, loguru, humanize and multiprocess to an
environment with this project's extras, and changes none of its pinned packages). pysbd: `pip install pysbd`.
"""

from __future__ import annotations

import collections
import importlib.metadata
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

from bench._corpus import read_texts
from pipelines.documents.normalize import NormalizeConfig, normalize_text
from pipelines.documents.sentences import split_sentences
from pipelines.filters import FilterConfig, filter_document

GOLDEN = Path(__file__).parents[1] / "tests" / "assets" / "sentences_golden.jsonl"
CHUNK_DOCS = 20


def _mb(texts: list[str]) -> float:
    return sum(len(t.encode("utf-8")) for t in texts) / 1e6


def _alternate(texts: list[str], sides: dict[str, Callable[[str], object]]) -> tuple[dict[str, float], dict[str, list]]:
    """Run every side over `texts` chunk by chunk, alternating sides per chunk; (seconds, outputs) per side."""
    seconds = {name: 0.0 for name in sides}
    outputs: dict[str, list] = {name: [] for name in sides}
    for start in range(0, len(texts), CHUNK_DOCS):
        chunk = texts[start : start + CHUNK_DOCS]
        for name, fn in sides.items():
            began = time.process_time()
            results = [fn(t) for t in chunk]
            seconds[name] += time.process_time() - began
            outputs[name].extend(results)
    return seconds, outputs


def _datatrove_sides():
    """(preset -> callable(text) -> kept?, reason) for datatrove's filters, or None and the reason it cannot run."""
    try:
        from datatrove.data import Document
        from datatrove.pipeline.filters import (
            C4QualityFilter,
            GopherQualityFilter,
            GopherRepetitionFilter,
        )
    except ImportError:
        return None, "datatrove not installed: pip install datatrove"
    try:
        import spacy  # noqa: F401  (datatrove's English word tokenizer)
    except ImportError:
        return None, "datatrove needs spaCy for English: pip install spacy"
    c4, quality, repetition = C4QualityFilter(), GopherQualityFilter(), GopherRepetitionFilter()

    def run(filters, text: str) -> tuple[bool, str | None]:
        doc = Document(text=text, id="0")
        for f in filters:
            result = f.filter(doc)
            kept, reason = result if isinstance(result, tuple) else (result, None)
            if not kept:
                return False, reason
        return True, None

    sides = {"c4": lambda t: run((c4,), t), "gopher": lambda t: run((quality, repetition), t)}
    for side in sides.values():
        side("Warm up the spaCy tokenizer. It loads on the first call.")
    return sides, f"datatrove {importlib.metadata.version('datatrove')}, spaCy {spacy.__version__}"


def _filters(raw: list[str], normalized: list[str], n_peer: int) -> dict:
    """Per preset: ours over the whole corpus, then ours beside datatrove over the first `n_peer` documents."""
    nconfig = NormalizeConfig()
    peers, peer_note = _datatrove_sides()
    results: dict = {"peer": peer_note}
    ratios = []
    for preset in ("c4", "gopher"):
        config = FilterConfig.preset(preset)
        def ours(i: int, c: FilterConfig = config):
            return filter_document(normalize_text(raw[i], nconfig), c)

        seconds, _ = _alternate(list(range(len(raw))), {"ours": ours})
        entry: dict = {"ours_whole_corpus_mb_s": round(_mb(raw) / seconds["ours"], 2)}
        sides: dict[str, Callable] = {"ours": ours}
        if peers:
            sides["datatrove"] = lambda i, f=peers[preset]: f(normalized[i])  # already normalized: their best case
        seconds, outputs = _alternate(list(range(n_peer)), sides)
        mb = _mb(raw[:n_peer])
        ours_reasons = collections.Counter(reason or "kept" for _, reason in outputs["ours"])
        entry.update(ours_mb_s=round(mb / seconds["ours"], 2), ours_kept=ours_reasons.pop("kept", 0),
                     ours_drops=dict(ours_reasons.most_common()))
        if peers:
            their_reasons = collections.Counter("kept" if kept else reason or "dropped"
                                                for kept, reason in outputs["datatrove"])
            agree = sum((o[0] is not None) == t[0] for o, t in zip(outputs["ours"], outputs["datatrove"]))
            ratio = seconds["datatrove"] / seconds["ours"]
            ratios.append(ratio)
            entry.update(datatrove_mb_s=round(mb / seconds["datatrove"], 3), ratio=round(ratio, 1),
                         datatrove_kept=their_reasons.pop("kept", 0), datatrove_drops=dict(their_reasons.most_common()),
                         keep_drop_agreement=round(agree / n_peer, 3))
        results[preset] = entry
    if ratios:
        results["ratio"] = round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 1)
    return results


def _golden_accuracy(split: Callable[[str], list[str]]) -> tuple[float, float]:
    cases = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line.strip()]
    exact = collapsed = 0
    for case in cases:
        got = [s.strip() for s in split(case["text"]) if s.strip()]
        exact += got == case["sentences"]
        collapsed += [" ".join(s.split()) for s in got] == [" ".join(s.split()) for s in case["sentences"]]
    return round(exact / len(cases), 3), round(collapsed / len(cases), 3)


def _splitters() -> tuple[dict[str, Callable[[str], list[str]]], list[str]]:
    splitters: dict[str, Callable[[str], list[str]]] = {"ours": split_sentences}
    notes = []
    try:
        import pysbd

        segmenter = pysbd.Segmenter(language="en", clean=False)
        splitters["pysbd"] = segmenter.segment
    except ImportError:
        notes.append("pysbd not installed: pip install pysbd")
    try:
        import spacy

        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        nlp.max_length = 10**8
        splitters["spacy_sentencizer"] = lambda text: [s.text for s in nlp(text).sents]
    except ImportError:
        notes.append("spaCy not installed: pip install spacy")
    notes.append("nltk punkt skipped: its model is a separate download, not available offline")
    return splitters, notes


def _sentences(normalized_all: list[str], normalized_peer: list[str]) -> dict:
    splitters, notes = _splitters()
    result: dict = {"golden_cases": sum(1 for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line.strip())}
    whole_s = _alternate(normalized_all, {"ours": split_sentences})[0]["ours"]
    result["ours_whole_corpus_mb_s"] = round(_mb(normalized_all) / whole_s, 2)
    seconds, outputs = _alternate(normalized_peer, splitters)
    mb = _mb(normalized_peer)
    for name, split in splitters.items():
        exact, collapsed = _golden_accuracy(split)
        result[name] = {"golden_exact": exact, "golden_ws_collapsed": collapsed, "mb_s": round(mb / seconds[name], 3),
                        "sentences": sum(len(o) for o in outputs[name])}
    if "pysbd" in splitters:
        result["ratio"] = round(seconds["pysbd"] / seconds["ours"], 1)
    result["notes"] = notes
    return result


def main(corpus: str | None, quick: bool) -> dict:
    raw = list(read_texts(corpus, 1_000_000 if quick else 4_000_000))
    if not raw:
        raise SystemExit(f"no text found in {corpus!r}")
    nconfig = NormalizeConfig()
    normalize_text("warm up: non-ASCII text builds the character tables once (~0.3 s) \u00e9", nconfig)
    began = time.process_time()
    normalized = [normalize_text(t, nconfig) for t in raw]
    normalize_s = time.process_time() - began

    peer_bytes = 250_000 if quick else 1_500_000
    n_peer, total = 0, 0
    while n_peer < len(raw) and total < peer_bytes:
        total += len(raw[n_peer].encode("utf-8"))
        n_peer += 1
    figures = {
        "corpus": corpus or "built-in docstrings",
        "docs": len(raw),
        "mb": round(_mb(raw), 2),
        "peer_docs": n_peer,
        "peer_mb": round(_mb(raw[:n_peer]), 2),
        "normalize_mb_s": round(_mb(raw) / normalize_s, 1),
    }
    filters = _filters(raw, normalized, n_peer)
    figures["peer"] = filters.pop("peer")
    if "ratio" in filters:
        figures["ratio"] = filters.pop("ratio")
    figures.update(filters)
    figures["sentences"] = _sentences(normalized, normalized[:n_peer])
    return figures
