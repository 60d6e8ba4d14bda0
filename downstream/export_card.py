"""The model card (README.md) of an export: what a reader of the directory learns about the model.

In:  the ModelConfig, the counts of exported and dropped parameters, the card's entries (training config, step,
     metrics, data fingerprint, a continued pretraining's source), the trained length, and the module of an objective
     that exports itself (ELECTRA's). Out: the card's markdown: the family and its transformers classes, the shape,
     the heads exported and dropped (trainer/heads.py), the losses and their weights, a fill-mask example.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from downstream.export_dir import CARD_TAGS
from schemas.tokenizer_formats import TOKENIZER_FORMATS
from trainer.heads import HEADS


def model_card(model_config, n_exported: int, dropped: dict[str, int], card: dict[str, Any], max_length: int, own=None) -> str:
    """README.md of an export: `n_exported` parameters written, `dropped` the project-only ones left out (by their
    state-dict prefix: trainer/heads.py's heads not exported, and the heads' own modules), the entries of
    `card` as sections, `max_length` the trained length; `own` the module of an objective whose export is its own
    (downstream/export_electra.py: its CARD_HEADS and CARD_LOSS lines)."""
    c, row = model_config, model_config.row
    objectives = c.objectives_text()
    lines = [
        "---", "library_name: transformers", "pipeline_tag: fill-mask", CARD_TAGS.format(family=row.name), "---",
        "",
        f"# {card.get('name', f'clozeforge {row.name}')}", "",
        card.get("description", f"A {row.name} encoder pretrained from scratch with clozeforge ({objectives})."),
        "", "## Family", "",
        f"{row.name}: exported as transformers' `{row.hf_pretraining_class}`, tokenizer `{row.hf_tokenizer_class}` "
        f"({card.get('tokenizer', row.tokenizer)} vocabulary), trained on {card.get('packing', row.packings[0])} rows."
        + (f" Languages (config.json's lang2id; pass `langs` to add their embeddings): {', '.join(c.languages)}."
           if row.languages else ""),
        "", "## Shape", "",
        "| layers | hidden | heads | ffn | vocab | max positions | trained length (model_max_length) | parameters |",
        "|---|---|---|---|---|---|---|---|",
        f"| {c.num_layers} | {c.hidden_size} | {c.num_heads} | {c.intermediate_size} | {c.vocab_size} "
        f"| {c.max_position_embeddings} | {max_length} | {n_exported:,} |", "",
        f"Pretraining saw sequences of up to {max_length} tokens, so the tokenizer truncates there by default "
        + (f"(positions {max_length}-{c.max_position_embeddings - 1} exist but were never trained)."
           if max_length < c.max_position_embeddings else "(every position was trained)."), "",
        "## Heads", "",
        (own.CARD_HEADS.format(goal=c.goal) if own else
         "Exported: the encoder, the pooler, the masked-LM head (decoder tied to the word embeddings) and the "
         f"next-sentence head, under transformers' `{row.hf_pretraining_class}` names." if row.nsp else
         "Exported: the encoder and the masked-LM head (decoder tied to the word embeddings), under transformers' "
         f"`{row.hf_pretraining_class}` names."),
    ]
    named = {h.prefix: f"the {h.name.upper()} head ({h.words})" for h in HEADS.values() if h.prefix}
    parts = [f"{named.get(prefix, 'the heads with modules of their own')} ({n:,} parameters, `{prefix}*`)"
             for prefix, n in dropped.items() if n]
    if parts:
        lines.append(f"Dropped: {'; '.join(parts)}, used in training; transformers has no class for them, and the exported "
                     "weights do not need them.")
    lines += ["", f"Losses: mlm x {c.mlm_weight}" + (f", nsp x {c.nsp_weight}" if c.nsp_weight else "")
              + (own.CARD_LOSS.format(**dataclasses.asdict(c)) if own else "")
              + (f", sbo x {c.sbo_weight}" if c.use_sbo else "") + "."]
    for key, value in card.items():
        if key in ("name", "description", "tokenizer", "packing"):
            continue
        lines += ["", f"## {key.replace('_', ' ').capitalize()}", ""]
        if isinstance(value, dict):
            lines += ["| key | value |", "|---|---|"]
            lines += [f"| {k} | {json.dumps(v) if isinstance(v, (dict, list)) else v} |" for k, v in value.items()]
        else:
            lines.append(str(value))
    lines += ["", "## Use", "", "```python", "from transformers import pipeline",
              "fill = pipeline('fill-mask', model='PATH/TO/THIS/DIRECTORY')",
              f"print(fill('Paris is the {TOKENIZER_FORMATS[row.tokenizer].roles['mask_token']} of France.'))", "```", ""]
    return "\n".join(lines)
