"""Benchmark: clozeforge's byte-level BPE and Unigram learners beside `tokenizers`' BpeTrainer / UnigramTrainer and
sentencepiece's trainer (when it is installed: the `bench` extra), on the same text in one run.

In:  `corpus`, URL globs (bench/_corpus.py), or None: a real corpus of this machine, half the docstrings of the
     installed Python modules, half man pages (every language under /usr/share/man: English, German, Japanese, Chinese,
     Korean, Russian, ...), read as text; 90% of the documents learn, every tenth is held out.
Out: per kind (bpe, unigram) and learner, at two corpus sizes (the second 4x the first; `quick`: one small size):
  tokens_per_byte   tokens of the held-out lines, each encoded alone as prep's Tokenize does, per UTF-8 byte of them
  learn_s, cpu_s    wall and CPU seconds to learn (ours: the learner, one core, from CountWords' counts; theirs:
                    train_from_iterator / SentencePieceTrainer.train from the lines, counting included, every thread)
  count_cpu_s       ours: CPU seconds to count the words in one process (prep spreads this over its workers), with
                    CountWords' word bound (words_distinct, words_kept, ...)
  peak_mb           the learner process's peak RSS above what it held before learning (ru_maxrss; each learner runs
                    in its own process, so Rust's and C++'s allocations count too; ours holds only the kept words)
  ratio             our tokens per byte over the peer's (< 1: ours compresses better; the goal is <= 1.02)
Ours gets the words CountWords would give the learner: at most `max_words` (--vocab-max-words) by count; the peers
read every line. sentencepiece's "bpe" is not byte-level (byte_fallback=True stands in for the byte alphabet) and it
normalizes with its own nmt_nfkc; tokenizers' Unigram normalizes with our charsmap, so that row compares learners alone.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECIAL = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
_REQUEST = re.compile(r"^[.'].*$", re.M)  # a roff request line
_ESCAPE = re.compile(r"\\(f(\(..|\[[^\]]*\]|.)|\(..|\[[^\]]*\]|[-e&|^%:]|s[-+]?\d|\*(\(..|\[[^\]]*\]|.)| )")


def _man_pages(max_bytes: int):
    """Man pages of every language, roff requests and escapes dropped, in a fixed order (language, section, name)."""
    total = 0
    pages = sorted(glob.glob("/usr/share/man/*/man*/*.gz") + glob.glob("/usr/share/man/man*/*.gz"))
    by_language: dict[str, list[str]] = {}
    for path in pages:
        by_language.setdefault(path.split("/")[4], []).append(path)
    # round robin over the languages, so that a small corpus holds all of them
    queues = [iter(by_language[k]) for k in sorted(by_language)]
    while queues and total < max_bytes:
        for queue in list(queues):
            path = next(queue, None)
            if path is None:
                queues.remove(queue)
                continue
            try:
                with gzip.open(path, "rt", encoding="utf-8") as f:
                    roff = f.read()
            except (OSError, UnicodeDecodeError, EOFError):
                continue
            text = "\n".join(line.strip() for line in _ESCAPE.sub("", _REQUEST.sub("", roff)).splitlines() if line.strip())
            if len(text) > 200:
                yield text
                total += len(text.encode("utf-8"))


def _documents(corpus: str | None, max_bytes: int) -> list[str]:
    from bench._corpus import read_texts

    if corpus is not None:
        return list(read_texts(corpus, max_bytes))
    docstrings = list(read_texts(None, max_bytes // 2))
    pages = list(_man_pages(max_bytes - sum(len(d.encode("utf-8")) for d in docstrings)))
    return [d for pair in zip(docstrings, pages) for d in pair] + docstrings[len(pages):] + pages[len(docstrings):]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _count(kind_name: str, train: list[str], vocab_size: int, max_words: int, path: str) -> dict:
    """What CountWords hands the learner (at most `max_words` words, by count) and the corpus's characters, to `path`."""
    import collections

    from pipelines.tokenizer_kinds import TOKENIZER_KINDS as KINDS
    from pipelines.wordpiece.prune import word_bound

    kind = KINDS[kind_name]
    split = kind.words(kind.settings(_prep(kind_name, vocab_size)))
    counts = collections.Counter(w for text in train for w in split(text.split("\n")))
    chars = collections.Counter()
    for word, n in counts.items():
        for ch in word:
            chars[ch] += n
    bound = word_bound(collections.Counter(counts.values()), max_words)
    with open(path, "w") as f:
        json.dump({"words": [(w, n) for w, n in counts.items() if n >= bound.min_count], "chars": chars}, f)
    return bound.to_dict()


def _prep(kind_name: str, vocab_size: int):
    from pipelines import config as prep_config

    return prep_config.PrepConfig(inputs=(("x", "x"),), output="/tmp/unused", tokenizer=kind_name,
                                  wordpiece=prep_config.VocabConfig(vocab_size=vocab_size))


