"""Use an exported model without transformers: fill-mask and contextual embeddings.

In:  an exported HuggingFace directory (config.json, model.safetensors, tokenizer.json) and texts.
Out: fill_mask → per [MASK], the top-k (token, probability); embed_texts → sentence vectors (batch, hidden)
     from [CLS] or the mean over real tokens, or per-token vectors as the average of the last four layers
     (the feature-based recipe of the BERT paper, section 5.3), as a list of (tokens, hidden) arrays whose
     rows `embedded_tokens` names; write_embeddings → .npy, or .arrow with the texts and tokens beside.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch

from schemas import ContractError
from trainer.model import BertForPretraining
from trainer.model_config import ModelConfig

POOLINGS = ("cls", "mean", "tokens")

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


def _encode(tokenizer, texts: list[str], max_len: int) -> list:
    """The tokenizer's encodings of `texts` as the model sees them: [CLS] ... [SEP], cut at `max_len`, padded."""
    tokenizer.enable_truncation(max_len)
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0, pad_token="[PAD]")
    return tokenizer.encode_batch(texts)


def _batch(tokenizer, texts: list[str], max_len: int) -> dict[str, torch.Tensor]:
    encodings = _encode(tokenizer, texts, max_len)
    return {
        "input_ids": torch.tensor([e.ids for e in encodings]),
        "token_type_ids": torch.tensor([e.type_ids for e in encodings]),
        "attention_mask": torch.tensor([e.attention_mask for e in encodings]),
    }


def embedded_tokens(model: BertForPretraining, tokenizer, texts: list[str]) -> list[list[str]]:
    """The tokens of each text that `embed_texts(..., pooling="tokens")` returns a vector for, in order."""
    encodings = _encode(tokenizer, texts, model.config.max_position_embeddings)
    return [[t for t, real in zip(e.tokens, e.attention_mask) if real] for e in encodings]


@torch.no_grad()
def fill_mask(model: BertForPretraining, tokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    mask_id = tokenizer.token_to_id("[MASK]")
    batch = _batch(tokenizer, [text], model.config.max_position_embeddings)
    positions = (batch["input_ids"][0] == mask_id).nonzero().flatten()
    if positions.numel() == 0:
        raise ValueError(f"no [MASK] in {text!r}")
    sequence_output, _, _ = model.encode(**batch)
    probs = model.dense_mlm_logits(sequence_output)[0, positions].softmax(-1)  # (masks, vocab)
    top = probs.topk(top_k, dim=-1)
    return [
        [(tokenizer.id_to_token(int(i)), float(p)) for p, i in zip(values, indices)]
        for values, indices in zip(top.values, top.indices)
    ]


@torch.no_grad()
def embed_texts(model: BertForPretraining, tokenizer, texts: list[str], *, pooling: str = "cls", batch_size: int = 32):
    """Sentence vectors (len(texts), hidden) for pooling 'cls'/'mean'; for 'tokens', a list of (n_i, hidden)."""
    if pooling not in POOLINGS:  # before any work, and also when `texts` is empty
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if not texts:
        return [] if pooling == "tokens" else np.zeros((0, model.config.hidden_size), np.float32)
    out = []
    for start in range(0, len(texts), batch_size):
        batch = _batch(tokenizer, texts[start : start + batch_size], model.config.max_position_embeddings)
        sequence_output, _, states = model.encode(**batch, output_hidden_states=pooling == "tokens")
        mask = batch["attention_mask"].unsqueeze(-1).float()  # (batch, seq, 1)
        if pooling == "cls":
            out.append(sequence_output[:, 0].numpy())
        elif pooling == "mean":
            out.append(((sequence_output * mask).sum(1) / mask.sum(1)).numpy())
        else:
            last4 = torch.stack(states[-4:]).mean(0)  # (batch, seq, hidden)
            out += [row[: int(n)].numpy() for row, n in zip(last4, batch["attention_mask"].sum(1))]
    return out if pooling == "tokens" else np.concatenate(out)


def write_embeddings(vectors, path: str, columns: dict[str, list] | None = None) -> None:
    """Save to .npy (sentence vectors only) or .arrow: `embedding` and `shape` per row, plus `columns`
    (for example the texts, and for per-token vectors the tokens each row of the matrix belongs to)."""
    if path.endswith(".npy"):
        if isinstance(vectors, list):
            raise ValueError("per-token embeddings have ragged lengths: write them to .arrow")
        np.save(path, vectors)
    elif path.endswith(".arrow"):
        import pyarrow as pa

        rows = list(vectors)
        column = pa.array([np.asarray(r, dtype=np.float32).reshape(-1).tolist() for r in rows], type=pa.list_(pa.float32()))
        dims = pa.array([list(np.asarray(r).shape) for r in rows], type=pa.list_(pa.int32()))
        extra = {name: pa.array(values) for name, values in (columns or {}).items()}
        if any(len(values) != len(rows) for values in extra.values()):
            raise ValueError(f"every column needs one value per embedding ({len(rows)})")
        table = pa.table({"embedding": column, "shape": dims, **extra})
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    else:
        raise ValueError(f"--output must end in .npy or .arrow, got {path}")
