"""Benchmark: clozeforge's WordPiece (learner + encoder) against `tokenizers` on the same text, in one run.

In:  `corpus`, URL globs of .txt / .jsonl(.gz|.zst) files (comma-separated; a .txt file is one document),
     or None for the built-in docstring corpus (10 MB, or 1 MB with `quick`).
Out: encoder throughput in MB of UTF-8 text per second, and vocabulary quality:
  clozeforge_mb_s / tokenizers_mb_s / ratio     one core each: our encoder with a fresh (cold) word cache,
                                                tokenizers' encode_batch_fast with TOKENIZERS_PARALLELISM=false;
  clozeforge_warm_mb_s                          our encoder again over the same text (word cache filled);
  ids_identical, mismatched_docs                our ids against tokenizers' for every document;
  all_cores_*                                   `cores` processes of our encoder (each encodes its share, as
                                                Beam workers do) against tokenizers with RAYON_NUM_THREADS=cores;
  tokens_per_word, unk_rate (+ tokenizers_*)    our learner + encoder against tokenizers' WordPieceTrainer +
                                                its encoder, same vocab size and settings, both trained on the
                                                first 90% of the documents and measured on the other 10%;
  learn_s, tokenizers_learn_s                   time to count words and learn (ours: one core, pure Python).
Best of `repeats` timings. One-core figures are CPU seconds (process_time), so other load on a shared
machine does not skew them; all-cores figures are wall-clock. Both encoders use our learned vocabulary.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import tempfile
import time

from schemas.vocab import SPECIAL_TOKENS, VOCAB_FILE

SPECIAL = list(SPECIAL_TOKENS)


def _texts(corpus: str | None, max_bytes: int) -> tuple[list[str], str]:
    if corpus is None:
        from pipelines.documents.builtin_corpus import iter_documents

        return [d["text"] for d in iter_documents(max_bytes)], f"builtin docstrings ({max_bytes / 1e6:g} MB cap)"
    from pipelines.commands.tokenize import iter_texts

    texts, total = [], 0
    for text in iter_texts(corpus.split(","), per="document"):
        texts.append(text)
        total += len(text.encode("utf-8"))
        if total >= max_bytes:
            break
    return texts, corpus


def _best(fn, repeats: int, clock=time.process_time) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = clock()
        fn()
        best = min(best, clock() - started)
    return best


_worker_encoder = None


def _worker_init(directory: str) -> None:
    global _worker_encoder
    from pipelines.wordpiece import WordPieceEncoder

    _worker_encoder = WordPieceEncoder.from_directory(directory)


def _worker_encode(texts: list[str]) -> int:
    return sum(len(ids) for ids in _worker_encoder.encode_batch(texts))


def _per_word(ids: list[list[int]], unk_id: int, words: int) -> tuple[float, float]:
    """(tokens per word, share of tokens that are [UNK])."""
    tokens = sum(len(x) for x in ids)
    return tokens / words, sum(x.count(unk_id) for x in ids) / max(tokens, 1)


def main(corpus: str | None, quick: bool) -> dict:
    # tokenizers reads TOKENIZERS_PARALLELISM per call, and rayon sizes its pool from RAYON_NUM_THREADS
    # the first time it runs: so the one-thread runs come first, the multi-threaded ones after.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import BertWordPieceTokenizer

    from pipelines.wordpiece import (
        VocabConfig,
        WordPieceEncoder,
        basic_words,
        learn_wordpiece,
        write_vocab,
    )

    texts, source = _texts(corpus, 1_000_000 if quick else 10_000_000)
    train, held_out = texts[: len(texts) * 9 // 10], texts[len(texts) * 9 // 10 :]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    repeats = 2 if quick else 3
    config = VocabConfig(vocab_size=8000 if quick else 30522)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

    started = time.perf_counter()
    counts: collections.Counter = collections.Counter()
    for text in train:
        counts.update(basic_words(text, lowercase=config.lowercase))
    tokens = learn_wordpiece(counts.items(), config)
    learn_s = time.perf_counter() - started

    with tempfile.TemporaryDirectory() as directory:
        write_vocab(directory, tokens, config)
        encoder = WordPieceEncoder.from_directory(directory)
        theirs = BertWordPieceTokenizer(os.path.join(directory, VOCAB_FILE), lowercase=config.lowercase)._tokenizer

        ours_s = _best(lambda: WordPieceEncoder.from_directory(directory).encode_batch(texts), repeats)
        ours_warm_s = _best(lambda: encoder.encode_batch(texts), repeats)
        theirs_s = _best(lambda: theirs.encode_batch_fast(texts, add_special_tokens=False), repeats)
        our_ids = encoder.encode_batch(texts)
        their_ids = [e.ids for e in theirs.encode_batch_fast(texts, add_special_tokens=False)]
        mismatched = sum(a != b for a, b in zip(our_ids, their_ids))

        chunks = [texts[i : i + 16] for i in range(0, len(texts), 16)]
        with multiprocessing.get_context("fork").Pool(cores, _worker_init, (directory,)) as pool:
            pool.map(_worker_encode, [[t] for t in texts[:cores]])  # start the workers outside the timing
            ours_all_s = _best(lambda: pool.map(_worker_encode, chunks, chunksize=1), 1, time.perf_counter)
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
        os.environ["RAYON_NUM_THREADS"] = str(cores)
        theirs_all_s = _best(lambda: theirs.encode_batch_fast(texts, add_special_tokens=False), repeats, time.perf_counter)

    trainer = BertWordPieceTokenizer(lowercase=config.lowercase)
    started = time.perf_counter()
    trainer.train_from_iterator(
        train,
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        limit_alphabet=config.limit_alphabet,
        special_tokens=SPECIAL,
        show_progress=False,
    )
    theirs_learn_s = time.perf_counter() - started
    words = sum(len(basic_words(t, lowercase=config.lowercase)) for t in held_out)
    ours_tpw, ours_unk = _per_word(our_ids[len(train) :], encoder.unk_id, words)
    trained_ids = [e.ids for e in trainer._tokenizer.encode_batch_fast(held_out, add_special_tokens=False)]
    theirs_tpw, theirs_unk = _per_word(trained_ids, trainer.token_to_id("[UNK]"), words)

    return {
        "corpus": source,
        "mb": round(mb, 2),
        "documents": len(texts),
        "vocab_size": config.vocab_size,
        "clozeforge_mb_s": round(mb / ours_s, 2),
        "tokenizers_mb_s": round(mb / theirs_s, 2),
        "ratio": round(theirs_s / ours_s, 2),
        "clozeforge_warm_mb_s": round(mb / ours_warm_s, 2),
        "ids_identical": mismatched == 0,
        "mismatched_docs": mismatched,
        "cores": cores,
        "all_cores_clozeforge_mb_s": round(mb / ours_all_s, 2),
        "all_cores_tokenizers_mb_s": round(mb / theirs_all_s, 2),
        "all_cores_ratio": round(theirs_all_s / ours_all_s, 2),
        "held_out_words": words,
        "tokens_per_word": round(ours_tpw, 4),
        "tokenizers_tokens_per_word": round(theirs_tpw, 4),
        "tokens_per_word_ratio": round(ours_tpw / theirs_tpw, 4),
        "unk_rate": round(ours_unk, 6),
        "tokenizers_unk_rate": round(theirs_unk, 6),
        "vocab_tokens": len(tokens),
        "tokenizers_vocab_tokens": trainer.get_vocab_size(),
        "learn_s": round(learn_s, 2),
        "tokenizers_learn_s": round(theirs_learn_s, 2),
    }
