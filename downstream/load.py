"""An exported HuggingFace directory loaded as the project's own model, without transformers.

In:  a directory written by `clozeforge export` of any family (config.json, model.safetensors, tokenizer.json), or
     any transformers directory of a family member (BertForPreTraining, RobertaForMaskedLM, ... with tokenizer.json),
     or an ELECTRA export (ElectraForPreTraining, its generator in generator/); with `masked_lm=False` (embed) a bare
     encoder too, and a sentence-transformers directory (its encoder where modules.json says: `encoder_layout`).
Out: (BertForPretraining, ElectraForPretraining or ModernBertForPretraining, in eval mode, tokenizers.Tokenizer);
     `roles` gives the tokenizer's special tokens by their transformers role ([CLS]/[SEP]/[PAD]/[MASK] for WordPiece,
     <s>/</s>/<pad>/<mask> for RoBERTa's, XLM-R's and ModernBERT's byte-level BPE here);
     `batch` encodes texts the way the model reads them (cls ... sep, cut at the model's positions, padded).
"""

from __future__ import annotations

import json
import os

import torch

from schemas import ContractError, objectives
from schemas.tokenizer_formats import TOKENIZER_FORMATS
from trainer.model import ModelConfig, build, weights_of
from trainer.model.hf_names import WeightsError


def encoder_layout_of(hf_dir: str):
    """(the folder of the directory's encoder, its schemas/encoder_layout.py Layout or None); ContractError for a
    directory that would need code of its own."""
    from schemas import encoder_layout

    def cat(path: str) -> bytes:
        with open(os.path.join(hf_dir, path), "rb") as f:
            return f.read()

    layout = encoder_layout.read(cat, hf_dir)
    return (os.path.join(hf_dir, layout.encoder_dir) if layout and layout.encoder_dir else hf_dir), layout


def load_exported(hf_dir: str, masked_lm: bool = True):
    """(the family's network in eval mode, tokenizers.Tokenizer) from an exported directory; `masked_lm=False`: a
    bare encoder is enough (its heads stay random, unread)."""
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    if not masked_lm:
        hf_dir, _ = encoder_layout_of(hf_dir)

    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not os.path.exists(os.path.join(hf_dir, name)):
            raise FileNotFoundError(f"{hf_dir}: no {name} (is this a directory written by clozeforge export?)")
    with open(os.path.join(hf_dir, "config.json")) as f:
        hf = json.load(f)
    architecture = ModelConfig.architecture_of_hf(hf, f"{hf_dir}/config.json")
    if objectives.objective(architecture.get("objective", "mlm")).has_generator:
        return _load_electra(hf_dir, hf, architecture), Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    config = ModelConfig(**architecture, nsp_weight=1.0 if ModelConfig(**architecture, nsp_weight=0.0).row.nsp else 0.0,
                         hidden_dropout=0.0, attention_dropout=0.0)
    model = build(config)  # BertForPretraining, or the family's own network (ModernBERT's)
    where = f"{hf_dir}/model.safetensors"
    try:
        state, lacking, _ = weights_of(load_file(os.path.join(hf_dir, "model.safetensors")), config, where)
    except WeightsError as e:
        raise ContractError(str(e)) from None
    if "MLM head" in lacking and masked_lm:
        raise ContractError(f"{where}: no masked-LM head (a bare encoder: export a pre-training model)")
    model.load_state_dict(state, strict=False)  # the tied decoder entries, and a head the file lacks (NSP) stay
    return model.eval(), Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))


def _load_electra(hf_dir: str, hf: dict, architecture: dict):
    """An ELECTRA export (schemas/objectives.py) as ElectraForPretraining: the discriminator (what `embed` reads) and
    its generator/ (the masked LM `fill-mask` reads), which it must have."""
    from safetensors.torch import load_file

    from trainer.model import electra

    generator = os.path.join(hf_dir, objectives.objective(architecture["objective"]).generator_dir)
    if not os.path.exists(os.path.join(generator, "model.safetensors")):
        raise ContractError(f"{hf_dir}: an ELECTRA discriminator without its generator/ (clozeforge export writes both)")
    with open(os.path.join(generator, "config.json")) as f:
        fraction = electra.generator_fraction_of(hf, json.load(f), f"{generator}/config.json")
    config = ModelConfig(**architecture, generator_fraction=fraction, nsp_weight=0.0, hidden_dropout=0.0, attention_dropout=0.0)
    tensors = electra.from_transformers(load_file(os.path.join(hf_dir, "model.safetensors")),
                                        load_file(os.path.join(generator, "model.safetensors")))
    try:
        state, lacking, _ = electra.load_tensors(tensors, config, f"{hf_dir}/model.safetensors")
    except WeightsError as e:
        raise ContractError(str(e)) from None
    model = electra.ElectraForPretraining(config)
    model.load_state_dict(state, strict=False)  # the tied decoder, and a discriminator head an ElectraModel lacks
    return model.eval()


def roles(tokenizer) -> dict[str, str]:
    """The tokenizer's special tokens by transformers' role (cls_token, sep_token, pad_token, mask_token, ...): those
    of the tokenizer kind whose special tokens its vocabulary holds (schemas/tokenizer_formats.py)."""
    vocab = tokenizer.get_vocab()
    for kind in TOKENIZER_FORMATS.values():
        if all(t in vocab for t in kind.special_tokens):
            return kind.roles
    raise ContractError("the tokenizer holds neither BERT's special tokens nor RoBERTa's")


def encode(tokenizer, texts: list[str], max_len: int) -> list:
    """The tokenizer's encodings of `texts` as the model sees them: cls ... sep, cut at `max_len`, padded."""
    pad = roles(tokenizer)["pad_token"]
    tokenizer.enable_truncation(max_len)
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id(pad), pad_token=pad)
    return tokenizer.encode_batch(texts)


def batch(tokenizer, texts: list[str], max_len: int) -> dict[str, torch.Tensor]:
    encodings = encode(tokenizer, texts, max_len)
    return {
        "input_ids": torch.tensor([e.ids for e in encodings]),
        "token_type_ids": torch.tensor([e.type_ids for e in encodings]),
        "attention_mask": torch.tensor([e.attention_mask for e in encodings]),
    }