def _ours(kind_name: str, counted: dict, vocab_size: int, directory: str):
    from pipelines.tokenizer_kinds import TOKENIZER_KINDS as KINDS

    kind = KINDS[kind_name]
    kind.learn([tuple(wc) for wc in counted["words"]], counted["chars"], kind.settings(_prep(kind_name, vocab_size)), directory)
    return kind.encoder(directory)


def _tokenizers(kind_name: str, train: list[str], vocab_size: int):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    lines = [line for text in train for line in text.split("\n")]
    if kind_name == "bpe":
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        from pipelines.unigram.normalizer import charsmap

        tokenizer = Tokenizer(models.Unigram())
        tokenizer.normalizer = normalizers.Precompiled(charsmap())
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, unk_token="<unk>", show_progress=False)
    tokenizer.train_from_iterator(lines, trainer)

    class Encoder:
        def encode_batch(self, texts):
            return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]

    return Encoder()


def _sentencepiece(kind_name: str, train: list[str], vocab_size: int):
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    lines = [line for text in train for line in text.split("\n") if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size - 1, character_coverage=1.0,
        model_type=kind_name, byte_fallback=kind_name == "bpe", input_sentence_size=0, max_sentence_length=1 << 16,
        train_extremely_large_corpus=False, minloglevel=2, pad_id=1, bos_id=0, eos_id=2, unk_id=3)
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())

    class Encoder:
        def encode_batch(self, texts):
            return processor.encode(texts)

    return Encoder()


def child(job: dict) -> dict:
    """One job in this process: count words for ours (timed, not measured: CountWords spreads it over workers), or
    learn with one learner and encode the held-out lines."""
    with open(job["documents"]) as f:
        documents = json.load(f)
    train = [d for i, d in enumerate(documents) if i % 10 != 9]
    held = [line for i, d in enumerate(documents) if i % 10 == 9 for line in d.split("\n") if line.strip()]
    if job["learner"] == "count":
        started = time.process_time()
        bound = _count(job["kind"], train, job["vocab_size"], job["max_words"], job["counts"])
        return {"count_cpu_s": round(time.process_time() - started, 1), **bound}
    counted = None
    if job["learner"] == "clozeforge":
        with open(job["counts"]) as f:
            counted = json.load(f)
    del documents
    before = _rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as directory:
        if job["learner"] == "clozeforge":
            encoder = _ours(job["kind"], counted, job["vocab_size"], directory)
        elif job["learner"] == "tokenizers":
            encoder = _tokenizers(job["kind"], train, job["vocab_size"])
        else:
            encoder = _sentencepiece(job["kind"], train, job["vocab_size"])
        learn_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        tokens = sum(len(ids) for ids in encoder.encode_batch(held))
    held_bytes = sum(len(line.encode("utf-8")) for line in held)
    return {"tokens_per_byte": round(tokens / held_bytes, 5), "learn_s": round(learn_s, 1), "cpu_s": round(cpu_s, 1),
            "peak_mb": round(peak - before, 1), "train_mb": round(sum(len(d.encode("utf-8")) for d in train) / 1e6, 2)}


def _run(job: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT, "TOKENIZERS_PARALLELISM": "true"}
    code = "import json, sys; from bench.vocab import child; print(json.dumps(child(json.loads(sys.argv[1]))))"
    result = subprocess.run([sys.executable, "-c", code, json.dumps(job)], cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        return {"error": (result.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(corpus: str | None, quick: bool) -> dict:
    try:
        import sentencepiece  # noqa: F401

        learners = ["clozeforge", "tokenizers", "sentencepiece"]
    except ImportError:
        learners = ["clozeforge", "tokenizers"]
    sizes = [1_200_000] if quick else [6_000_000, 24_000_000]
    vocab_size = 4000 if quick else 32000
    max_words = 500_000  # prep's default --vocab-max-words
    figures: dict = {"corpus": corpus or "docstrings + man pages (all languages)", "vocab_size": vocab_size,
                     "max_words": max_words, "learners": learners}
    with tempfile.TemporaryDirectory() as scratch:
        for size in sizes:
            documents = _documents(corpus, size)
            path = os.path.join(scratch, f"documents-{size}.json")
            with open(path, "w") as f:
                json.dump(documents, f)
            for kind in ("bpe", "unigram"):
                job = {"documents": path, "kind": kind, "vocab_size": vocab_size, "max_words": max_words,
                       "counts": os.path.join(scratch, f"counts-{kind}-{size}.json")}
                counted = _run({**job, "learner": "count"})
                rows = {learner: _run({**job, "learner": learner}) for learner in learners}
                rows["clozeforge"].update(counted)
                ours = rows["clozeforge"].get("tokens_per_byte")
                for learner, row in rows.items():
                    if learner != "clozeforge" and ours and row.get("tokens_per_byte"):
                        row["ratio"] = round(ours / row["tokens_per_byte"], 4)
                figures[f"{kind}_{size // 1_000_000}mb"] = rows
    return figures
