"""SentencePiece's Unigram (pipelines/unigram/): the NFKC charsmap through `tokenizers`' own Precompiled normalizer
(every code point), the seeds and lattices against brute force, the learner (determinism, every character kept,
coverage), its compression beside tokenizers' UnigramTrainer, and the files."""

from __future__ import annotations

import collections
import itertools
import math
import random
import unicodedata

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from pipelines.documents.builtin_corpus import iter_documents
from pipelines.tokenizer_kinds import TOKENIZER_KINDS
from pipelines.unigram import darts, normalizer
from pipelines.unigram.config import UnigramConfig
from pipelines.unigram.lattice import Batch, PieceTable, expected_counts, viterbi
from pipelines.unigram.learner import digamma, learn_unigram, required_characters
from pipelines.unigram.normalizer import UnigramWords
from pipelines.unigram.seeds import seed_pieces
from schemas.tokenizer_formats import UNIGRAM, word_boundary
from tests.pipelines.mixed_text import mixed_texts


def test_the_charsmap_normalizes_every_code_point_as_its_rules_say():
    rules = normalizer.rules()
    assert rules["ﬁ"] == "fi" and rules["Ａ"] == "A" and rules["①"] == "1" and rules["\u3000"] == " "
    assert rules["\t"] == rules["\u2028"] == rules["\u200b"] == rules["▁"] == " " and rules["\x01"] == rules["\x7f"] == ""
    assert "～" not in rules and "a" not in rules and "é" not in rules
    precompiled = normalizers.Precompiled(normalizer.charsmap())
    wrong = []
    for cp in itertools.chain(range(1, 0xD800), range(0xE000, 0x110000)):
        ch = chr(cp)
        if precompiled.normalize_str(ch) != rules.get(ch, ch):
            wrong.append(hex(cp))
    assert not wrong, wrong[:10]
    for ch, target in list(rules.items())[:2000]:
        assert target in ("", " ") or target == unicodedata.normalize("NFKC", ch)


def test_the_double_array_finds_every_prefix_key():
    rng = random.Random(5)
    keys = sorted({bytes(rng.randint(1, 255) for _ in range(rng.randint(1, 6))) for _ in range(3000)})
    units = darts.build([(k, i) for i, k in enumerate(keys)])
    assert len(units) % 256 == 0
    index = {k: i for i, k in enumerate(keys)}
    for probe in keys[:500] + [bytes(rng.randint(1, 255) for _ in range(5)) for _ in range(500)]:
        expected = [index[probe[:n]] for n in range(1, len(probe) + 1) if probe[:n] in index]
        assert darts.lookup(units, probe) == expected


def test_words_start_with_the_meta_symbol_and_hold_no_white_space():
    words = UnigramWords()(["Hello  wörld\u3000ｆｕｌｌ\twidth ▁x", "next"])
    assert words == ["▁Hello", "▁wörld", "▁full", "▁width", "▁x", "▁next"]
    assert not [w for t in mixed_texts() for w in UnigramWords()([t]) if w != w.strip() or any(c.isspace() for c in w)]


