"""The BERT family, one row a member: what prep, the trainer, export and the downstream commands read about each.

In:  a family name (`train --family`), or what a prep run's manifest says of its data (tokenizer and packing), or
     a transformers config.json's `model_type` (`--init-from`, and the exports `embed`, `finetune` read).
Out: the `Family` row: its tokenizer and packings, its objectives, how its network differs from BERT's (token
     types, where position ids start), the transformers classes it exports to and loads as, and continued
     pretraining's and language sampling's defaults. How each family's transformers class spells our tensor names
     is the trainer's (trainer/model/families/), keyed by `Family.spelling`; everything else asks this table, never a
     family's name. The network a run trains (BERT's or ELECTRA's) is its objective's (schemas/objectives.py).

    family       tokenizer  packing                        objectives  export class            tokenizer class
    bert         wordpiece  nsp (or packed, without NSP)   mlm + nsp   BertForPreTraining      BertTokenizerFast
    roberta      bpe        full-sentences, doc-sentences  mlm         RobertaForMaskedLM      RobertaTokenizerFast
    xlm-roberta  unigram    full-sentences, doc-sentences  mlm         XLMRobertaForMaskedLM   XLMRobertaTokenizerFast
    xlm          wordpiece  full-sentences, doc-sentences  mlm + tlm   XLMWithLMHeadModel      BertTokenizerFast
                            (monolingual), tlm (pairs)
    modernbert   bpe        full-sentences, doc-sentences  mlm         ModernBertForMaskedLM   PreTrainedTokenizerFast

RoBERTa (Liu et al. 2019): BERT's network without NSP and token types, position ids from padding_idx + 1 (as
fairseq counts them: position 0 and 1 are never a token's), byte-level BPE, packed full sentences, dynamic masking
(clozeforge masks online for every family). XLM-R (Conneau et al. 2020): RoBERTa's recipe with a SentencePiece
Unigram vocabulary over many languages, sampled with temperature alpha = 0.3. XLM (Lample & Conneau 2019): BERT's
post-LN encoder with a language embedding added to every token in place of token types, masked LM on monolingual
rows and translation language modelling (TLM) on translation pairs (both sides masked, each side's tokens with its
language, positions starting again at the second side), its MLM head one projection tied to the embeddings (no
transform), languages sampled with alpha = 0.5. Its vocabulary here is WordPiece, loaded as BertTokenizerFast: XLM's
own tokenizer (Moses pre-tokenisation and fastBPE, transformers' slow XLMTokenizer) has no fast class, and the
export's tokenizer_config names the class AutoTokenizer loads. ModernBERT (Warner et al. 2024): a network of its own
(trainer/model/modernbert.py: pre-norm without biases, GeGLU, rotary positions with a global and a local base, every
third layer global and the others within a 128-token window), masked LM alone at 30% on packed rows attended per
document, trained warmup-stable-decay; its byte-level BPE here is RoBERTa's vocabulary kind, exported with
ModernBERT's own tokenizer class (PreTrainedTokenizerFast over tokenizer.json). Standard library only: prep reads it.
"""

from __future__ import annotations

import dataclasses

