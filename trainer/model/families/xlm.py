"""XLM (Lample & Conneau 2019) as transformers' XLMWithLMHeadModel names it: BERT's post-LN encoder under
`transformer.`, each layer's tensors in lists of their own (`attentions.{i}` with q_lin/k_lin/v_lin/out_lin,
`layer_norm1.{i}`, `ffns.{i}` with lin1/lin2, `layer_norm2.{i}`), the language embeddings where BERT has token types,
and the MLM head `pred_layer.proj`: the projection tied to the word embeddings with its own bias, no transform.

The network is BERT's (trainer/model/bert.py) with the family row's differences (schemas/families.py): the token-type
table sized and read as languages, the MLM head without its transform, no pooler nor NSP head. XLM's feed-forward
width is 4 x hidden (its config has no field for it). transformers adds the language embeddings only when it is
given `langs`, and `langs` are the language ids our token types are; its config's `lang2id` names them.
"""

from __future__ import annotations

from typing import Any

from trainer.model.families.spelling import Spelling

_LAYER = "bert.encoder.layer.{i}."


def hf_config(bert: dict[str, Any], model) -> dict[str, Any]:
    """BERT's config.json body → XLMConfig's (transformers' attribute_map spells hidden_size emb_dim and so on)."""
    languages = list(model.languages)
    return {
        "architectures": bert["architectures"], "model_type": bert["model_type"],
        "vocab_size": bert["vocab_size"], "emb_dim": bert["hidden_size"], "n_layers": bert["num_hidden_layers"],
        "n_heads": bert["num_attention_heads"], "dropout": bert["hidden_dropout_prob"],
        "attention_dropout": bert["attention_probs_dropout_prob"], "gelu_activation": True,  # exact erf GELU, as ours
        "sinusoidal_embeddings": False, "causal": False, "asm": False, "is_encoder": True,
        "n_langs": len(languages), "use_lang_emb": True, "lang2id": {c: i for i, c in enumerate(languages)},
        "id2lang": {i: c for i, c in enumerate(languages)}, "lang_id": 0,
        "max_position_embeddings": bert["max_position_embeddings"], "layer_norm_eps": bert["layer_norm_eps"],
        "init_std": bert["initializer_range"], "embed_init_std": bert["initializer_range"],
        "pad_token_id": bert["pad_token_id"], "tie_word_embeddings": True, "dtype": bert["dtype"],
    }


def architecture(body: dict[str, Any]) -> dict[str, Any]:
    """An XLMConfig body → the BERT keys ModelConfig.architecture_of_hf reads (and `languages` from its lang2id)."""
    if body.get("asm") or body.get("causal") or body.get("sinusoidal_embeddings") or body.get("gelu_activation") is False:
        raise ValueError("only a bidirectional XLM with learned positions, GELU and a plain softmax is a clozeforge network "
                         "(asm, causal, sinusoidal_embeddings false; gelu_activation true)")
    lang2id = body.get("lang2id") or {}
    languages = sorted(lang2id, key=lambda c: lang2id[c])
    if not body.get("use_lang_emb", True) or len(languages) != body.get("n_langs", 1) or len(languages) < 2:
        raise ValueError("an XLM network here has language embeddings for two or more languages named by lang2id "
                         f"(use_lang_emb {body.get('use_lang_emb', True)}, n_langs {body.get('n_langs', 1)}, lang2id {lang2id})")
    hidden = body.get("emb_dim", 2048)
    return {"vocab_size": body.get("vocab_size", 30145), "hidden_size": hidden, "num_hidden_layers": body.get("n_layers", 12),
            "num_attention_heads": body.get("n_heads", 16), "intermediate_size": 4 * hidden,
            "max_position_embeddings": body.get("max_position_embeddings", 512), "type_vocab_size": len(languages),
            "layer_norm_eps": body.get("layer_norm_eps", 1e-12), "initializer_range": body.get("init_std", 0.02),
            "pad_token_id": body.get("pad_token_id", 2), "languages": languages}


SPELLING = Spelling(
    name="xlm",
    base_prefix="transformer.",
    renames=(
        ("bert.embeddings.word_embeddings.", "transformer.embeddings."),
        ("bert.embeddings.position_embeddings.", "transformer.position_embeddings."),
        ("bert.embeddings.token_type_embeddings.", "transformer.lang_embeddings."),
        ("bert.embeddings.LayerNorm.", "transformer.layer_norm_emb."),
        (_LAYER + "attention.self.query.", "transformer.attentions.{i}.q_lin."),
        (_LAYER + "attention.self.key.", "transformer.attentions.{i}.k_lin."),
        (_LAYER + "attention.self.value.", "transformer.attentions.{i}.v_lin."),
        (_LAYER + "attention.output.dense.", "transformer.attentions.{i}.out_lin."),
        (_LAYER + "attention.output.LayerNorm.", "transformer.layer_norm1.{i}."),
        (_LAYER + "intermediate.dense.", "transformer.ffns.{i}.lin1."),
        (_LAYER + "output.dense.", "transformer.ffns.{i}.lin2."),
        (_LAYER + "output.LayerNorm.", "transformer.layer_norm2.{i}."),
        ("cls.predictions.bias", "pred_layer.proj.bias"),  # before the decoder's: their one bias is our head's
        ("cls.predictions.decoder.", "pred_layer.proj."),
    ),
    bare_starts=("embeddings.", "position_embeddings.", "lang_embeddings.", "layer_norm_emb.", "attentions.", "layer_norm1.",
                 "ffns.", "layer_norm2."),
    dropped=("transformer.position_ids",),
    hf_inputs=(("input_ids", "input_ids"), ("token_type_ids", "langs"), ("attention_mask", "attention_mask"),
               ("position_ids", "position_ids")),
    hf_dropout=("dropout", "attention_dropout"),
    hf_attention_interface=False,
    hf_config=hf_config,
    architecture=architecture,
)
