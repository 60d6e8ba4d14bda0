"""WordPiece: tokenizers parity (every code point, random Unicode, real text), learner, vocabulary files, CLI.

The reference throughout is `tokenizers` itself: BertNormalizer + BertPreTokenizer for basic tokenization,
BertWordPieceTokenizer for ids, WordPieceTrainer for vocabulary quality. Randomness is a seeded numpy
Generator per test.
"""

from __future__ import annotations

import collections
import hashlib
import json
import random

import numpy as np
import pytest
from tokenizers import BertWordPieceTokenizer, Tokenizer
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

from pipelines.commands import tokenize as encode_text
from pipelines.documents.builtin_corpus import iter_documents
from pipelines.wordpiece import (
    VocabConfig,
    WordPieceEncoder,
    basic_words,
    bert_normalize,
    learn_wordpiece,
    read_vocab_config,
    special_token_layout,
    write_vocab,
)
from pipelines.wordpiece.learner import _alphabet
from schemas.vocab import CONTINUATION, SPECIAL_TOKENS
from schemas.vocab import read_tokens as read_vocab_tokens

# (lowercase, strip_accents, handle_chinese_chars): uncased and cased BERT, and the two mixed settings.
NORMALIZATIONS = [(True, None, True), (False, None, True), (True, False, True), (False, True, False)]
NORMALIZATION_IDS = ["uncased", "cased", "lower-keep-accents", "cased-strip-no-cjk"]

# Unicode blocks the random texts draw from: scripts with marks, CJK (and its supplementary planes),
# compatibility ideographs, emoji, private use, tags, plus the Unicode 13-16 additions tokenizers treats
# differently from Python's unicodedata.
BLOCKS = [
    (0x20, 0x7F), (0x80, 0x250), (0x300, 0x370), (0x370, 0x530), (0x590, 0x700), (0x890, 0x8FF),
    (0x900, 0xE00), (0x1100, 0x1200), (0x1AB0, 0x1B00), (0x1C80, 0x1C90), (0x1DC0, 0x1E00), (0x1E00, 0x2000),
    (0x2000, 0x2070), (0x2E80, 0x3100), (0x3400, 0x3500), (0x4E00, 0x4F00), (0xA7C0, 0xA7E0), (0xAC00, 0xAD00),
    (0xE000, 0xE010), (0xF900, 0xFB50), (0xFE00, 0xFE70), (0xFF00, 0x10000), (0x10000, 0x10100),
    (0x10D40, 0x10D90), (0x11000, 0x11400), (0x11900, 0x11A00), (0x16100, 0x16140), (0x16EA0, 0x16EC0),
    (0x1D400, 0x1D800), (0x1F300, 0x1FB00), (0x20000, 0x20100), (0x2F800, 0x2F900), (0xE0000, 0xE0200),
]
SPACES = " \t\n\r\x0b\x0c\x1c\x85\xa0\u1680\u2002\u2028\u3000\u200b\ufeff\x00\ufffd"
EDGE_CASES = [
    "", " ", "a" * 100, "a" * 101, "é" * 100, "é" * 101, "ab" * 60, "x " + "b" * 101 + " y",
    "ΑΣ ΟΔΟΣ Σ", "İstanbul ı", "ß STRASSE ﬃ ǅ", "e\u0301\u0316 a\u0316\u0301", "中文字符 and 日本語",
    "emoji 🫠🥰👍🏽 👩‍👩‍👧", "[MASK] a[CLS]b [mask] [unused0] [[SEP]] [MA SK]", "tab\tnew\nline\r\nend",
    "zero\u200bwidth\u2060join", "ctrl\x01\x02\x7fchars", "nul\x00byte", "Ⅻ ① ² ½", "naïve café résumé",
]


def random_texts(rng: np.random.Generator, count: int) -> list[str]:
    """Strings mixing random code points from BLOCKS, combining marks, every kind of space and specials."""
    texts = []
    for _ in range(count):
        chars = []
        for _ in range(int(rng.integers(1, 60))):
            r = rng.random()
            if r < 0.25:
                chars.append(SPACES[rng.integers(len(SPACES))])
            elif r < 0.4:
                chars.append(chr(int(rng.integers(0x300, 0x370))))
            else:
                lo, hi = BLOCKS[rng.integers(len(BLOCKS))]
                chars.append(chr(int(rng.integers(lo, hi))))
        if rng.random() < 0.2:
            chars.insert(int(rng.integers(len(chars) + 1)), str(rng.choice(SPECIAL_TOKENS)))
        texts.append("".join(chars))
    return texts


