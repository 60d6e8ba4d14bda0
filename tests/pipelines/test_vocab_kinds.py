"""The three tokenizer kinds end to end against transformers 5: what prep writes for bpe and unigram loads through
AutoTokenizer as RobertaTokenizerFast / XLMRobertaTokenizerFast with the ids the Tokenize stage writes (mixed scripts,
emoji, marks, controls, long words); `--vocab DIR` reads BERT, RoBERTa and XLM-R directories that transformers itself
saved (tokenizer.json + tokenizer_config.json, no vocab.txt) with AutoTokenizer's ids; a --vocab of another kind, or
none, is one line naming what the directory holds."""

from __future__ import annotations

import collections
import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that

from pipelines.documents.records import Doc
from pipelines.errors import PrepError
from pipelines.outputs.attempts import Staged
from pipelines.outputs.shards import write_clean_docs
from pipelines.stages.learn_vocabulary import check_vocab, reuse_vocab
from pipelines.stages.tokenize import Tokenize
from pipelines.tokenizer_kinds import TOKENIZER_KINDS
from pipelines.unigram import normalizer
from schemas.tokenizer_formats import format_of, word_boundary
from schemas.vocab import read_tokens
from tests.pipelines.mixed_text import mixed_texts

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.integration  # learns three vocabularies, runs Beam stages: a minute or two

CLASSES = {"wordpiece": "BertTokenizer", "bpe": "RobertaTokenizer", "unigram": "XLMRobertaTokenizer"}
VOCAB_SIZES = {"wordpiece": 900, "bpe": 900, "unigram": 1200}


@pytest.fixture(scope="module")
def learned(tmp_path_factory) -> dict[str, str]:
    """A vocabulary of each kind, learned by the kind from the mixed text and some docstrings, as prep writes it."""
    from pipelines.documents.builtin_corpus import iter_documents

    texts = [d["text"] for d in iter_documents(150_000)] + list(mixed_texts())
    out = {}
    for name, kind in TOKENIZER_KINDS.items():
        settings = kind.settings(_prep_config(name))
        split = kind.words(settings)
        counts = collections.Counter(w for t in texts for w in split(t.split("\n")))
        directory = str(tmp_path_factory.mktemp(name))
        kind.learn(counts.items(), None, settings, directory)
        out[name] = directory
    return out


def _prep_config(name: str):
    from pipelines import config as prep_config

    return prep_config.PrepConfig(inputs=(("x", "x"),), output="/tmp/unused", tokenizer=name,
                                  wordpiece=prep_config.VocabConfig(vocab_size=VOCAB_SIZES[name]))


def _auto(directory: str, texts) -> list[list[int]]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


@pytest.mark.parametrize("name", ["bpe", "unigram"])
def test_prep_vocabularies_load_as_the_family_class_with_the_encoder_ids(learned, name):
    directory = learned[name]
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    assert type(tokenizer).__name__ == CLASSES[name] and tokenizer.is_fast
    assert tokenizer.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>"]) == [0, 1, 2, 3]
    assert tokenizer.mask_token_id == len(read_tokens(directory)) - 1 == VOCAB_SIZES[name] - 1
    encoder = TOKENIZER_KINDS[name].encoder(directory)  # what the Tokenize stage encodes with
    texts = list(mixed_texts())
    assert encoder.encode_batch(texts) == _auto(directory, texts)
    assert tokenizer("a b")["input_ids"][0] == 0 and tokenizer("a b")["input_ids"][-1] == 2  # <s> ... </s>
    if name == "bpe":  # no unknown token ever
        assert tokenizer.unk_token_id not in {i for t in texts for i in encoder.encode(t.replace("<unk>", ""))}
    assert format_of(directory).name == name and word_boundary(directory) == TOKENIZER_KINDS[name].format.boundary


