"""Benchmark: our pair collation + online masking against transformers' DataCollatorForLanguageModeling.

In:  `corpus`, a glob of .txt / .jsonl(.gz|.zst) files ({"text": ...} per line), or None for the built-in
     docstring corpus; both are encoded with a WordPiece vocabulary that `tokenizers` trains here on the
     same text. With `quick` and no corpus: random ids with BERT-like pair lengths (no training).
Out: sequences/s on one core at seq 128, batch 64, on the same pairs: `stream` is the trainer's whole
     input path (the pairs written as a zstd Arrow shard + manifest, read back through ShardStream:
     checksum, decode, collate, mask, torch), `ours` is collation + masking from in-memory id lists;
     `ratio` = stream / theirs (the headline), `collate_mask_ratio` = ours / theirs; also masking-only
     and collation-only microseconds per sequence.

Ours: `collate_pairs` (token id arrays of A and B -> padded batch) + `Masker` ("bert", 15%, 80/10/10)
+ `torch.from_numpy`. Theirs: `DataCollatorForLanguageModeling(mlm_probability=0.15,
return_tensors="pt")` on features that already hold [CLS] A [SEP] B [SEP], token_type_ids and
special_tokens_mask (what run_mlm.py's tokenization yields), built outside the timed loop: their best case.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench._corpus import read_texts
from schemas.vocab import SPECIAL_TOKENS as VOCAB_SPECIALS
from schemas.vocab import VOCAB_FILE
from trainer.data.collate import collate_pairs
from trainer.masking import Masker, MaskingConfig, continuation_from_vocab

SEQ_LEN, BATCH = 128, 64
SHORT_SEQ_PROB = 0.1  # BERT's share of pairs shorter than max_seq_len
SPECIAL_TOKENS = list(VOCAB_SPECIALS)


def _pair_lengths(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Token counts of A and B as BERT's instance builder makes them (target max_seq_len - 3, 10% shorter)."""
    total = np.where(rng.random(count) < SHORT_SEQ_PROB, rng.integers(2, SEQ_LEN - 2, count), SEQ_LEN - 3)
    len_a = rng.integers(1, total)
    return len_a, total - len_a


def _random_data(rng: np.random.Generator, pairs: int, vocab_size: int = 30522):
    vocab = SPECIAL_TOKENS + [f"w{i}" if i % 4 else f"##w{i}" for i in range(vocab_size - len(SPECIAL_TOKENS))]
    len_a, len_b = _pair_lengths(rng, pairs)
    ids = rng.integers(len(SPECIAL_TOKENS), vocab_size, int((len_a + len_b).sum())).astype(np.uint16)
    chunks = np.split(ids, np.cumsum(np.stack([len_a, len_b], 1).ravel())[:-1])
    return vocab, chunks[0::2], chunks[1::2], "random ids"


def _text_data(rng: np.random.Generator, corpus: str | None, max_bytes: int, pairs: int, vocab_size: int):
    from tokenizers import BertWordPieceTokenizer

    texts = list(read_texts(corpus, max_bytes))
    if not texts:
        raise SystemExit(f"no text found in {corpus!r}")
    tokenizer = BertWordPieceTokenizer(lowercase=True)
    tokenizer.train_from_iterator(texts, vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    encoded = tokenizer.encode_batch(texts, add_special_tokens=False)
    stream = np.concatenate([np.asarray(e.ids, np.uint16) for e in encoded])  # one token stream
    len_a, len_b = _pair_lengths(rng, pairs)
    starts = rng.integers(0, stream.size - SEQ_LEN, pairs)  # contiguous text; NSP labels do not matter here
    pairs_a = [stream[s : s + a] for s, a in zip(starts, len_a)]
    pairs_b = [stream[s + a : s + a + b] for s, a, b in zip(starts, len_a, len_b)]
    vocab = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
    return vocab, pairs_a, pairs_b, f"{corpus or 'built-in docstrings'}, {len(texts)} docs, {stream.size} tokens"


def _their_collator(vocab: list[str]):
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / VOCAB_FILE).write_text("\n".join(vocab) + "\n", encoding="utf-8")
        tokenizer = BertTokenizerFast(vocab_file=str(Path(tmp) / VOCAB_FILE))
    return DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt", seed=0)


def _time_batches(steps: dict[str, object], batches: int, rounds: int = 5) -> dict[str, float]:
    """Median seconds per batch of each step(i), over `rounds` interleaved rounds of `batches` calls.

    Interleaving and the median keep a load spike on a shared machine from landing on one side only."""
    per_round: dict[str, list[float]] = {name: [] for name in steps}
    for name, step in steps.items():
        step(0)  # warm-up
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for i in range(batches):
                step(i)
            per_round[name].append((time.perf_counter() - start) / batches)
    return {name: float(np.median(times)) for name, times in per_round.items()}


def _shard_stream(tmp: str, vocab: list[str], pairs_a, pairs_b, is_random_next, masker: Masker):
    """The same pairs as one zstd Arrow shard + manifest on local disk, read back through ShardStream."""
    from schemas import Manifest
    from trainer.data import ShardStream

    _write_shard(tmp, vocab, pairs_a, pairs_b, is_random_next)
    return iter(ShardStream(Manifest.read(f"{tmp}/pairs"), split="train", batch_size=BATCH, masker=masker, seed=0))


