"""`prep --vocab HF_DIR`: a HuggingFace BERT directory's vocabulary (vocab.txt, tokenizer_config.json's lowercasing
and accent stripping, tokenizer.json where present) gives prep's ids equal to AutoTokenizer.from_pretrained(HF_DIR)'s,
in bert-base-uncased's id layout ([PAD]=0, [unused0..98], [UNK]=100, [CLS]=101 ...), cased and uncased, on mixed-script
text. The directories are made locally by `tokenizers` and saved by transformers (no download)."""

from __future__ import annotations

import json
import os

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from pipelines.stages.learn_vocabulary import check_vocab, reuse_vocab  # noqa: E402
from pipelines.wordpiece import WordPieceEncoder, special_token_layout  # noqa: E402

TEXTS = [
    "Café owners in Zürich serve coffee; the Museum opens at nine o'clock.",
    "Ἀθῆναι καὶ Σπάρτη ήταν πόλεις. Москва — столица России, а Київ — України.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "القاهرة عاصمة مصر. ירושלים. नई दिल्ली भारत की राजधानी है। Ελληνικά ÅNGSTRÖM naïve résumé",
    "Emoji 🫠 and symbols ½ ² ① ß ﬃ İstanbul, [MASK] stays special, tabs\tand\nnew lines.",
]
HELD_OUT = ("Zürich's MUSEUM in Москва opens; 東京 and 서울 and القاهرة meet naïve Ἀθῆναι 🫠, "
            "unseen words like Xylophonist and Ωmega, [CLS] literal, ÉCOLE élève.")


def hf_directory(path, *, lowercase: bool, keep_tokenizer_json: bool = True) -> str:
    """A BERT tokenizer with bert-base's special-token layout, trained and saved by `tokenizers`, with the
    tokenizer_config.json of a HuggingFace BERT (the uncased one leaves strip_accents out, as bert-base-uncased's)."""
    trainer = tokenizers.BertWordPieceTokenizer(lowercase=lowercase)
    trainer.train_from_iterator(TEXTS * 3, vocab_size=400, special_tokens=special_token_layout(99))
    os.makedirs(path, exist_ok=True)
    trainer.save_model(str(path))
    if keep_tokenizer_json:  # without it: bert-base-uncased's first layout, vocab.txt + tokenizer_config.json
        trainer.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "model_max_length": 512}, f)
    return str(path)


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
@pytest.mark.parametrize("keep_tokenizer_json", [True, False], ids=["with-tokenizer-json", "vocab-txt-and-config"])
def test_prep_ids_equal_autotokenizer_ids(tmp_path, lowercase, keep_tokenizer_json):
    source = hf_directory(tmp_path / "hf", lowercase=lowercase, keep_tokenizer_json=keep_tokenizer_json)
    check_vocab(source)  # what prep checks at start
    summary = reuse_vocab(source, str(tmp_path / "vocab"))  # what prep's ReuseVocab writes under OUT/vocab/
    encoder = WordPieceEncoder.from_directory(summary["directory"])  # what prep's Tokenize encodes with
    reference = transformers.AutoTokenizer.from_pretrained(source)
    ids = reference.convert_tokens_to_ids(["[PAD]", "[unused0]", "[unused98]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    assert ids == [0, 1, 99, 100, 101, 102, 103]  # bert-base-uncased's layout
    for text in [*TEXTS, HELD_OUT]:
        assert encoder.encode(text) == reference(text, add_special_tokens=False)["input_ids"], text
    assert (reference("ÅNGSTRÖM")["input_ids"] == reference("ångström")["input_ids"]) == lowercase  # the setting matters
    with open(os.path.join(source, "vocab.txt"), "rb") as a, open(os.path.join(summary["directory"], "vocab.txt"), "rb") as b:
        assert a.read() == b.read()  # so the manifest's sha256 is the source's: train --init-from checks it
