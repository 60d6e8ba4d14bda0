"""A family's spelling: how our tensor names (trainer/model/bert.py, BertForPreTraining's) are spelled in the family's
transformers class, both ways, and how that class names its inputs and its config's fields.

In:  a tensor name, ours or the family's. Out: the other spelling; `bare` adds the base model's prefix to a bare
     encoder checkpoint's names (a BertModel or RobertaModel saved alone), `dropped` says which of a checkpoint's
     tensors we never read (buffers, parts our network does not have); `hf_inputs`, `hf_dropout`, `hf_config` and
     `architecture` the class's keywords and config.json's keys.

A rename's prefixes may hold `{i}`, a layer's number, where the family keeps a layer's tensors in lists of their own
(XLM's `transformer.attentions.{i}.q_lin.` for our `bert.encoder.layer.{i}.attention.self.query.`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Spelling:
    name: str
    base_prefix: str
    """transformers' `base_model_prefix` + ".": a bare encoder saves `embeddings.…`, its task classes `<prefix>embeddings.…`."""
    renames: tuple[tuple[str, str], ...] = ()
    """(our prefix, theirs), the first that matches wins; names no rename matches are spelled alike."""
    dropped: tuple[str, ...] = ()
    """Prefixes (theirs) of tensors a checkpoint may hold that our network does not read."""
    hf_inputs: tuple[tuple[str, str], ...] = (("input_ids", "input_ids"), ("token_type_ids", "token_type_ids"),
                                              ("attention_mask", "attention_mask"))
    """(our batch key, the keyword its transformers class takes it as): what export's check feeds both models
    (XLM takes the languages as `langs` and no token types, and TLM's restarted positions as `position_ids`)."""
    hf_dropout: tuple[str, str] = ("hidden_dropout_prob", "attention_probs_dropout_prob")
    """config.json's keys of the hidden and the attention dropout (what fine-tuning sets)."""
    hf_attention_interface: bool = True
    """Its transformers class's self-attention calls transformers' attention interface with eager attention's
    arguments, so fine-tuning on a CPU may register its own (downstream/finetune/cpu_kernels.py)."""
    bare_starts: tuple[str, ...] = ("embeddings.", "encoder.", "pooler.")
    """How the names of a bare encoder (saved without the base model's prefix) start."""
    hf_config: Callable[[dict[str, Any], Any], dict[str, Any]] | None = dataclasses.field(default=None, compare=False)
    """(BERT's config.json body, the ModelConfig) → this class's body, where its config class names fields otherwise."""
    architecture: Callable[[dict[str, Any]], dict[str, Any]] | None = dataclasses.field(default=None, compare=False)
    """A config.json body of this class → BERT's keys (what ModelConfig.architecture_of_hf reads), the inverse."""
    fields: Callable[[dict[str, Any]], dict[str, Any]] | None = dataclasses.field(default=None, compare=False)
    """A config.json body of this class → the ModelConfig fields it fixes besides BERT's keys (ModernBERT's rotary
    bases, window and global layers)."""

    def theirs(self, ours: str) -> str:
        return _rename(ours, tuple((_pattern(mine), their) for mine, their in self.renames))

    def ours(self, theirs: str) -> str:
        return _rename(theirs, tuple((_pattern(their), mine) for mine, their in self.renames))

    def bare(self, theirs: str) -> str:
        """A bare encoder's tensor name with the base model's prefix (the others as they are)."""
        return self.base_prefix + theirs if theirs.startswith(self.bare_starts) else theirs


@functools.lru_cache(maxsize=None)
def _pattern(prefix: str) -> re.Pattern:
    return re.compile(re.escape(prefix).replace(re.escape("{i}"), r"(?P<i>\d+)"))


def _rename(name: str, rules: tuple[tuple[re.Pattern, str], ...]) -> str:
    """`name` with its prefix replaced by the first rule whose pattern matches it there; unchanged otherwise."""
    for pattern, replacement in rules:
        found = pattern.match(name)
        if found:
            return replacement.replace("{i}", found.groupdict().get("i") or "") + name[found.end():]
    return name