def tokenizers_words(text: str, lowercase: bool, strip_accents: bool | None, cjk: bool) -> list[str]:
    normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=cjk, strip_accents=strip_accents, lowercase=lowercase)
    return [w for w, _ in BertPreTokenizer().pre_tokenize_str(normalizer.normalize_str(text))]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return [d["text"] for d in iter_documents(300_000)]


@pytest.fixture(scope="module")
def adversarial() -> list[str]:
    return EDGE_CASES + random_texts(np.random.default_rng(20240601), 1500)


def learned_vocab(directory, texts: list[str], config: VocabConfig) -> list[str]:
    counts: collections.Counter = collections.Counter()
    for text in texts:
        counts.update(basic_words(text, lowercase=config.lowercase, strip_accents=config.strip_accents,
                                  handle_chinese_chars=config.handle_chinese_chars))
    tokens = learn_wordpiece(counts.items(), config)
    write_vocab(str(directory), tokens, config)
    return tokens


# -- basic tokenization ------------------------------------------------------------------------------------


def _code_points() -> list[int]:
    """Planes 0-3 (all assigned blocks), tags and variation selectors, and samples of the private-use planes."""
    points = [c for c in range(0x32400) if not 0xD800 <= c < 0xE000]
    return points + list(range(0xE0000, 0xE0200)) + list(range(0xF0000, 0x110000, 251)) + [0x10FFFD]


@pytest.mark.parametrize("lowercase,strip_accents,cjk", NORMALIZATIONS, ids=NORMALIZATION_IDS)
def test_every_code_point_splits_like_tokenizers(lowercase, strip_accents, cjk):
    # Each code point sits alone between two letters, as its own text (our fast paths are chosen per text).
    # tokenizers gets 2,000 such units joined by spaces, which no normalization step crosses, in one call.
    points = _code_points()
    wrong = []
    for start in range(0, len(points), 2000):
        units = [f"a{chr(c)}b" for c in points[start : start + 2000]]
        ours = [basic_words(u, lowercase=lowercase, strip_accents=strip_accents, handle_chinese_chars=cjk) for u in units]
        if sum(ours, []) != tokenizers_words(" ".join(units), lowercase, strip_accents, cjk):
            wrong += [f"{ord(u[1]):04X}" for u, w in zip(units, ours) if w != tokenizers_words(u, lowercase, strip_accents, cjk)]
    assert not wrong, f"{len(wrong)} code points differ from tokenizers, first: {wrong[:40]}"


@pytest.mark.parametrize("lowercase,strip_accents,cjk", NORMALIZATIONS, ids=NORMALIZATION_IDS)
def test_random_unicode_splits_like_tokenizers(adversarial, lowercase, strip_accents, cjk):
    flags = dict(lowercase=lowercase, strip_accents=strip_accents, handle_chinese_chars=cjk)
    normalizer = BertNormalizer(clean_text=True, **flags)
    for text in adversarial:
        assert basic_words(text, **flags) == tokenizers_words(text, lowercase, strip_accents, cjk), ascii(text)
        assert bert_normalize(text, **flags) == normalizer.normalize_str(text), ascii(text)


