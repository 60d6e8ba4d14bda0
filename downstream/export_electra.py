"""ELECTRA's export (schemas/objectives.py): the discriminator is the export directory itself (export.py writes it as
transformers' ElectraForPreTraining); the generator goes beside it, in `generator/`, as ElectraForMaskedLM.

In:  the tensors trainer/model/electra.py's `to_transformers` splits a state dict into, the ModelConfig, the text
     files export.py wrote for the discriminator (tokenizer files, config.json); for `verify`, an export and our model.
Out: `tensors` → the two models' tensors; `write_generator` → `generator/` (its own config.json, model.safetensors, the same tokenizer files, no card);
     `verify` → max |ours - transformers| of the replaced-token logits and of the generator's MLM logits.
"""

from __future__ import annotations

import json
import os

import torch

CARD_HEADS = ("Exported: the discriminator (encoder and replaced-token head) as transformers' `{goal.hf_pretraining_class}`; "
         "the generator as `{goal.hf_generator_class}` in `{goal.generator_dir}/` (fill-mask), sharing the embeddings.")
"""The card's heads paragraph (str.format over the objective's row)."""
CARD_LOSS = ", replaced-token detection x {discriminator_weight:g}"
"""The card's losses line, after the generator's masked LM (str.format over the model config's fields)."""


def tensors(state_dict: dict[str, torch.Tensor], model_config) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the discriminator's tensors, the generator's) under transformers' names. An ELECTRA model is post-LN, as
    transformers' is: its ModelConfig refuses --pre-layernorm."""
    from trainer.model.electra import to_transformers

    return to_transformers(state_dict)


def write_generator(staging: str, model_config, tensors: dict[str, torch.Tensor], texts: dict[str, str]) -> None:
    """The generator's directory inside the staged export `staging`: `fill-mask` and AutoModelForMaskedLM read it."""
    from safetensors.torch import save_file

    where = os.path.join(staging, model_config.goal.generator_dir)
    os.makedirs(where)
    save_file(tensors, os.path.join(where, "model.safetensors"), metadata={"format": "pt"})
    files = {**texts, "config.json": json.dumps(model_config.generator_hf_config(), indent=2) + "\n"}
    for name, text in files.items():
        if name != "README.md":  # the card is the export's, one directory up
            with open(os.path.join(where, name), "w", encoding="utf-8") as f:
                f.write(text)


def verify(transformers, hf_dir: str, model, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """export.verify_export of an ELECTRA export: the discriminator's replaced-token logits against ElectraForPreTraining's,
    the generator's MLM logits against ElectraForMaskedLM's (EXPORT/generator), real tokens only."""
    goal, device = model.config.goal, next(model.parameters()).device
    discriminator = getattr(transformers, goal.hf_pretraining_class).from_pretrained(hf_dir).to(device).eval()
    generator = getattr(transformers, goal.hf_generator_class).from_pretrained(
        os.path.join(hf_dir, goal.generator_dir)).to(device).eval()
    inputs = {k: batch[k].to(device) for k in ("input_ids", "token_type_ids", "attention_mask")}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            sequence_output, _, _ = model.encode(**inputs)
            ours_rtd = model.discriminator_logits(sequence_output).float()
            ours_mlm = model.generator_logits(model.generator_hidden(**inputs)).float()
            their_rtd, their_mlm = discriminator(**inputs).logits.float(), generator(**inputs).logits.float()
    finally:
        model.train(was_training)
    real = inputs["attention_mask"].bool()
    return {"rtd_max_abs_diff": (ours_rtd - their_rtd)[real].abs().max().item(),
            "mlm_max_abs_diff": (ours_mlm - their_mlm)[real].abs().max().item()}
