"""ModernBERT (Warner et al. 2024) as transformers' ModernBertForMaskedLM names it: our tensors carry its names already
(trainer/model/modernbert.py was written to them), so nothing is renamed; what differs is its config.json, whose keys
this module writes from a ModelConfig (`hf_config`) and reads back (`architecture`, `fields`).

In:  BERT's config.json body and the ModelConfig (export), or a ModernBertConfig body (--init-from, an export read back).
Out: ModernBertConfig's body; BERT's keys plus the rotary and window fields of the ModelConfig it describes. A config
     this network cannot reproduce (biases in linear layers or norms, no decoder bias, an activation other than exact
     GELU, a scaled rotary embedding, a layer pattern other than every N-th global) is a ValueError naming the key.
"""

from __future__ import annotations

from typing import Any

from trainer.model.families.spelling import Spelling

_GLOBAL, _LOCAL = "full_attention", "sliding_attention"


def layer_types(num_layers: int, every: int) -> list[str]:
    """Layer i global when i % every == 0, else local: transformers' pattern from `global_attn_every_n_layers`."""
    return [_GLOBAL if i % every == 0 else _LOCAL for i in range(num_layers)]


def hf_config(bert: dict[str, Any], model) -> dict[str, Any]:
    """BERT's config.json body (ModelConfig.to_hf_config) → ModernBertConfig's."""
    return {
        "architectures": bert["architectures"], "model_type": bert["model_type"], "vocab_size": bert["vocab_size"],
        "hidden_size": bert["hidden_size"], "intermediate_size": bert["intermediate_size"],
        "num_hidden_layers": bert["num_hidden_layers"], "num_attention_heads": bert["num_attention_heads"],
        "hidden_activation": "gelu", "max_position_embeddings": bert["max_position_embeddings"],
        "initializer_range": bert["initializer_range"], "initializer_cutoff_factor": 2.0, "norm_eps": bert["layer_norm_eps"],
        "norm_bias": False, "pad_token_id": bert["pad_token_id"], "bos_token_id": None, "eos_token_id": None,
        "cls_token_id": None, "sep_token_id": None, "attention_bias": False,
        "attention_dropout": bert["attention_probs_dropout_prob"], "embedding_dropout": bert["hidden_dropout_prob"],
        "mlp_dropout": bert["hidden_dropout_prob"], "mlp_bias": False, "decoder_bias": True,
        "layer_types": layer_types(model.num_layers, model.global_attention_every),
        "rope_parameters": {_GLOBAL: {"rope_type": "default", "rope_theta": model.global_rope_theta},
                            _LOCAL: {"rope_type": "default", "rope_theta": model.local_rope_theta}},
        "local_attention": model.local_window, "classifier_pooling": "mean", "classifier_dropout": 0.0,
        "classifier_bias": False, "classifier_activation": "gelu", "sparse_prediction": False,
        "tie_word_embeddings": True, "dtype": bert["dtype"],
    }


def architecture(body: dict[str, Any]) -> dict[str, Any]:
    """A ModernBertConfig body → the BERT keys ModelConfig.architecture_of_hf reads (absent keys: ModernBertConfig's
    defaults, as transformers takes them)."""
    for key, ours in (("norm_bias", False), ("attention_bias", False), ("mlp_bias", False), ("decoder_bias", True),
                      ("hidden_activation", "gelu"), ("classifier_activation", "gelu")):
        if body.get(key, ours) != ours:
            raise ValueError(f"{key} {body[key]!r}: a clozeforge ModernBERT has {key} {ours!r}")
    return {"vocab_size": body.get("vocab_size", 50368), "hidden_size": body.get("hidden_size", 768),
            "num_hidden_layers": body.get("num_hidden_layers", 22), "num_attention_heads": body.get("num_attention_heads", 12),
            "intermediate_size": body.get("intermediate_size", 1152),
            "max_position_embeddings": body.get("max_position_embeddings", 8192), "type_vocab_size": 1,
            "layer_norm_eps": body.get("norm_eps", 1e-5), "initializer_range": body.get("initializer_range", 0.02),
            "pad_token_id": body.get("pad_token_id", 50283)}


def fields(body: dict[str, Any]) -> dict[str, Any]:
    """The ModelConfig fields besides the shape: which layers are global, the window, the two rotary bases."""
    layers = body.get("num_hidden_layers", 22)
    types = body.get("layer_types")
    every = body.get("global_attn_every_n_layers", 3)
    if types is not None:
        globals_ = [i for i, t in enumerate(types) if t == _GLOBAL]
        every = globals_[1] if len(globals_) > 1 else max(layers, 1)
        if len(types) != layers or types != layer_types(layers, every):
            raise ValueError(f"layer_types {types}: a clozeforge ModernBERT's global layers are every N-th from layer 0")
    rope = body.get("rope_parameters") or {}
    thetas = {}
    for kind, old_key, default in ((_GLOBAL, "global_rope_theta", 160_000.0), (_LOCAL, "local_rope_theta", 10_000.0)):
        params = rope.get(kind) or {}
        if params.get("rope_type", "default") != "default":
            raise ValueError(f"rope_parameters.{kind}.rope_type {params['rope_type']!r}: only unscaled rotary embeddings")
        thetas[kind] = float(params.get("rope_theta", body.get(old_key, default)))
    return {"global_attention_every": every, "local_window": body.get("local_attention", 128),
            "global_rope_theta": thetas[_GLOBAL], "local_rope_theta": thetas[_LOCAL]}


SPELLING = Spelling(
    name="modernbert",
    base_prefix="model.",
    bare_starts=("embeddings.", "layers.", "final_norm."),
    hf_inputs=(("input_ids", "input_ids"), ("attention_mask", "attention_mask")),
    hf_dropout=("mlp_dropout", "attention_dropout"),
    hf_attention_interface=False,
    hf_config=hf_config,
    architecture=architecture,
    fields=fields,
)