from schemas.errors import ContractError


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    """`--family`, and what a run, an export's card and the manifest record."""
    tokenizer: str
    """The `prep --tokenizer` kind its vocabulary is: wordpiece, bpe or unigram."""
    packings: tuple[str, ...]
    """The `prep --packing` modes it trains on, the first its default; NSP pairs carry a second segment and a label
    that only a family with NSP reads (BERT on packed rows trains without NSP: RoBERTa's ablation of BERT)."""
    objectives: tuple[str, ...]
    """Its pre-training losses: "mlm", and "nsp" for BERT."""
    spelling: str
    """How its transformers class spells our tensor names, inputs and config fields (trainer/model/families/ SPELLINGS):
    bert, roberta (also XLM-R's) or xlm."""
    token_types: bool
    """Segment ids feed the model (BERT's A/B); RoBERTa's has one type, all zeros."""
    position_offset: str
    """Where position ids start: "zero", or "after-pad" (padding_idx + 1, RoBERTa's)."""
    hf_model_type: str
    """config.json's model_type."""
    hf_pretraining_class: str
    """What export writes as `architectures`, and transformers loads with the pre-training heads."""
    hf_masked_lm_class: str
    """transformers' masked-LM class (fill-mask, and the MLM logits export is checked against)."""
    hf_tokenizer_class: str
    """What AutoTokenizer loads the vocabulary as."""
    mix_alpha: float | None = None
    """Temperature of language sampling (`--sample-languages`, unweighted `--mix`) when --mix-alpha is not given:
    multilingual BERT's 0.7, XLM-R's 0.3, XLM's 0.5."""
    languages: bool = False
    """Its token-type table holds languages (XLM's language embeddings): a token's type id is its language's index in
    the model's `languages`, a monolingual row's language its `source`, a translation pair's each side's."""
    lm_transform: bool = True
    """Its MLM head transforms the hidden state (dense, GELU, LayerNorm) before the tied decoder, as BERT's does;
    XLM's is the tied projection alone."""
    ffn_ratio: int | None = None
    """The feed-forward width its transformers class fixes, as a multiple of the hidden width (XLM's 4); None: free."""
    network: str | None = None
    """The trainer's network when the family has one of its own (trainer/model/__init__.py NETWORK_CLASSES: modernbert);
    None: the objective's (schemas/objectives.py), BERT's encoder for masked LM."""
    ffn_scale: float = 1.0
    """A named BERT shape's feed-forward width times this (ModernBERT's GeGLU: 2/3, its two input halves holding the
    parameters BERT's one projection does, as Shazeer 2020 compared GLU variants)."""
    transformers_floor: str = ""
    """The first transformers release whose classes read this family's export as the trainer computes it, where that is
    later than the project's floor (pyproject.toml): ModernBERT's 5.17 (4.56-5.0 load it with other logits, by 0.18 on
    a tiny model; 5.9-5.16 refuse its config's rope_parameters). Export and finetune say so in one line."""
    model_defaults: tuple[tuple[str, object], ...] = ()
    """ModelConfig fields the family sets unless given (ModernBERT's norm epsilon, 8,192 rotary positions, no dropout, the
    global rotary base of its 1,024-token phase)."""
    train_defaults: tuple[tuple[str, object], ...] = ()
    """`train` flags the family's recipe sets unless the user gives them (TrainConfig field, value; masking's as
    "masking.<field>"): ModernBERT's 30% masking, warmup-stable-decay with 1-sqrt decay, no dropout, batch-size warmup,
    the global rotary base of its context extension. Its decoupled weight decay is train's own (AdamW, none on norms
    and biases: trainer/optim.py); Composer's 1e-5 per step at the peak rate is torch's 0.01 at lr 1e-3."""

    @property
    def nsp(self) -> bool:
        return "nsp" in self.objectives

    def first_position(self, pad_token_id: int) -> int:
        """The position id of a sequence's first token: 0, or padding_idx + 1 (RoBERTa's, as fairseq counts)."""
        return pad_token_id + 1 if self.position_offset == "after-pad" else 0


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family(name="bert", tokenizer="wordpiece", packings=("nsp", "full-sentences", "doc-sentences"), objectives=("mlm", "nsp"), spelling="bert",
           token_types=True, position_offset="zero", hf_model_type="bert", hf_pretraining_class="BertForPreTraining",
           hf_masked_lm_class="BertForMaskedLM", hf_tokenizer_class="BertTokenizerFast", mix_alpha=0.7),
    Family(name="roberta", tokenizer="bpe", packings=("full-sentences", "doc-sentences"), objectives=("mlm",),
           spelling="roberta", token_types=False, position_offset="after-pad", hf_model_type="roberta",
           hf_pretraining_class="RobertaForMaskedLM", hf_masked_lm_class="RobertaForMaskedLM",
           hf_tokenizer_class="RobertaTokenizerFast"),
    Family(name="xlm-roberta", tokenizer="unigram", packings=("full-sentences", "doc-sentences"), objectives=("mlm",),
           spelling="roberta", token_types=False, position_offset="after-pad", hf_model_type="xlm-roberta",
           hf_pretraining_class="XLMRobertaForMaskedLM", hf_masked_lm_class="XLMRobertaForMaskedLM",
           hf_tokenizer_class="XLMRobertaTokenizerFast", mix_alpha=0.3),
    Family(name="xlm", tokenizer="wordpiece", packings=("full-sentences", "doc-sentences", "tlm"), objectives=("mlm", "tlm"),
           spelling="xlm", token_types=False, position_offset="zero", hf_model_type="xlm",
           hf_pretraining_class="XLMWithLMHeadModel", hf_masked_lm_class="XLMWithLMHeadModel",
           hf_tokenizer_class="BertTokenizerFast", mix_alpha=0.5, languages=True, lm_transform=False, ffn_ratio=4),
    Family(name="modernbert", tokenizer="bpe", packings=("full-sentences", "doc-sentences"), objectives=("mlm",),
           spelling="modernbert", token_types=False, position_offset="zero", hf_model_type="modernbert",
           hf_pretraining_class="ModernBertForMaskedLM", hf_masked_lm_class="ModernBertForMaskedLM",
           hf_tokenizer_class="PreTrainedTokenizerFast", network="modernbert", ffn_scale=2 / 3, transformers_floor="5.17",
           model_defaults=(("layer_norm_eps", 1e-5), ("max_position_embeddings", 8192), ("hidden_dropout", 0.0),
                           ("attention_dropout", 0.0), ("global_rope_theta", 10_000.0)),
           train_defaults=(("masking.mask_prob", 0.3), ("schedule", "wsd"), ("dropout", 0.0), ("batch_warmup_ratio", 0.05),
                           ("phase2_rope_theta", 160_000.0))),
)}
"""Every family by its --family name."""


