"""An exported HuggingFace directory loaded as the project's own model, without transformers.

In:  a directory written by `clozeforge export` (config.json, model.safetensors, tokenizer.json).
Out: (BertForPretraining in eval mode, tokenizers.Tokenizer); `batch` encodes texts the way the model
     reads them ([CLS] ... [SEP], cut at the model's positions, padded).
"""

from __future__ import annotations

import json
import os

import torch

from schemas import ContractError
from trainer.model import BertForPretraining, ModelConfig

_HF_TO_OURS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "layer_norm_eps": "layer_norm_eps",
    "pad_token_id": "pad_token_id",
}


def load_exported(hf_dir: str):
    """(BertForPretraining in eval mode, tokenizers.Tokenizer) from an exported directory."""
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not os.path.exists(os.path.join(hf_dir, name)):
            raise FileNotFoundError(f"{hf_dir}: no {name} (is this a directory written by clozeforge export?)")
    with open(os.path.join(hf_dir, "config.json")) as f:
        hf = json.load(f)
    if hf.get("model_type") != "bert":
        raise ContractError(f"{hf_dir}/config.json: model_type {hf.get('model_type')!r}, expected 'bert'")
    config = ModelConfig(**{ours: hf[theirs] for theirs, ours in _HF_TO_OURS.items() if theirs in hf}, hidden_dropout=0.0, attention_dropout=0.0)
    model = BertForPretraining(config)
    missing, unexpected = model.load_state_dict(load_file(os.path.join(hf_dir, "model.safetensors")), strict=False)
    missing = [k for k in missing if not k.startswith("cls.predictions.decoder")]
    if missing or unexpected:
        raise ContractError(f"{hf_dir}: weights do not fit the config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.cls.predictions.decoder.weight = model.bert.embeddings.word_embeddings.weight
    return model.eval(), Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))


def encode(tokenizer, texts: list[str], max_len: int) -> list:
    """The tokenizer's encodings of `texts` as the model sees them: [CLS] ... [SEP], cut at `max_len`, padded."""
    tokenizer.enable_truncation(max_len)
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0, pad_token="[PAD]")
    return tokenizer.encode_batch(texts)


def batch(tokenizer, texts: list[str], max_len: int) -> dict[str, torch.Tensor]:
    encodings = encode(tokenizer, texts, max_len)
    return {
        "input_ids": torch.tensor([e.ids for e in encodings]),
        "token_type_ids": torch.tensor([e.type_ids for e in encodings]),
        "attention_mask": torch.tensor([e.attention_mask for e in encodings]),
    }