@pytest.mark.parametrize("name", ["wordpiece", "bpe", "unigram"])
def test_the_tokenize_stage_writes_autotokenizers_ids(learned, name, tmp_path):
    docs = [Doc(source="s", path="p", doc_id=str(i), sentences=tuple(t.split("\n"))) for i, t in enumerate(mixed_texts())]
    shard = str(tmp_path / "clean-00000.parquet")
    with open(shard, "wb") as f:
        write_clean_docs(f, docs)
    summary = {**reuse_vocab(learned[name], str(tmp_path / "vocab")), "directory": str(tmp_path / "vocab")}
    tokenizer = transformers.AutoTokenizer.from_pretrained(learned[name])
    expected = {d.doc_id: tuple(ids for ids in (tuple(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in d.sentences) if ids)
                for d in docs}

    def check(tokenized):
        assert {d.doc_id: d.sentences for d in tokenized} == {k: v for k, v in expected.items() if v}

    with test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        vocab = p | "Vocab" >> beam.Create([summary])
        out = p | beam.Create([Staged(final=shard, attempt=shard, bytes=0, sha256="")]) | Tokenize(vocab)
        assert_that(out["docs"], check)


# -- vocabularies transformers saved (issue 43, item 5) -------------------------------------------------------------


def _tokens_by_id(directory: str) -> list[str]:
    return read_tokens(directory)


def saved_by_transformers(kind: str, learned_dir: str, path, **options) -> str:
    """A tokenizer transformers 5 builds from a learned vocabulary and saves (tokenizer.json + tokenizer_config.json)."""
    from schemas.hf_tokenizers import read_bpe, read_unigram

    tokens = _tokens_by_id(learned_dir)
    if kind == "wordpiece":
        tokenizer = transformers.BertTokenizer(vocab={t: i for i, t in enumerate(tokens)}, **options)
    elif kind == "bpe":
        model = read_bpe(learned_dir)
        tokenizer = transformers.RobertaTokenizer(vocab={t: i for i, t in enumerate(model.tokens)}, merges=list(model.merges), **options)
    else:
        tokenizer = transformers.XLMRobertaTokenizer(vocab=list(read_unigram(learned_dir).pieces), **options)
    tokenizer.save_pretrained(str(path))
    return str(path)


@pytest.mark.parametrize("kind, options", [
    ("wordpiece", {"do_lower_case": True}), ("wordpiece", {"do_lower_case": False}),
    ("bpe", {}), ("bpe", {"add_prefix_space": True}),
    ("unigram", {}), ("unigram", {"_spm_precompiled_charsmap": normalizer.charsmap()}),
], ids=["bert-uncased", "bert-cased", "roberta", "roberta-prefix-space", "xlmr", "xlmr-nfkc"])
def test_vocab_reads_what_transformers_saved_with_autotokenizers_ids(learned, tmp_path, kind, options):
    source = saved_by_transformers(kind, learned[kind], tmp_path / "hf", **options)
    assert sorted(os.listdir(source)) == ["tokenizer.json", "tokenizer_config.json"]  # transformers 5: no vocab.txt
    reference = transformers.AutoTokenizer.from_pretrained(source)
    assert type(reference).__name__ == CLASSES[kind]
    check_vocab(source, kind)  # what prep checks at start
    summary = reuse_vocab(source, str(tmp_path / "vocab"))  # what ReuseVocab writes under OUT/vocab/
    assert summary["tokenizer"] == kind and summary["size"] == len(reference)
    encoder = TOKENIZER_KINDS[kind].encoder(summary["directory"])  # what Tokenize encodes with
    texts = list(mixed_texts())
    assert encoder.encode_batch(texts) == _auto(source, texts)
    assert _auto(summary["directory"], texts) == _auto(source, texts)  # and prep's copy loads the same


def test_a_vocabulary_of_another_kind_is_one_line(learned, tmp_path):
    roberta = saved_by_transformers("bpe", learned["bpe"], tmp_path / "roberta")
    with pytest.raises(PrepError) as err:
        check_vocab(roberta, "wordpiece")
    assert str(err.value) == (f"--vocab {roberta} holds a bpe vocabulary (RobertaTokenizer), not a wordpiece one: "
                              "pass --tokenizer bpe, or another --vocab")
    with pytest.raises(PrepError, match="holds a wordpiece vocabulary"):
        check_vocab(learned["wordpiece"], "unigram")


def test_the_cli_says_so_before_any_work(learned, tmp_path, corpus_dir):
    from tests.helpers import run_cli

    out = tmp_path / "out"
    result = run_cli("prep", "--input", f"{corpus_dir}/part-0.jsonl", "--output", str(out), "--vocab", learned["unigram"],
                     "--tokenizer", "bpe")
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.splitlines() == [f"clozeforge prep: error: --vocab {learned['unigram']} holds a unigram vocabulary "
                                          "(XLMRobertaTokenizer), not a bpe one: pass --tokenizer unigram, or another --vocab"]


def test_a_directory_without_a_vocabulary_names_the_directory_not_a_file_in_it(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PrepError) as err:
        check_vocab(str(empty))
    assert str(err.value) == (f"--vocab {empty}: no vocabulary here: none of vocab_config.json, tokenizer.json, "
                              "tokenizer_config.json or vocab.txt (expected the vocab/ directory of a prep run, or a tokenizer "
                              "directory transformers saved)")
    (empty / "tokenizer_config.json").write_text('{"tokenizer_class": "GPT2Tokenizer"}')
    with pytest.raises(PrepError, match=r"tokenizer_class 'GPT2Tokenizer' is none of the classes clozeforge reads"):
        check_vocab(str(empty))


@pytest.mark.parametrize("name", ["bpe", "unigram"])
def test_the_tokenize_command_gives_autotokenizers_ids(learned, name, tmp_path):
    import json

    from pipelines.commands import tokenize as tokenize_command

    lines = [t.replace("\n", " ").replace("\r", " ").replace("\x85", " ").replace("\u2028", " ").replace("\u2029", " ")
             for t in mixed_texts()]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "ids.jsonl"
    assert tokenize_command.main(["--vocab", learned[name], "--input", str(tmp_path / "in.txt"), "--output", str(out)]) == 0
    written = [json.loads(line)["ids"] for line in out.read_text().splitlines()]
    assert written == _auto(learned[name], lines)
