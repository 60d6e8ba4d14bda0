"""Byte-level BPE (pipelines/bpe/): GPT-2's byte alphabet and words as `tokenizers` makes them, the learner against a
plain reference BPE (merges, tie rule, determinism), its compression beside tokenizers' BpeTrainer, and the files."""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from pipelines.bpe.byte_level import BYTE_CHARS, ByteLevelWords, bytes_to_unicode
from pipelines.bpe.config import BpeConfig
from pipelines.bpe.files import write_bpe
from pipelines.bpe.learner import LEADING, learn_bpe
from pipelines.documents.builtin_corpus import iter_documents
from pipelines.tokenizer_kinds import TOKENIZER_KINDS
from schemas.tokenizer_formats import BPE, word_boundary
from tests.pipelines.mixed_text import mixed_texts

SPACE = bytes_to_unicode()[ord(" ")]
"""The symbol of a space byte, the mark of a word that follows white space."""


def test_the_byte_alphabet_is_gpt2s_as_tokenizers_maps_it():
    assert set(BYTE_CHARS) == set(pre_tokenizers.ByteLevel.alphabet()) and len(set(BYTE_CHARS)) == 256
    assert SPACE == "Ġ" and bytes_to_unicode()[ord("\n")] == "Ċ" and BYTE_CHARS[ord("a")] == "a"
    raw = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    for text in mixed_texts():
        mapped = "".join(BYTE_CHARS[b] for b in text.encode("utf-8"))
        assert "".join(w for w, _ in raw.pre_tokenize_str(text)) == mapped


def test_words_are_the_pretokenizers_per_sentence():
    words = ByteLevelWords()(["Hello world, it's 2024!", "Next  line"])
    assert words == ["Hello", "Ġworld", ",", "Ġit", "'s", "Ġ2024", "!", "Next", "Ġ", "Ġline"]
    assert ByteLevelWords()(["naïve 東京"]) == ["na" + "".join(BYTE_CHARS[b] for b in "ï".encode()) + "ve",
                                              "Ġ" + "".join(BYTE_CHARS[b] for b in "東京".encode())]


def reference_bpe(counts: dict[str, int], vocab_size: int, min_frequency: int) -> list[tuple[str, str]]:
    """Plain BPE: count every pair again at each step, merge the most frequent (ties: smallest strings) everywhere."""
    words = {w: list(w) for w in counts}
    size, merges = len(LEADING) + 256 + 1, []
    made = set()
    while size < vocab_size:
        pairs = collections.Counter()
        for w, symbols in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += counts[w]
        candidates = [(c, p) for p, c in pairs.items() if "".join(p) not in set(BPE.special_tokens)]
        if not candidates:
            break
        count, best = min(candidates, key=lambda cp: (-cp[0], cp[1]))
        if count < min_frequency:
            break
        merges.append(best)
        if "".join(best) not in made:
            made.add("".join(best))
            size += 1
        for w, symbols in words.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            words[w] = out
    return merges


@pytest.mark.parametrize("seed", range(6))
def test_learner_matches_a_plain_bpe_and_breaks_ties_by_the_strings(seed):
    rng = random.Random(seed)
    alphabet = "abcĠ<s>" if seed % 2 else "ab"  # small alphabets: many ties, repeated pairs ("a a a"), '<s' + '>'
    counts = collections.Counter({"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7))): rng.choice([1, 2, 3, 3])
                                  for _ in range(60)})
    config = BpeConfig(vocab_size=300, min_frequency=2)
    tokens, merges = learn_bpe(counts.items(), config)
    assert merges == reference_bpe(counts, config.vocab_size, config.min_frequency)
    assert tokens[:4] == list(LEADING) and tokens[4:260] == list(BYTE_CHARS) and tokens[-1] == "<mask>"
    assert len(tokens) == len(set(tokens)) <= config.vocab_size
    shuffled = list(counts.items())
    rng.shuffle(shuffled)
    assert learn_bpe(shuffled, config) == (tokens, merges)


@pytest.fixture(scope="module")
def split_corpus() -> tuple[list[str], list[str]]:
    docs = [d["text"] for d in iter_documents(1_200_000)]
    cut = int(len(docs) * 0.9)
    return docs[:cut], docs[cut:]


@pytest.mark.integration  # counts and learns 1 MB twice
def test_compression_is_within_2_percent_of_tokenizers_bpe_trainer(split_corpus, tmp_path):
    train, held_out = split_corpus
    counts = collections.Counter(w for text in train for w in ByteLevelWords()(text.split("\n")))
    config = BpeConfig(vocab_size=4000)
    summary = TOKENIZER_KINDS["bpe"].learn(counts.items(), None, config, str(tmp_path))
    ours = TOKENIZER_KINDS["bpe"].encoder(str(tmp_path))
    theirs = Tokenizer(models.BPE())
    theirs.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    theirs.decoder = decoders.ByteLevel()
    theirs.train_from_iterator([s for t in train for s in t.split("\n")], trainers.BpeTrainer(
        vocab_size=4000, min_frequency=2, special_tokens=list(BPE.special_tokens), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    sentences = [s for t in held_out for s in t.split("\n")]
    our_tokens = sum(map(len, ours.encode_batch(sentences)))
    their_tokens = sum(len(e.ids) for e in theirs.encode_batch(sentences, add_special_tokens=False))
    assert summary["size"] == 4000 and our_tokens <= 1.02 * their_tokens, (our_tokens, their_tokens)


def test_files_load_as_roberta_and_mark_word_starts(tmp_path):
    tokens, merges = learn_bpe([("Ġthe", 9), ("the", 4), ("Ġthen", 3)], BpeConfig(vocab_size=270))
    summary = write_bpe(str(tmp_path), tokens, merges, BpeConfig(vocab_size=270))
    assert summary["tokenizer"] == "bpe" and summary["size"] == len(tokens) and not summary["lowercase"]
    # (t, h) and (h, e) are both seen 16 times: the tie goes to the smaller strings
    assert (tmp_path / "merges.txt").read_text().splitlines()[:3] == ["#version: 0.2", "h e", "t he"]
    boundary = word_boundary(str(tmp_path))
    assert boundary == BPE.boundary and not boundary.continues_word("Ġthe") and boundary.continues_word("he")
    flags = boundary.continuation_flags(tokens, set(BPE.special_tokens))
    assert flags[tokens.index("Ġthe")] is False and flags[tokens.index("<s>")] is False
    assert np.array(tokens)[np.array(flags)].tolist() == [t for t in tokens if t not in BPE.special_tokens and not t.startswith("Ġ")]
