"""Benchmark: prep end to end (`python -m pipelines.prep`) on two corpus sizes, against an in-memory BERT-style pass.

In:  `corpus`, a glob read by bench/_corpus.py, or None for the built-in docstring corpus. JSON-lines corpora
     are built from it in a temporary directory: S bytes of raw UTF-8 text (S = 2 MB; 0.5 MB with `quick`),
     and the same documents 4 and 16 times over (4*S, 16*S; `quick`: 4*S only), see _build_corpora.
Out: one dict of figures. Per corpus and side: wall seconds, CPU seconds of the process tree (user + system,
     from os.wait4 on the child, so imports and interpreter start are in), peak RSS of the child, MB/s per
     core (MB of raw text / CPU seconds), MB/s wall, and pairs written. MB = 10^6 bytes.
       - ours: `python -m pipelines.prep --input .. --output .. --vocab-size 8192 --spill-mb 4`, Beam's
         FnApiRunner with one worker (clean, exact dedup, sentences, vocab learning, tokenize, NSP pairs,
         zstd Arrow shards; every shuffle through run files on disk).
       - peer, "in-memory BERT-style reference (bench-local)": BERT's create_pretraining_data.py is not
         installable, so `python -m bench.prep reference` (below) does what it does with HuggingFace
         `tokenizers`: every document in a list, a regex sentence split, BertWordPieceTokenizer trained on the
         same text (vocab 8192, TOKENIZERS_PARALLELISM=false so it too runs on one core), every sentence's ids
         held in RAM, BERT's instance construction over the whole corpus at once (random-next segments drawn
         from any document), all instances shuffled in RAM and written as one zstd Arrow file. It does no
         cleaning, filtering or dedup, and does not bake masks in (dupe_factor 1), as ours.
     `ratio` = ours / peer in MB/s per core on the largest corpus; `marginal_mb_s_per_core` = the extra MB /
     the extra CPU seconds from the smallest corpus to the largest, which cancels fixed start-up cost;
     `rss_growth` = peak RSS(largest) / peak RSS(S) (streaming stays near 1, holding everything near the size
     ratio) and `rss_mb_per_corpus_mb` = the extra peak RSS per extra MB of text, from S to the largest and
     between the two largest; `ratio_marginal` = ours / peer in marginal MB/s per core.
     `tiny_records`: ours alone on 100,000 and 1,000,000 records of a few bytes (20,000 and 200,000 with
     `quick`), all dropped as too_short: peak RSS and CPU per record count; memory must not grow with records.

NOTE: with Beam's own GroupByKey between stages, the FnApiRunner held every shuffled PCollection in memory
and ours' peak RSS grew 269 -> 425 MB from 2 to 8 MB of text (2026-11-24); that is why prep's shuffles go
through run files (pipelines/shuffle/).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._corpus import read_texts

ROOT = Path(__file__).resolve().parents[1]
VOCAB_SIZE = 8192
MAX_SEQ_LEN = 128
SHORT_SEQ_PROB = 0.1
SEED = 12345
# The shuffle buffer (prep's --spill-mb, default 64): small enough that S fills it too, so the two sizes show
# where prep's memory stops growing, not the buffer filling up.
SPILL_MB = 4
# A sentence ends at . ! or ? followed by white space and an upper-case letter, digit or opening quote/bracket;
# paragraphs (blank lines) always end one. Cruder than pipelines/documents/sentences.py, as a user's quick script would be.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_PARAGRAPH = re.compile(r"\n\s*\n")


def _build_corpora(corpus: str | None, small: int, copies: tuple[int, ...], directory: Path) -> tuple[list[Path], list[int]]:
    """Write the S corpus (`small` bytes of documents) and, per k in `copies`, S k times over (each copy's
    paragraphs marked " (copy k)", so exact dedup keeps them); return their paths and text bytes.

    NOTE: the larger corpora repeat S rather than reading further, so all have the same document lengths and
    words: prep's memory is bounded per document bucket, row group and shard, which hold a number of
    documents or rows, so a corpus of longer documents needs more, whatever its size (the built-in corpus
    read further has documents 2.3x as long: stdlib docstrings first, then site-packages')."""
    docs, total = [], 0
    for text in read_texts(corpus, small):
        docs.append(text)
        total += len(text.encode("utf-8"))
    if not docs:
        raise SystemExit(f"bench prep: no text found in {corpus!r}")
    paths, sizes = [], []
    for times in copies:
        path = directory / f"corpus-{times}S.jsonl"
        size = 0
        with path.open("w", encoding="utf-8") as f:
            for copy in range(times):
                for i, text in enumerate(docs):
                    if copy:
                        text = "\n\n".join(f"{p} (copy {copy})" for p in text.split("\n\n"))
                    f.write(json.dumps({"id": f"doc{copy}-{i:06d}", "text": text}, ensure_ascii=False) + "\n")
                    size += len(text.encode("utf-8"))
        paths.append(path)
        sizes.append(size)
    return paths, sizes


def _measure(argv: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> tuple[dict, str]:
    """Run `argv` from the repository root; its wall time, process-tree CPU time and peak RSS, and its stdout."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err)
        # wait4 gives this child's own rusage (its waited-for descendants included), so the small run's peak RSS
        # is not the large run's, as RUSAGE_CHILDREN's running maximum would make it.
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if child.returncode not in ok:
        raise SystemExit(f"bench prep: {' '.join(argv[:4])} ... exited {child.returncode}:\n{stderr[-3000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": usage.ru_maxrss / 1024}, stdout  # ru_maxrss is KiB on Linux


def _figures(mb: float, measured: dict, pairs: int, **extra) -> dict:
    return {
        "mb": round(mb, 3),
        "mb_s_per_core": round(mb / measured["cpu_s"], 3),
        "mb_s_wall": round(mb / measured["wall_s"], 3),
        "cpu_s": round(measured["cpu_s"], 2),
        "wall_s": round(measured["wall_s"], 2),
        "peak_rss_mb": round(measured["peak_rss_mb"], 1),
        "pairs": pairs,
        **extra,
    }


def _growth(figures: dict[str, dict], labels: list[str]) -> dict:
    first, before_last, last = figures[labels[0]], figures[labels[-2]], figures[labels[-1]]

    def per_mb(a: dict, b: dict) -> float:
        return round((b["peak_rss_mb"] - a["peak_rss_mb"]) / (b["mb"] - a["mb"]), 1)

    return {
        "marginal_mb_s_per_core": round((last["mb"] - first["mb"]) / max(last["cpu_s"] - first["cpu_s"], 1e-9), 3),
        "rss_growth": round(last["peak_rss_mb"] / first["peak_rss_mb"], 2),
        "rss_mb_per_corpus_mb": per_mb(first, last),
        "rss_mb_per_corpus_mb_last_step": per_mb(before_last, last),
    }


def main(corpus: str | None, quick: bool, scale: bool = False) -> dict:
    if scale:  # >= 1 GB and millions of distinct words, 2 workers: bench/_prep_scale.py
        from bench import _prep_scale

        return _prep_scale.main(corpus, quick)
    small, copies = (500_000, (1, 4)) if quick else (2_000_000, (1, 4, 16))
    labels = [f"{k}S" if k > 1 else "S" for k in copies]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory(prefix="bench-prep-") as tmp:
        directory = Path(tmp)
        paths, sizes = _build_corpora(corpus, small, copies, directory)
        sides: dict[str, dict] = {"ours": {}, "peer": {}}
        for label, path, size in zip(labels, paths, sizes):
            mb = size / 1e6
            out = directory / f"prep-{label}"
            measured, _ = _measure(
                [sys.executable, "-m", "pipelines.prep", "--input", str(path), "--output", str(out),
                 "--vocab-size", str(VOCAB_SIZE), "--max-seq-len", str(MAX_SEQ_LEN), "--seed", str(SEED),
                 "--spill-mb", str(SPILL_MB)],
                env,
            )
            report = json.loads((out / "report.json").read_text())
            pairs = sum(split.get("rows", 0) for split in report["pairs"].values())
            sides["ours"][label] = _figures(mb, measured, pairs, docs_kept=report["total"]["kept"])
            shutil.rmtree(out)

            reference_out = directory / f"reference-{label}.arrow"
            measured, stdout = _measure([sys.executable, "-m", "bench.prep", "reference", str(path), str(reference_out)], env)
            stats = json.loads(stdout.strip().splitlines()[-1])
            sides["peer"][label] = _figures(mb, measured, stats.pop("pairs"), **stats)
            reference_out.unlink()
    for side in sides.values():
        side.update(_growth(side, labels))
    ours, peer = sides["ours"], sides["peer"]
    tiny = _tiny_records((20_000, 200_000) if quick else (100_000, 1_000_000), env)
    return {
        "corpus": corpus or "built-in docstrings",
        "sizes_mb": [round(s / 1e6, 3) for s in sizes],
        "runner": f"FnApiRunner, 1 worker, --spill-mb {SPILL_MB}",
        "peer": "in-memory BERT-style reference (bench-local): tokenizers BertWordPieceTokenizer, 1 thread",
        "ratio": round(ours[labels[-1]]["mb_s_per_core"] / peer[labels[-1]]["mb_s_per_core"], 2),
        "ratio_marginal": round(ours["marginal_mb_s_per_core"] / peer["marginal_mb_s_per_core"], 2),
        "peak_rss_mb": {"ours": [ours[k]["peak_rss_mb"] for k in labels], "peer": [peer[k]["peak_rss_mb"] for k in labels]},
        "ours": ours,
        "in_memory_reference": peer,
        "tiny_records": tiny,
    }


def _tiny_records(counts: tuple[int, int], env: dict[str, str]) -> dict:
    """Prep over `counts` records of a few bytes each, every one dropped as too_short: its peak RSS per record
    count, and `rss_growth` = peak RSS(larger) / peak RSS(smaller), ~1 when nothing is held per record."""
    figures = {}
    with tempfile.TemporaryDirectory(prefix="bench-prep-tiny-") as tmp:
        for records in counts:
            corpus, out = Path(tmp) / f"tiny-{records}.jsonl", Path(tmp) / f"out-{records}"
            with corpus.open("w") as f:
                f.writelines(f'{{"text": "tiny {i}"}}\n' for i in range(records))
            measured, _ = _measure([sys.executable, "-m", "pipelines.prep", "--input", str(corpus), "--output", str(out)],
                                   env, ok=(1,))  # exit 1: nothing to train on
            figures[str(records)] = {"peak_rss_mb": round(measured["peak_rss_mb"], 1), "cpu_s": round(measured["cpu_s"], 2),
                                     "records_per_cpu_s": round(records / measured["cpu_s"])}
    small, large = (figures[str(c)] for c in counts)
    return {**figures, "rss_growth": round(large["peak_rss_mb"] / small["peak_rss_mb"], 2)}


# ---- the peer: runs in its own process (`python -m bench.prep reference IN.jsonl OUT.arrow`) ----


def _bert_instances(documents: list[list[list[int]]], rng) -> list[tuple[list[int], list[int], bool]]:
    """BERT's create_instances_from_document over every document at once: (segment A, segment B, is_random_next)."""
    max_tokens = MAX_SEQ_LEN - 3  # [CLS] A [SEP] B [SEP]
    instances = []
    for index, document in enumerate(documents):
        # One target length per document, as BERT draws it.
        target = int(rng.integers(2, max_tokens + 1)) if rng.random() < SHORT_SEQ_PROB else max_tokens
        chunk: list[list[int]] = []
        length, i = 0, 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                a = [t for s in chunk[:a_end] for t in s]
                random_next = len(chunk) == 1 or rng.random() < 0.5
                if random_next and len(documents) > 1:
                    other = index
                    while other == index:
                        other = int(rng.integers(len(documents)))
                    b: list[int] = []
                    for sentence in documents[other][int(rng.integers(len(documents[other]))):]:
                        b.extend(sentence)
                        if len(b) >= target - len(a):
                            break
                    i -= len(chunk) - a_end  # the unused sentences start the next chunk
                else:
                    random_next = False
                    b = [t for s in chunk[a_end:] for t in s]
                while len(a) + len(b) > max_tokens:  # trim the longer side, at its front or back at random
                    longer = a if len(a) > len(b) else b
                    longer.pop(0 if rng.random() < 0.5 else -1)
                if a and b:
                    instances.append((a, b, random_next))
                chunk, length = [], 0
            i += 1
    return instances


def reference(source: str, output: str) -> dict:
    """The in-memory pass, end to end; returns what it holds and writes."""
    import numpy as np
    import pyarrow as pa
    from tokenizers import BertWordPieceTokenizer

    phases, clock = {}, time.process_time()

    def phase(name: str) -> None:
        nonlocal clock
        phases[name] = round(time.process_time() - clock, 2)
        clock = time.process_time()

    with open(source, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    documents = [[s.strip() for p in _PARAGRAPH.split(t) for s in _SENTENCE_END.split(p) if s.strip()] for t in texts]
    sentences = [s for d in documents for s in d]
    phase("read_split")
    tokenizer = BertWordPieceTokenizer(lowercase=True)
    tokenizer.train_from_iterator(sentences, vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False)
    phase("learn_vocab")
    ids = [e.ids for e in tokenizer.encode_batch(sentences, add_special_tokens=False)]
    tokenized, start = [], 0
    for d in documents:
        tokenized.append([s for s in ids[start : start + len(d)] if s])
        start += len(d)
    tokenized = [d for d in tokenized if d]
    phase("tokenize")
    rng = np.random.default_rng(SEED)
    instances = _bert_instances(tokenized, rng)
    order = rng.permutation(len(instances))  # BERT shuffles every instance in RAM before writing
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    rows = [instances[k] for k in order]
    phase("pairs")
    table = pa.table({
        "input_ids": pa.array([[cls, *a, sep, *b, sep] for a, b, _ in rows], pa.list_(pa.int32())),
        "segment_b_start": pa.array([len(a) + 2 for a, _, _ in rows], pa.int32()),
        "is_random_next": pa.array([r for _, _, r in rows], pa.bool_()),
    })
    with pa.ipc.new_file(output, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table, max_chunksize=1024)
    phase("write")
    return {"pairs": len(rows), "docs": len(tokenized), "sentences": len(sentences), "tokens": sum(map(len, ids)),
            "phase_cpu_s": phases}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "reference":
        print(json.dumps(reference(sys.argv[2], sys.argv[3])))
    else:
        sys.exit("usage: python bench/run.py prep [--corpus GLOB] [--quick]  (or: python -m bench.prep reference IN OUT)")
