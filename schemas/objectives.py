"""Pre-training objectives, one row each: what `train --objective` builds, which families it trains, and what export
writes of it.

In:  an objective name (`train --objective`, a checkpoint's ModelConfig), or a transformers config.json's
     `model_type` (`--init-from`, the exports `embed` and `finetune` read).
Out: the `Objective` row: the trainer's network for it (trainer/model/__init__.py NETWORK_CLASSES), the families it
     trains, the transformers classes its export loads as (None: the family's own), the directory of a second
     exported model, and its loss weights' defaults.

    objective  network  families  export (main directory)                generator/
    mlm        bert     all       the family's (BertForPreTraining, ...)  -
    electra    electra  bert      ElectraForPreTraining (discriminator)   ElectraForMaskedLM (generator)

ELECTRA (Clark et al. 2020): a small masked-LM generator, a fraction of the discriminator's width that shares its
embeddings, fills the masked positions with tokens sampled from its own predictions; the discriminator, the model
that is kept, learns to tell every token of the sequence whether it was replaced (replaced-token detection), so it
learns from every token rather than the 15% masked. Loss = generator MLM + λ x discriminator, λ = 50 (the paper's
Section 3.1 and its released configurations). transformers' ELECTRA is BERT's encoder (token types, positions from
0, WordPiece), so it trains the bert family's data. Standard library only: prep reads it.
"""

from __future__ import annotations

import dataclasses

from schemas.errors import ContractError


@dataclasses.dataclass(frozen=True)
class Objective:
    name: str
    """`--objective`, and what a checkpoint's model config and an export's card record."""
    network: str
    """The trainer's network class (trainer/model/__init__.py): bert (BertForPretraining) or electra."""
    families: tuple[str, ...] | None
    """The families (schemas/families.py) it trains; None: every one."""
    hf_model_type: str | None = None
    """config.json's model_type of its export; None: the family's."""
    hf_pretraining_class: str | None = None
    """The transformers class of the main export directory; None: the family's."""
    hf_generator_class: str | None = None
    """The transformers class of the second export directory (`generator_dir`), the masked LM `fill-mask` reads."""
    generator_dir: str | None = None
    """Where in the export the generator goes."""
    discriminator_weight: float = 0.0
    """λ, the replaced-token-detection loss's weight beside the generator's MLM loss (ELECTRA's 50)."""
    generator_fraction: float = 0.0
    """The generator's width (hidden, heads, ffn) as a fraction of the discriminator's, its depth the same (the
    paper: 1/4 to 1/2 work best; the released ELECTRA-Small's generator is 1/4). Non-zero: the objective trains a
    generator beside the kept model, whose network is post-LN with neither NSP nor SBO heads."""
    batch_forms: tuple[str, ...] | None = None
    """The batch forms (trainer/data/batch_forms.py) its network takes; None: every one. --batch-form auto falls back
    to the first of them where the device's usual form is not one."""
    nsp: bool = True
    """Whether it keeps the family's next-sentence head where the family has one (ELECTRA's discriminator has none)."""
    variants: bool = True
    """Whether its network takes the heads a masking strategy adds (SpanBERT's SBO: trainer/masking/strategies.py) and
    a pre-LN encoder (--pre-layernorm); ELECTRA's is post-LN with neither, as transformers' is."""
    hf_embedding_size: bool = False
    """Whether config.json states `embedding_size` (ELECTRA's configs: its embeddings may be narrower than the
    encoder; ours are the encoder's width, so it equals hidden_size)."""
    words: str = ""
    """What it trains, in words, for train's start line and an export's card (str.format over the config's fields:
    a TrainConfig's or a ModelConfig's); empty: the family's masked LM, with next sentence where it has that loss."""

    @property
    def has_generator(self) -> bool:
        return self.generator_fraction > 0

    def trains(self, family: str) -> bool:
        return self.families is None or family in self.families

    def takes(self, batch_form: str) -> bool:
        return self.batch_forms is None or batch_form in self.batch_forms


OBJECTIVES: dict[str, Objective] = {o.name: o for o in (
    Objective(name="mlm", network="bert", families=None),
    Objective(name="electra", network="electra", families=("bert",), hf_model_type="electra",
              hf_pretraining_class="ElectraForPreTraining", hf_generator_class="ElectraForMaskedLM",
              generator_dir="generator", discriminator_weight=50.0, generator_fraction=0.25, nsp=False, variants=False,
              batch_forms=("padded",),
              hf_embedding_size=True, words="electra: generator {generator_fraction:g} of the width, mlm + "
                                            "{discriminator_weight:g} x replaced-token detection"),
)}
"""Every objective by its --objective name."""


def objective(name: str) -> Objective:
    """The row of `name`; a ContractError listing the objectives otherwise."""
    if name not in OBJECTIVES:
        raise ContractError(f"unknown objective {name!r}; objectives: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def of_model_type(model_type: str | None) -> Objective | None:
    """The objective whose export has this model_type (ELECTRA's "electra"); None for a family's own model_type."""
    return next((o for o in OBJECTIVES.values() if o.hf_model_type and o.hf_model_type == model_type), None)