def family(name: str) -> Family:
    """The row of `name`; a ContractError listing the families otherwise."""
    if name not in FAMILIES:
        raise ContractError(f"unknown family {name!r}; families: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def of_data(tokenizer: str, packing: str) -> Family:
    """The family a prep run's data is for: the first whose tokenizer it is and which trains on its packing."""
    found = [f for f in FAMILIES.values() if f.tokenizer == tokenizer and packing in f.packings]
    if not found:
        rows = "; ".join(f"{f.name}: {f.tokenizer}, {'/'.join(f.packings)}" for f in FAMILIES.values())
        raise ContractError(f"no family trains on a {tokenizer} vocabulary with {packing} rows ({rows})")
    return found[0]


def _by_model_type(model_type: str | None) -> Family | None:
    return next((f for f in FAMILIES.values() if f.hf_model_type == model_type), None)


def of_model_type(model_type: str, where: str) -> Family:
    """The family of a transformers config.json's model_type (an export, a checkpoint to --init-from)."""
    found = _by_model_type(model_type)
    if found is not None:
        return found
    known = ", ".join(f.hf_model_type for f in FAMILIES.values())
    raise ContractError(f"{where}: model_type {model_type!r} is not a family clozeforge trains ({known})")


def transformers_problem(model_type: str | None, version: str) -> str:
    """Why transformers `version` cannot read an export of `model_type`'s family as the trainer computes it (one line),
    or '' (also for a model_type that is no family's: a public encoder's is transformers' own business)."""
    from packaging.version import Version

    row = _by_model_type(model_type)
    if row is None or not row.transformers_floor or Version(version) >= Version(row.transformers_floor):
        return ""
    return (f"a {row.name} export needs transformers>={row.transformers_floor} (earlier releases read its config "
            f"otherwise, or refuse it); this environment has {version}: pip install -U 'transformers>={row.transformers_floor}'")


def refusal(chosen: Family, tokenizer: str, packing: str) -> str | None:
    """Why `chosen` cannot train on data of this tokenizer and packing (one line), or None."""
    if packing not in chosen.packings:
        return (f"--family {chosen.name} trains on {' or '.join(chosen.packings)} rows; this data is {packing} "
                f"(prep --packing {chosen.packings[0]})")
    if tokenizer != chosen.tokenizer:
        return (f"--family {chosen.name} uses a {chosen.tokenizer} vocabulary; this data's is {tokenizer} "
                f"(prep --tokenizer {chosen.tokenizer})")
    return None