def test_the_fast_word_split_is_the_pre_tokenizers():
    """UnigramWords' str.split() shortcut gives the words XLM-R's normalizer + WhitespaceSplit + Metaspace give, sentence
    by sentence, on the mixed text and on every code point between two letters."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Precompiled(normalizer.charsmap())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])

    def reference(sentences):
        return [w for s in sentences for w, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(s))]

    documents = [list(mixed_texts())[i:i + 7] for i in range(0, len(mixed_texts()), 7)]
    documents += [[f"a{chr(cp)}b c" for cp in range(start, start + 512) if not 0xD800 <= cp < 0xE000]
                  for start in range(0, 0x32000, 512)]
    split = UnigramWords()
    assert [split(d) for d in documents] == [reference(d) for d in documents]


def brute_seeds(words, counts, length):
    occurrences = collections.defaultdict(list)
    for i, w in enumerate(words):
        for s, n in itertools.product(range(len(w)), range(2, length + 1)):
            if s + n <= len(w):
                occurrences[w[s:s + n]].append((i, s))
    out = {}
    for sub, places in occurrences.items():
        after = {words[i][s + len(sub)] if s + len(sub) < len(words[i]) else None for i, s in places}
        freq = sum(counts[i] for i, _ in places)
        if freq >= 2 and (None in after or len(after) > 1):
            out[sub] = freq * len(sub)
    return out


@pytest.mark.parametrize("length", [2, 4, 16])
def test_seeds_are_the_right_maximal_substrings_scored_by_weighted_frequency(length):
    rng = random.Random(length)
    words = sorted({"▁" + "".join(rng.choice("abcab") for _ in range(rng.randint(1, 9))) for _ in range(300)})
    counts = np.array([rng.choice([1, 1, 2, 7]) for _ in words])
    expected = brute_seeds(words, counts, length)
    assert dict(seed_pieces(words, counts, max_length=length, size=10**9)) == expected
    best = sorted(expected.items(), key=lambda ps: (-ps[1], ps[0]))[:25]
    assert seed_pieces(words, counts, max_length=length, size=25) == best


def test_lattice_expectations_and_viterbi_equal_enumerating_every_cut():
    rng = random.Random(3)
    pieces = sorted({"".join(rng.choice("abc") for _ in range(rng.randint(1, 4))) for _ in range(30)} - {"c"})
    scores = np.array([-rng.uniform(1, 6) for _ in pieces])
    words = ["".join(rng.choice("abcd") for _ in range(rng.randint(1, 8))) for _ in range(60)]
    counts = np.array([rng.randint(1, 5) for _ in words], dtype=float)
    unknown = scores.min() - 10
    index = {p: i for i, p in enumerate(pieces)}

    def cuts(w):  # an uncovered character is an unknown piece, as in the lattice
        if not w:
            yield []
            return
        for n in range(1, len(w) + 1):
            if w[:n] in index:
                yield from ([w[:n], *rest] for rest in cuts(w[n:]))
        if w[0] not in index:
            yield from ([None, *rest] for rest in cuts(w[1:]))

    expected, likelihood, best = np.zeros(len(pieces)), 0.0, []
    for w, c in zip(words, counts):
        paths = list(cuts(w))
        logp = [sum(scores[index[p]] if p else unknown for p in path) for path in paths]
        z = np.logaddexp.reduce(logp)
        likelihood += c * z
        for path, lp in zip(paths, logp):
            for p in path:
                if p:
                    expected[index[p]] += c * math.exp(lp - z)
        best.append(sorted(p for p in paths[int(np.argmax(logp))] if p))
    batch = Batch(words, counts)
    edges = batch.edges(PieceTable(pieces, 16), 16)
    got, got_likelihood = expected_counts(batch, edges, scores, unknown, len(pieces))
    assert np.allclose(got, expected) and got_likelihood == pytest.approx(likelihood)
    word, piece = viterbi(batch, edges, scores, unknown)
    assert [sorted(pieces[p] for w, p in zip(word, piece) if w == i and p >= 0) for i in range(len(words))] == best


def test_digamma_is_sentencepieces():
    scipy_special = pytest.importorskip("scipy.special")
    x = np.array([0.5, 0.9, 1.0, 2.5, 7.0, 33.0, 1e6])
    assert np.allclose(digamma(x), scipy_special.digamma(x), atol=1e-9)


@pytest.fixture(scope="module")
def counted() -> tuple[collections.Counter, list[str]]:
    docs = [d["text"] for d in iter_documents(400_000)]
    cut = int(len(docs) * 0.9)
    split = UnigramWords()
    return collections.Counter(w for t in docs[:cut] + list(mixed_texts()) for w in split(t.split("\n"))), docs[cut:]


@pytest.mark.integration  # runs for tens of seconds
def test_learner_is_deterministic_and_keeps_every_character(counted, tmp_path):
    counts, _ = counted
    config = UnigramConfig(vocab_size=1000)
    pieces = learn_unigram(sorted(counts.items()), None, config)
    shuffled = list(counts.items())
    random.Random(1).shuffle(shuffled)
    assert learn_unigram(shuffled, None, config) == pieces
    tokens = [p for p, _ in pieces]
    assert tokens[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and tokens[-1] == "<mask>" and len(tokens) == len(set(tokens)) == 1000
    assert {c for w in counts for c in w} <= set(tokens)  # every character of the corpus is a piece
    TOKENIZER_KINDS["unigram"].learn(counts.items(), None, config, str(tmp_path))
    encoder = TOKENIZER_KINDS["unigram"].encoder(str(tmp_path))
    # so no text of the corpus meets <unk> (but its own literal text, an added token)
    assert 3 not in {i for t in mixed_texts() for i in encoder.encode(t.replace("<unk>", ""))}
    chars = collections.Counter({"a": 90, "b": 6, "c": 3, "d": 1})
    assert [c for c, _ in required_characters(chars, 0.95)] == ["a", "b"] and len(required_characters(chars, 1.0)) == 4


def test_a_vocabulary_smaller_than_the_alphabet_is_refused():
    with pytest.raises(ValueError, match=r"--vocab-size 8 leaves room for 3 pieces, fewer than the 5 characters"):
        learn_unigram([("▁abcd", 3)], None, UnigramConfig(vocab_size=8))


@pytest.mark.integration  # runs for tens of seconds
def test_compression_is_within_2_percent_of_tokenizers_unigram_trainer(tmp_path):
    docs = [d["text"] for d in iter_documents(400_000)]
    cut = int(len(docs) * 0.9)
    counts, held_out = collections.Counter(w for t in docs[:cut] for w in UnigramWords()(t.split("\n"))), docs[cut:]
    TOKENIZER_KINDS["unigram"].learn(counts.items(), None, UnigramConfig(vocab_size=2000), str(tmp_path))
    ours = TOKENIZER_KINDS["unigram"].encoder(str(tmp_path))
    theirs = Tokenizer(models.Unigram())
    theirs.normalizer = normalizers.Precompiled(normalizer.charsmap())
    theirs.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    words = [w for w, n in counts.items() for _ in range(n)]  # the same words, each as often as counted
    theirs.train_from_iterator(words, trainers.UnigramTrainer(vocab_size=2000, special_tokens=list(UNIGRAM.special_tokens),
                                                              unk_token="<unk>", show_progress=False))
    sentences = [s for t in held_out for s in t.split("\n")]
    our_tokens = sum(map(len, ours.encode_batch(sentences)))
    their_tokens = sum(len(e.ids) for e in theirs.encode_batch(sentences, add_special_tokens=False))
    assert our_tokens <= 1.02 * their_tokens, (our_tokens, their_tokens)


def test_files_load_as_xlm_roberta_and_mark_word_starts(tmp_path):
    pieces = learn_unigram([("▁hello", 5), ("▁help", 3), ("▁world", 2)], None, UnigramConfig(vocab_size=40))
    summary = TOKENIZER_KINDS["unigram"].learn([("▁hello", 5), ("▁help", 3), ("▁world", 2)], None, UnigramConfig(vocab_size=40), str(tmp_path))
    assert summary["tokenizer"] == "unigram" and summary["size"] == len(pieces)
    boundary = word_boundary(str(tmp_path))
    assert boundary == UNIGRAM.boundary and not boundary.continues_word("▁hel") and boundary.continues_word("lo")
