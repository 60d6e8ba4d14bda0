"""The one table between clozeforge's BertForPretraining tensors and a transformers checkpoint's, used both ways.

In:  our state dict and ModelConfig (export), or the tensors of a transformers checkpoint of the family and the
     ModelConfig its config.json describes (`--init-from`).
Out: `to_transformers`: the tensors model.safetensors holds (the family's transformers names, the tied and
     project-only entries left out); `from_transformers`: our state dict, the parts the checkpoint lacks
     (initialised fresh by the caller) and what it held that we drop, or a one-line WeightsError naming the
     tensor that is missing, misshapen or unknown.

Our parameter names are transformers' `BertForPreTraining` names in every family (trainer/model/bert.py), so the table
is which names belong to which part, the family's spelling of them (trainer/model/families/: RoBERTa's `roberta.` and
`lm_head.`), and the few ways a published checkpoint spells them otherwise: a bare encoder (`BertModel`,
`RobertaModel`) has no base-model prefix, a checkpoint converted from TensorFlow names LayerNorm's weight and bias
`gamma` and `beta`, and older ones store buffers (`position_ids`) beside the weights.
"""

from __future__ import annotations

import torch

from trainer.heads import OWN_MODULES, project_only_prefixes
from trainer.model.bert import BertForPretraining
from trainer.model.config import ModelConfig
from trainer.model.families import SPELLINGS, Spelling, spelling_of

PARTS: dict[str, tuple[str, ...]] = {
    "encoder": ("bert.embeddings.", "bert.encoder."),
    "pooler": ("bert.pooler.",),
    "MLM head": ("cls.predictions.",),
    "NSP head": ("cls.seq_relationship.",),
    "SBO head": ("sbo.",),
    "own heads": (OWN_MODULES,),
}
"""Our tensors by part. A source holds a part whole or not at all; every part but the encoder may be absent
(BertForMaskedLM has no pooler nor NSP head, BertModel no MLM or NSP head) and is then initialised fresh."""
TIED_KEYS = {
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}
"""Entries transformers re-ties on load and save_pretrained leaves out of model.safetensors."""
PROJECT_ONLY_PREFIXES = project_only_prefixes()
"""Weights of heads transformers has no class for (trainer/heads.py's rows not exported, and the heads' own modules);
trained, then dropped at export, fresh at --init-from."""
LEGACY_SUFFIXES = {".gamma": ".weight", ".beta": ".bias"}
"""LayerNorm parameters as checkpoints converted from TensorFlow BERT name them (transformers renames them too)."""
BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")
"""Non-parameters older transformers versions saved; rebuilt from the config, never read."""


class WeightsError(ValueError):
    """A checkpoint's tensors do not fit its config (the message names the tensor)."""


def part_of(name: str) -> str | None:
    return next((part for part, prefixes in PARTS.items() if name.startswith(prefixes)), None)


def exported_keys(model_config: ModelConfig) -> list[str]:
    """The tensor names model.safetensors holds for `model_config`, in transformers' order (the family's spelling)."""
    spelling = spelling_of(model_config)
    return [spelling.theirs(k) for k in _shapes(model_config) if k not in TIED_KEYS and not k.startswith(PROJECT_ONLY_PREFIXES)]


def _shapes(model_config: ModelConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):  # shapes only: no memory, no init cost
        model = BertForPretraining(model_config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def to_transformers(state_dict: dict[str, torch.Tensor], model_config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict as transformers' tensors under the family's names (fp32, contiguous, owning their memory);
    WeightsError when it does not match `model_config`."""
    without_sbo = ModelConfig.from_dict({**model_config.to_dict(), "use_sbo": False})
    wanted = [k for k in _shapes(without_sbo) if k not in TIED_KEYS and not k.startswith(PROJECT_ONLY_PREFIXES)]
    kept = {k for k in state_dict if k not in TIED_KEYS and not k.startswith(PROJECT_ONLY_PREFIXES)}
    missing, unexpected = sorted(set(wanted) - kept), sorted(kept - set(wanted))
    if missing or unexpected:
        raise WeightsError(f"state dict does not match ModelConfig: missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
                           f"unexpected {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
    spelling = spelling_of(model_config)
    # clone: a DeepSpeed-consolidated tensor may be a view into a flat buffer, which safetensors refuses
    return {spelling.theirs(key): state_dict[key].detach().to("cpu", torch.float32).contiguous().clone() for key in wanted}


def our_name(name: str, spelling: Spelling = SPELLINGS["bert"]) -> str:
    """The name of a transformers tensor spelled as `spelling` says, in our state dict (the inverse of what export writes)."""
    for old, new in LEGACY_SUFFIXES.items():
        if name.endswith(old) and "LayerNorm" in name:
            name = name[: -len(old)] + new
    return spelling.ours(spelling.bare(name))


def from_transformers(tensors: dict[str, tuple[int, ...] | torch.Tensor], model_config: ModelConfig,
                      where: str) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """(our state dict, the parts `tensors` lacks, the names it held that we drop) for a model of `model_config`.

    `tensors` maps transformers' names to tensors (or to shapes only, to check a checkpoint before loading
    it: the state dict is then empty). A part held in part, a shape that differs from the config's, or a name
    that is no BERT tensor is a WeightsError naming it, prefixed with `where` (the file)."""
    expected = _shapes(model_config)
    ours: dict[str, torch.Tensor | tuple[int, ...]] = {}
    dropped = []
    spelling = spelling_of(model_config)
    for name, value in tensors.items():
        key = our_name(name, spelling)
        if key in TIED_KEYS or key in BUFFERS or spelling.bare(name).startswith(spelling.dropped):
            dropped.append(name)
            continue
        if key not in expected:
            raise WeightsError(f"{where}: {name} is not a tensor of a {model_config.family} encoder or its pre-training heads")
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else tuple(value)
        if shape != expected[key]:
            raise WeightsError(f"{where}: {name} has shape {shape}, the config says {expected[key]}")
        ours[key] = value
    lacking = []
    for part in PARTS:
        names = [k for k in expected if part_of(k) == part and k not in TIED_KEYS]
        held = [k for k in names if k in ours]
        if names and not held:
            lacking.append(part)
        elif len(held) < len(names):
            first = next(k for k in names if k not in ours)
            raise WeightsError(f"{where}: lacks {first} ({len(names) - len(held)} of the {part}'s {len(names)} tensors missing)")
    if "encoder" in lacking:
        prefix = spelling.base_prefix
        raise WeightsError(f"{where}: holds no {model_config.family} encoder tensors ({prefix}embeddings.*, {prefix}encoder.*)")
    state = {k: v.detach().to("cpu", torch.float32) for k, v in ours.items() if isinstance(v, torch.Tensor)}
    return state, lacking, dropped