# -- encoder -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lowercase,strip_accents,cjk", NORMALIZATIONS, ids=NORMALIZATION_IDS)
def test_encoder_ids_equal_tokenizers(tmp_path, corpus, adversarial, lowercase, strip_accents, cjk):
    config = VocabConfig(vocab_size=2500, lowercase=lowercase, strip_accents=strip_accents, handle_chinese_chars=cjk, num_unused=3)
    learned_vocab(tmp_path, corpus[:40] + adversarial[:600], config)
    encoder = WordPieceEncoder.from_directory(str(tmp_path))
    reference = BertWordPieceTokenizer(
        str(tmp_path / "vocab.txt"), lowercase=lowercase, strip_accents=strip_accents, handle_chinese_chars=cjk
    )
    texts = adversarial + corpus
    expected = [e.ids for e in reference.encode_batch(texts, add_special_tokens=False)]
    got = encoder.encode_batch(texts)
    wrong = [ascii(t[:80]) for t, a, b in zip(texts, got, expected) if a != b]
    assert not wrong, f"{len(wrong)} of {len(texts)} texts differ, e.g. {wrong[:3]}"
    # The word cache changes speed, never ids.
    small = WordPieceEncoder.from_directory(str(tmp_path), cache_size=10)
    assert small.encode_batch(texts[:300]) == expected[:300]
    # A batch of ASCII texts (a document's sentences) goes through one regex pass: the same ids, whatever
    # else the batch holds (controls, NULs, special tokens, empty texts, a non-ASCII text) and however small
    # the cache is.
    rng = random.Random(5)
    pieces = ["word", "Two", " ", "\t", "\n", "\r", "\x00", "\x0b", "\x7f", "[MASK]", "[", "]", "##", ",", "é", "",
              "12", "x" * 120]
    batches = [corpus[i : i + 9] for i in range(0, len(corpus), 9)]
    batches += [["".join(rng.choices(pieces, k=rng.randint(0, 12))) for _ in range(rng.randint(1, 6))] for _ in range(400)]
    for encoder_ in (encoder, small):
        for batch in batches:
            want = [e.ids for e in reference.encode_batch(batch, add_special_tokens=False)]
            assert encoder_.encode_batch(batch) == want, [ascii(t[:80]) for t in batch]


def test_special_tokens_and_long_words(tmp_path, corpus):
    config = VocabConfig(vocab_size=1500)
    learned_vocab(tmp_path, corpus[:30], config)
    encoder = WordPieceEncoder.from_directory(str(tmp_path))
    ids = {t: encoder.vocab[t] for t in SPECIAL_TOKENS}
    the = encoder.vocab["the"]
    assert encoder.encode("the [MASK] the[SEP]the") == [the, ids["[MASK]"], the, ids["[SEP]"], the]
    assert ids["[MASK]"] not in encoder.encode("the [mask]")  # matched on the raw text, before lowercasing
    assert encoder.encode("e" * 101) == [ids["[UNK]"]]
    assert ids["[UNK]"] not in encoder.encode("e" * 100)
    assert encoder.encode("the \u2603\u2603 the") == [the, ids["[UNK]"], the]  # a character outside the vocabulary


# -- learner -----------------------------------------------------------------------------------------------


def reference_learner(word_counts, config: VocabConfig) -> list[str]:
    """Textbook BPE-with-## that recounts every pair after every merge: slow, obviously right."""
    counts = collections.Counter()
    for word, count in word_counts:
        counts[word] += count
    vocab = special_token_layout(config.num_unused)
    alphabet = _alphabet(counts, config.limit_alphabet)
    vocab += alphabet
    vocab += [CONTINUATION + c for c in sorted({c for w in counts for c in w[1:]} & set(alphabet))]
    usable = sorted(w for w in counts if set(w) <= set(alphabet) and len(w) <= config.max_input_chars_per_word)
    words = [[w[0]] + [CONTINUATION + c for c in w[1:]] for w in usable]
    while len(vocab) < config.vocab_size:
        pairs = collections.Counter()
        for symbols, word in zip(words, usable):
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += counts[word]
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < config.min_frequency:
            break
        merged = best[0] + best[1][len(CONTINUATION) :]
        if merged not in vocab:
            vocab.append(merged)
        for k, symbols in enumerate(words):
            out, j = [], 0
            while j < len(symbols):
                if tuple(symbols[j : j + 2]) == best:
                    out.append(merged)
                    j += 2
                else:
                    out.append(symbols[j])
                    j += 1
            words[k] = out
    return vocab


def test_learner_matches_reference_bpe():
    rng = np.random.default_rng(7)
    for _ in range(40):
        alphabet = str(rng.choice(["ab", "abc", "aab", "abcd"]))
        counts = collections.Counter()
        for _ in range(int(rng.integers(3, 50))):
            counts["".join(rng.choice(list(alphabet), int(rng.integers(1, 12))))] += int(rng.integers(1, 6))
        config = VocabConfig(
            vocab_size=int(rng.integers(12, 70)), min_frequency=int(rng.integers(1, 4)), limit_alphabet=int(rng.integers(2, 5))
        )
        assert learn_wordpiece(counts.items(), config) == reference_learner(counts.items(), config), (dict(counts), config)