def _write_shard(tmp: str, vocab: list[str], pairs_a, pairs_b, is_random_next) -> str:
    """The pairs as one zstd Arrow shard + manifest under tmp/pairs (returned), the vocabulary under tmp/vocab."""
    import hashlib
    import os

    import pyarrow as pa

    from schemas import Manifest, ShardInfo, pairs_schema

    os.makedirs(f"{tmp}/vocab"), os.makedirs(f"{tmp}/pairs")
    vocab_bytes = "".join(t + "\n" for t in vocab).encode()
    with open(f"{tmp}/vocab/{VOCAB_FILE}", "wb") as f:
        f.write(vocab_bytes)
    schema = pairs_schema(len(vocab))
    n = len(pairs_a)
    columns = {"tokens_a": [a.tolist() for a in pairs_a], "tokens_b": [b.tolist() for b in pairs_b],
               "is_random_next": is_random_next.tolist(), "num_tokens": [len(a) + len(b) + 3 for a, b in zip(pairs_a, pairs_b)],
               "source": ["bench"] * n, "doc_id": [str(i) for i in range(n)]}
    table = pa.table(columns, schema=schema)
    path = f"{tmp}/pairs/train-00000-of-00001.arrow"
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        for batch in table.to_batches(max_chunksize=1024):
            writer.write_batch(batch)
    with open(path, "rb") as f:
        data = f.read()
    ids = {t: i for i, t in enumerate(vocab)}
    Manifest(
        vocab={"file": f"../vocab/{VOCAB_FILE}", "sha256": hashlib.sha256(vocab_bytes).hexdigest(), "size": len(vocab), "lowercase": True},
        special_tokens={t: ids[t] for t in SPECIAL_TOKENS},
        max_seq_len=SEQ_LEN,
        shards=(ShardInfo("train-00000-of-00001.arrow", "train", n, len(data), hashlib.sha256(data).hexdigest(), {"bench": n}),),
        config={"batch_rows": 1024},
    ).write(f"{tmp}/pairs")
    return f"{tmp}/pairs"


def main(corpus: str | None, quick: bool) -> dict:
    import torch

    torch.set_num_threads(1)  # per core: both sides run single-threaded
    rng = np.random.default_rng(0)
    batches = 20 if quick else 100  # per timing round, 5 rounds
    pairs = batches * BATCH
    if corpus is None and quick:
        vocab, pairs_a, pairs_b, data = _random_data(rng, pairs)
    else:
        vocab, pairs_a, pairs_b, data = _text_data(rng, corpus, 1_000_000 if quick else 8_000_000, pairs,
                                                   8000 if quick else 30522)
    ids = {t: i for i, t in enumerate(vocab)}
    cls_id, sep_id, pad_id, mask_id = ids["[CLS]"], ids["[SEP]"], ids["[PAD]"], ids["[MASK]"]
    special_ids = [ids[t] for t in SPECIAL_TOKENS]
    is_random_next = rng.random(pairs) < 0.5
    continuation = continuation_from_vocab(vocab)

    def batch_slice(i: int) -> slice:
        return slice((i % batches) * BATCH, (i % batches + 1) * BATCH)

    def collate(i: int) -> dict[str, np.ndarray]:
        s = batch_slice(i)
        return collate_pairs(pairs_a[s], pairs_b[s], is_random_next[s], cls_id=cls_id, sep_id=sep_id,
                             pad_id=pad_id, max_seq_len=SEQ_LEN)

    maskers = {
        name: Masker(MaskingConfig(strategy=name), vocab_size=len(vocab), special_ids=special_ids,
                     mask_id=mask_id, continuation=continuation)
        for name in ("bert", "wwm", "span")
    }
    mask_rng = np.random.default_rng(1)

    def ours(i: int) -> None:
        batch = collate(i)
        batch.update(maskers["bert"](batch["input_ids"], batch.pop("special_mask"), mask_rng))
        {k: torch.from_numpy(v) for k, v in batch.items()}

    collator = _their_collator(vocab)
    features = [
        {"input_ids": [cls_id, *a.tolist(), sep_id, *b.tolist(), sep_id],
         "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
         "special_tokens_mask": [1] + [0] * len(a) + [1] + [0] * len(b) + [1]}
        for a, b in zip(pairs_a, pairs_b)
    ]

    def theirs(i: int) -> None:
        collator(features[batch_slice(i)])

    collated = [collate(i) for i in range(batches)]

    def mask_only(masker: Masker):
        return lambda i: masker(collated[i % batches]["input_ids"], collated[i % batches]["special_mask"], mask_rng)

    import tempfile

    tmp = tempfile.mkdtemp(prefix="bench-loader-")
    stream = _shard_stream(tmp, vocab, pairs_a, pairs_b, is_random_next, maskers["bert"])

    def from_shards(i: int) -> None:
        next(stream)  # read + decode a record batch, collate, mask, to torch: the trainer's whole input path

    seconds = _time_batches({"stream": from_shards, "ours": ours, "theirs": theirs, "collate": collate,
                             **{f"mask_{name}": mask_only(m) for name, m in maskers.items()}}, batches)
    result = {
        "data": data,
        "vocab_size": len(vocab),
        "seq_len": SEQ_LEN,
        "batch": BATCH,
        "stream_seqs_per_s": round(BATCH / seconds["stream"]),
        "ours_seqs_per_s": round(BATCH / seconds["ours"]),
        "theirs_seqs_per_s": round(BATCH / seconds["theirs"]),
        # the headline: shards on disk → masked torch batch, against the collator handed ready token lists
        "ratio": round(seconds["theirs"] / seconds["stream"], 2),
        "collate_mask_ratio": round(seconds["theirs"] / seconds["ours"], 2),
        "collate_us_per_seq": round(seconds["collate"] / BATCH * 1e6, 2),
    }
    for name in maskers:
        result[f"mask_{name}_us_per_seq"] = round(seconds[f"mask_{name}"] / BATCH * 1e6, 2)
    return result
