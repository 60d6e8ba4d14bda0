"""Tiny assets for the contextual tests (embed --pooling words, senses, similarity), made from text the machine has.

- `docstring_lines`: sentences of the Python docstrings of this environment (the demo's corpus, read with `ast`).
- `tiny_export`: a 2-layer, 32-wide BertForPretraining with random weights over a vocabulary the project's WordPiece
  learner builds from given texts, written by `downstream.export.export_hf`, as `clozeforge export` writes it.
- `other_tokenizer_model`: a tiny transformers BERT saved with save_pretrained beside a tokenizer made with
  `tokenizers` offline: byte-level BPE (RoBERTa's, GPT-2's) or Unigram with Metaspace (SentencePiece's).
- `fake_run`: a training RUN with stage-0 checkpoints, as `clozeforge train` writes them.
- `wordnet_rows`: WordNet's gloss examples of a few lemmas (Debian's wordnet-base; the test skips without it).
"""

from __future__ import annotations

import json
import os
import re

import pytest

SENSE_LEMMAS = {"bank.n", "plant.n", "state.n", "line.n", "run.v", "light.a"}


def docstring_lines(count: int = 300, max_chars: int = 160) -> list[str]:
    """The first `count` sentence-like lines (20..max_chars characters, letters and spaces mostly) of the built-in corpus."""
    from pipelines.documents.builtin_corpus import iter_documents

    lines = []
    for doc in iter_documents(max_bytes=400_000):
        for line in doc["text"].split("\n"):
            line = " ".join(line.split())
            if 20 <= len(line) <= max_chars and re.fullmatch(r"[A-Za-z][A-Za-z ,.'()-]+", line) and line not in lines:
                lines.append(line)
                if len(lines) == count:
                    return lines
    return lines


def tiny_export(directory: str, texts: list[str], *, positions: int = 64, seed: int = 0) -> str:
    import torch

    from downstream.export import export_hf
    from tests.helpers import learned_vocab_dir
    from trainer.model import BertForPretraining, ModelConfig

    vocab_dir = learned_vocab_dir(os.path.join(directory, "vocab"), texts, vocab_size=600)
    with open(os.path.join(vocab_dir, "vocab.txt"), encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                         max_position_embeddings=positions, hidden_dropout=0.0, attention_dropout=0.0)
    hf_dir = os.path.join(directory, "hf")
    export_hf(BertForPretraining(config, seed=seed).state_dict(), config, vocab_dir, hf_dir)
    return hf_dir


def other_tokenizer_model(directory: str, kind: str, texts: list[str]) -> str:
    """A transformers BERT (random weights) with a `kind` tokenizer ("bpe" or "unigram") trained on `texts`."""
    import torch
    import transformers
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
        tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    else:
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer, tok.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
        tok.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                               unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[
        ("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    path = os.path.join(directory, kind)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                         unk_token="<unk>", cls_token="<s>", sep_token="</s>",
                                         model_max_length=64).save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=3,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                                     pad_token_id=tok.token_to_id("<pad>"))
    transformers.BertForMaskedLM(config).save_pretrained(path)
    return path


def fake_run(root: str, export_dir: str, steps: list[int]) -> str:
    """A training RUN with stage-0 checkpoints at `steps` (random weights, one seed a step) over the export's vocabulary."""
    import shutil

    import torch

    from trainer.checkpoint import integrity
    from trainer.model import BertForPretraining, ModelConfig

    run = os.path.join(root, "run")
    shutil.copytree(os.path.join(os.path.dirname(export_dir), "vocab"), os.path.join(run, "vocab"))
    with open(os.path.join(export_dir, "config.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    config = ModelConfig(vocab_size=vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                         max_position_embeddings=64)
    for step in steps:
        torch.manual_seed(step)
        folder = os.path.join(run, "checkpoints", f"step_{step:08d}")
        os.makedirs(folder)
        torch.save({"module": BertForPretraining(config).state_dict(), "model_config": config.to_dict(), "step": step,
                    "train_config": {}}, os.path.join(folder, "mp_rank_00_model_states.pt"))
        integrity.write_record(folder)
    with open(os.path.join(run, "checkpoints", "latest"), "w") as f:
        f.write(f"step_{steps[-1]:08d}")
    return run


def wordnet_rows(directory: str) -> dict:
    """WordNet's examples of SENSE_LEMMAS split into train.jsonl / test.jsonl under `directory` (split.json returned)."""
    from downstream.contextual import wordnet

    if not os.path.exists(os.path.join(wordnet.ROOT, "data.noun")):
        pytest.skip("no WordNet database (apt-get install wordnet-base; .ci/run installs it)")
    return wordnet.write(directory, only=SENSE_LEMMAS)


def write_jsonl(path, rows) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return str(path)