def test_learner_is_deterministic(tmp_path, corpus):
    counts = collections.Counter()
    for text in corpus[:60]:
        counts.update(basic_words(text, lowercase=True))
    config = VocabConfig(vocab_size=1200)
    forward = learn_wordpiece(sorted(counts.items()), config)
    # Shuffled, and with every count split over two entries: the same vocabulary, byte for byte.
    rng = np.random.default_rng(3)
    split = [(w, c // 2) for w, c in counts.items()] + [(w, c - c // 2) for w, c in counts.items()]
    shuffled = [split[i] for i in rng.permutation(len(split))]
    first = write_vocab(str(tmp_path / "a"), forward, config)
    assert write_vocab(str(tmp_path / "b"), learn_wordpiece(shuffled, config), config) == first
    assert (tmp_path / "a" / "vocab.txt").read_bytes() == (tmp_path / "b" / "vocab.txt").read_bytes()
    assert len(forward) == 1200 and len(set(forward)) == 1200


def test_quality_matches_wordpiece_trainer(corpus):
    train, held_out = corpus[: len(corpus) * 4 // 5], corpus[len(corpus) * 4 // 5 :]
    config = VocabConfig(vocab_size=3000)
    counts = collections.Counter()
    for text in train:
        counts.update(basic_words(text, lowercase=True))
    ours = WordPieceEncoder(learn_wordpiece(counts.items(), config), lowercase=True)
    theirs = BertWordPieceTokenizer(lowercase=True)
    theirs.train_from_iterator(
        train, vocab_size=3000, min_frequency=2, limit_alphabet=1000, special_tokens=list(SPECIAL_TOKENS), show_progress=False
    )
    for texts in (train, held_out):
        words = sum(len(basic_words(t, lowercase=True)) for t in texts)
        our_ids = ours.encode_batch(texts)
        their_ids = [e.ids for e in theirs.encode_batch(texts, add_special_tokens=False)]
        ours_per_word = sum(map(len, our_ids)) / words
        theirs_per_word = sum(map(len, their_ids)) / words
        assert abs(ours_per_word / theirs_per_word - 1) < 0.02, (ours_per_word, theirs_per_word)
        our_unk = sum(x.count(ours.unk_id) for x in our_ids)
        their_unk = sum(x.count(theirs.token_to_id("[UNK]")) for x in their_ids)
        assert our_unk <= their_unk


# -- vocabulary files --------------------------------------------------------------------------------------


def test_special_token_layout():
    assert special_token_layout() == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    bert = special_token_layout(99)
    assert [bert.index(t) for t in SPECIAL_TOKENS] == [0, 100, 101, 102, 103]
    assert bert[1] == "[unused0]" and bert[99] == "[unused98]"
    tokens = learn_wordpiece([("hello", 5), ("help", 3)], VocabConfig(vocab_size=200, num_unused=99))
    assert tokens[:104] == bert


def test_vocab_directory_round_trip_on_memory_fs(corpus):
    config = VocabConfig(vocab_size=800, lowercase=False, num_unused=2)
    counts = collections.Counter()
    for text in corpus[:20]:
        counts.update(basic_words(text, lowercase=False))
    tokens = learn_wordpiece(counts.items(), config)
    url = "memory://wordpiece-test/vocab"
    summary = write_vocab(url, tokens, config)
    vocab_bytes = "".join(t + "\n" for t in tokens).encode()
    sha256 = hashlib.sha256(vocab_bytes).hexdigest()
    assert summary == {"file": "vocab.txt", "sha256": sha256, "size": len(tokens), "lowercase": False, "tokenizer": "wordpiece"}
    assert read_vocab_tokens(url) == tokens
    assert read_vocab_config(url) == config


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_tokenizer_json_loads_in_tokenizers_and_transformers(tmp_path, corpus, lowercase):
    transformers = pytest.importorskip("transformers")
    config = VocabConfig(vocab_size=1500, lowercase=lowercase)
    learned_vocab(tmp_path, corpus[:30], config)
    encoder = WordPieceEncoder.from_directory(str(tmp_path))
    texts = EDGE_CASES + corpus[30:40]
    ids = encoder.encode_batch(texts)
    loaded = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert [e.ids for e in loaded.encode_batch(texts, add_special_tokens=False)] == ids
    cls, sep = encoder.vocab["[CLS]"], encoder.vocab["[SEP]"]
    pair = loaded.encode("Hello there", "General Kenobi")
    a, b = encoder.encode("Hello there"), encoder.encode("General Kenobi")
    assert pair.ids == [cls, *a, sep, *b, sep]
    assert pair.type_ids == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    fast = transformers.BertTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"), do_lower_case=lowercase)
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for hf in (fast, auto):
        assert [hf(t)["input_ids"] for t in texts] == [[cls, *x, sep] for x in ids]


def test_config_falls_back_to_a_bert_tokenizer_json(tmp_path):
    # A HuggingFace BERT directory has vocab.txt and tokenizer.json but no vocab_config.json.
    tokens = special_token_layout() + ["hello", "##s", "world"]
    saved = BertWordPieceTokenizer({t: i for i, t in enumerate(tokens)}, lowercase=False, strip_accents=True)
    saved.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    config = read_vocab_config(str(tmp_path))
    assert (config.lowercase, config.strip_accents, config.vocab_size) == (False, True, len(tokens))
    expected = saved.encode("hellos World", add_special_tokens=False).ids
    assert WordPieceEncoder.from_directory(str(tmp_path)).encode("hellos World") == expected
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="vocab_config.json"):
        read_vocab_config(str(tmp_path))


def test_vocab_config_validation(tmp_path):
    with pytest.raises(ValueError, match="valid keys"):
        VocabConfig.from_dict({"vocab_size": 100, "lowercas": True})
    for bad in ({"vocab_size": 4}, {"min_frequency": 0}, {"num_unused": -1}, {"max_token_chars": 1}):
        with pytest.raises(ValueError):
            VocabConfig(**bad)
    with pytest.raises(ValueError, match="special tokens"):
        write_vocab(str(tmp_path), ["a", "b"], VocabConfig())


# -- clozeforge tokenize -----------------------------------------------------------------------------------


def test_tokenize_cli(tmp_path, corpus, capsys):
    vocab = tmp_path / "vocab"
    learned_vocab(vocab, corpus[:20], VocabConfig(vocab_size=900))
    encoder = WordPieceEncoder.from_directory(str(vocab))
    lines = ["Hello world!", "", "naïve [MASK] text", "a lone\rcarriage return stays in its line"]
    (tmp_path / "a.txt").write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"body": t}) + "\n" for t in corpus[:3]), encoding="utf-8")

    def run(*args: str) -> list[list[int]]:
        assert encode_text.main(["--vocab", str(vocab), "--output", str(tmp_path / "out.jsonl"), *args]) == 0
        return [json.loads(line)["ids"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]

    assert run("--input", str(tmp_path / "*.txt")) == [encoder.encode(t) for t in lines]
    assert run("--input", str(tmp_path / "a.txt"), "--per", "document") == [encoder.encode("\n".join(lines) + "\n")]
    assert run("--input", str(tmp_path / "b.jsonl"), "--text-field", "body") == encoder.encode_batch(corpus[:3])
    capsys.readouterr()

    missing = [
        ["--vocab", str(tmp_path / "nowhere"), "--input", str(tmp_path / "a.txt"), "--output", str(tmp_path / "x")],
        ["--vocab", str(vocab), "--input", str(tmp_path / "*.nothing"), "--output", str(tmp_path / "x")],
        ["--vocab", str(vocab), "--input", str(tmp_path / "absent.txt"), "--output", str(tmp_path / "x")],  # no glob
        ["--vocab", str(vocab), "--input", str(tmp_path / "b.jsonl"), "--output", str(tmp_path / "x")],  # no "text" field
    ]
    for argv in missing:
        assert encode_text.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("clozeforge tokenize: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x").exists() or (tmp_path / "x").read_text() == ""
