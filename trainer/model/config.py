"""ModelConfig: the family and shape of a clozeforge encoder and the weights of its pre-training losses.

In: a preset name and a vocabulary size (or every field by keyword). Out: a frozen, validated config that
`trainer.model.BertForPretraining` is built from, that `to_dict`/`from_dict` round-trip through checkpoint
metadata, and that `to_hf_config` turns into the `config.json` of the family's transformers class
(trainer/model/families/: BertForPreTraining, RobertaForMaskedLM, XLMRobertaForMaskedLM, XLMWithLMHeadModel).

Presets (parameter counts measured with `BertForPretraining(...).num_parameters()`, NSP heads included,
tied decoder counted once, vocabulary 30,522):

    tiny    2 layers  128 hidden   2 heads   512 ffn     4.4M
    mini    4 layers  256 hidden   4 heads  1024 ffn    11.3M
    small   4 layers  512 hidden   8 heads  2048 ffn    29.1M
    base   12 layers  768 hidden  12 heads  3072 ffn   110.1M   (BERT-base)
    large  24 layers 1024 hidden  16 heads  4096 ffn   336.2M   (BERT-large)
    modernbert-base   22 layers  768 hidden  12 heads  1152 GeGLU ffn  (ModernBERT-base, 149M with its 50,368 tokens)
    modernbert-large  28 layers 1024 hidden  16 heads  2624 GeGLU ffn  (ModernBERT-large)

A family whose row scales the feed-forward width (`Family.ffn_scale`: ModernBERT's GeGLU, 2/3, so its two input
projections hold what BERT's one did) takes the BERT presets' ffn times that; the modernbert-* shapes are as published.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from schemas import families, objectives
from schemas.config import Config
from schemas.errors import ContractError
from trainer.model.families import SPELLINGS

HF_CONFIG_KEYS = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
                  "num_attention_heads": "num_heads", "intermediate_size": "intermediate_size",
                  "max_position_embeddings": "max_position_embeddings", "type_vocab_size": "type_vocab_size",
                  "layer_norm_eps": "layer_norm_eps", "initializer_range": "initializer_range", "pad_token_id": "pad_token_id"}
"""transformers' config.json key → ModelConfig field, the same in every family's config class (BertConfig, RobertaConfig)."""
HF_DEFAULTS = {"vocab_size": 30522, "hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 3072,
               "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "initializer_range": 0.02,
               "pad_token_id": 0}
"""BertConfig's defaults, which transformers takes for an absent key (RobertaConfig's are BERT's too)."""

_PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512),
    "mini": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "small": dict(num_layers=4, hidden_size=512, num_heads=8, intermediate_size=2048),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
    # ModernBERT's published shapes (answerdotai/ModernBERT-base and -large config.json): GeGLU widths, taken as they are
    "modernbert-base": dict(num_layers=22, hidden_size=768, num_heads=12, intermediate_size=1152, glu_width=True),
    "modernbert-large": dict(num_layers=28, hidden_size=1024, num_heads=16, intermediate_size=2624, glu_width=True),
}
PRESET_NAMES = tuple(_PRESETS)
_ROTARY_FIELDS = ("global_attention_every", "local_window", "global_rope_theta", "local_rope_theta")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig(Config):
    vocab_size: int
    family: str = "bert"
    """The member of the BERT family (schemas/families.py): what the network has besides BERT's encoder (NSP head and
    pooler, token types, where position ids start) and the transformers class it exports to."""
    """Rows of the word-embedding table (and of the tied MLM decoder). At least the tokenizer's vocabulary;
    it may be larger (e.g. rounded up to a multiple of 64 for tensor cores), the extra ids are never produced."""
    hidden_size: int = 768
    """Width of every token representation."""
    num_layers: int = 12
    """Transformer encoder layers."""
    num_heads: int = 12
    """Attention heads per layer; must divide `hidden_size`."""
    intermediate_size: int = 3072
    """Width of the feed-forward block inside each layer (4 x hidden in BERT)."""
    max_position_embeddings: int = 512
    """Longest sequence the learned position table covers (the pair shards' max_seq_len must fit)."""
    type_vocab_size: int = 2
    """Segment ids: 0 for segment A (and [CLS]), 1 for segment B."""
    hidden_dropout: float = 0.1
    """Dropout on embeddings and on each sub-layer's output, in training mode only."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities, in training mode only."""
    layer_norm_eps: float = 1e-12
    """LayerNorm epsilon (BERT's 1e-12; transformers reads the same value from config.json)."""
    initializer_range: float = 0.02
    """Standard deviation of the normal initialisation of every weight matrix and embedding."""
    pre_layernorm: bool = False
    """Pre-LN layers (LayerNorm before each sub-layer, plus a final one) instead of BERT's post-LN. Trains more
    stably at depth with large learning rates, but transformers has no BERT class for it: export refuses it."""
    use_sbo: bool = False
    """Add SpanBERT's span-boundary-objective head (`sbo.*`). Project-only: dropped at export."""
    sbo_max_relative_positions: int = 15
    """Rows of the SBO relative-position table: SpanBERT's --max-pair-targets 15, the default of
    trainer.masking's sbo_max_positions_per_span (which should not exceed it). A span of up to 10 whole words can
    hold more word pieces; a target deeper than this shares the last row."""
    pad_token_id: int = 0
    """Id of [PAD]; its embedding row starts at zero and gets no gradient from the input side (as in HF)."""
    mlm_weight: float = 1.0
    """Weight of the masked-LM loss in `loss`."""
    nsp_weight: float = 1.0
    """Weight of the next-sentence loss in `loss`; 0 disables NSP training (RoBERTa-style) while the head's
    logits and accuracy are still reported."""
    sbo_weight: float = 1.0
    """Weight of the span-boundary loss in `loss` (used only with `use_sbo`)."""
    objective: str = "mlm"
    """The pre-training objective (schemas/objectives.py): mlm, or electra (this shape is the discriminator's; a
    generator of `generator_fraction` its width shares its embeddings: trainer/model/electra.py)."""
    generator_fraction: float = 0.25
    """ELECTRA's generator width (hidden, heads, ffn) as a fraction of the discriminator's; its depth is the same."""
    discriminator_weight: float = 50.0
    """ELECTRA's λ: the replaced-token-detection loss's weight beside the generator's MLM loss (x mlm_weight)."""
    languages: tuple[str, ...] = ()
    """The languages of a family whose token types are languages (XLM's language embeddings), a token type id the
    index of its language here; empty for every other family."""
    global_attention_every: int = 3
    """A rotary family's (ModernBERT's) layer i attends globally when i % N == 0, the others within --local-window."""
    local_window: int = 128
    """A rotary family's local window: a token attends to the tokens at most local_window // 2 away (transformers'
    `local_attention`)."""
    global_rope_theta: float = 160_000.0
    """The rotary base of the global layers (ModernBERT's 160,000 at 8,192 tokens; 10,000 in its 1,024-token phase)."""
    local_rope_theta: float = 10_000.0
    """The rotary base of the local layers."""

    def __post_init__(self) -> None:
        positive = ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                    "max_position_embeddings", "type_vocab_size", "sbo_max_relative_positions")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"ModelConfig.hidden_size ({self.hidden_size}) must be a multiple of "
                             f"num_heads ({self.num_heads})")
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"ModelConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.layer_norm_eps <= 0 or self.initializer_range <= 0:
            raise ValueError("ModelConfig.layer_norm_eps and initializer_range must be positive")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"ModelConfig.pad_token_id ({self.pad_token_id}) must be in "
                             f"[0, vocab_size={self.vocab_size})")
        for name in ("mlm_weight", "nsp_weight", "sbo_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"ModelConfig.{name} must be >= 0, got {getattr(self, name)}")
        families.family(self.family)  # a ContractError (a ValueError) naming the families otherwise
        if self.global_attention_every < 1 or self.local_window < 2 or min(self.global_rope_theta, self.local_rope_theta) <= 0:
            raise ValueError("ModelConfig: global_attention_every >= 1, local_window >= 2 and positive rotary bases, got "
                             f"{self.global_attention_every}, {self.local_window}, {self.global_rope_theta}, {self.local_rope_theta}")
        if self.row.network and (self.use_sbo or self.pre_layernorm or self.nsp_weight):
            raise ValueError(f"ModelConfig: a {self.family} model is pre-norm by construction with a masked-LM head only "
                             "(no --pre-layernorm, no span masking's SBO head, no NSP)")
        if self.row.languages:
            if len(self.languages) < 2 or len(set(self.languages)) != len(self.languages) or self.type_vocab_size != len(self.languages):
                raise ValueError(f"ModelConfig: a {self.family} model embeds two or more distinct languages, one token type "
                                 f"each; got languages {list(self.languages)} and type_vocab_size {self.type_vocab_size}")
            if self.row.ffn_ratio and self.intermediate_size != self.row.ffn_ratio * self.hidden_size:
                raise ValueError(f"ModelConfig: a {self.family} model's feed-forward width is {self.row.ffn_ratio} x hidden "
                                 f"({self.row.ffn_ratio * self.hidden_size}), got intermediate_size {self.intermediate_size}")
        elif self.languages:
            raise ValueError(f"ModelConfig: a {self.family} model has no language embeddings; languages must be empty")
        elif not self.row.token_types and self.type_vocab_size != 1:
            raise ValueError(f"ModelConfig: a {self.family} model has one token type, got type_vocab_size {self.type_vocab_size}")
        if not self.row.nsp and self.nsp_weight:
            raise ValueError(f"ModelConfig: a {self.family} model has no NSP head; nsp_weight must be 0, got {self.nsp_weight}")
        goal = objectives.objective(self.objective)  # a ContractError (a ValueError) naming the objectives otherwise
        if not goal.trains(self.family):
            raise ValueError(f"ModelConfig: --objective {self.objective} trains the {' or '.join(goal.families)} family, "
                             f"not {self.family}")
        if goal.has_generator:
            if self.nsp_weight or self.use_sbo or self.pre_layernorm:
                raise ValueError(f"ModelConfig: an {goal.name} model is post-LN with neither NSP nor SBO heads (nsp_weight 0, "
                                 "no span masking, no --pre-layernorm)")
            if not 0 < self.generator_fraction <= 1 or self.discriminator_weight <= 0:
                raise ValueError(f"ModelConfig: generator_fraction must be in (0, 1] and discriminator_weight > 0, got "
                                 f"{self.generator_fraction} and {self.discriminator_weight}")
            g = self.generator_shape()
            if g["hidden_size"] % g["num_heads"] or min(g.values()) < 1:
                raise ValueError(f"ModelConfig: a generator {self.generator_fraction} of this width has hidden "
                                 f"{g['hidden_size']} and {g['num_heads']} heads; choose another --generator-fraction")
        if self.mlm_weight == 0 and self.nsp_weight == 0 and not (self.use_sbo and self.sbo_weight > 0):
            raise ValueError("ModelConfig: every loss weight is zero, nothing would be trained")

    @classmethod
    def preset(cls, name: str, *, vocab_size: int, **overrides: Any) -> ModelConfig:
        """The named preset (see the module docstring) for `vocab_size`, with any field overridden; a family without
        token types or NSP gets one type and no NSP loss, and one that numbers positions from padding_idx + 1 the
        positions for 512 tokens after it, unless overridden."""
        if name not in _PRESETS:
            raise ValueError(f"unknown model preset {name!r}; valid presets: {', '.join(PRESET_NAMES)}")
        fields = {**_PRESETS[name], **overrides, "vocab_size": vocab_size}
        row = families.family(fields.get("family", "bert"))
        if not fields.pop("glu_width", False) and "intermediate_size" not in overrides:  # a BERT width, in the family's FFN
            fields["intermediate_size"] = round(fields["intermediate_size"] * row.ffn_scale)
        for key, value in row.model_defaults:  # the family's norm epsilon, positions, dropout (ModernBERT's)
            fields.setdefault(key, value)
        if row.languages:
            fields.setdefault("type_vocab_size", len(fields.get("languages", ())))
        elif not row.token_types:
            fields.setdefault("type_vocab_size", 1)
        if not row.nsp or not objectives.objective(fields.get("objective", "mlm")).nsp:  # ELECTRA has no NSP head either
            fields.setdefault("nsp_weight", 0.0)
        if row.position_offset == "after-pad":  # the preset's 512 tokens, numbered from padding_idx + 1 (roberta-base: 514)
            fields.setdefault("max_position_embeddings", 512 + fields.get("pad_token_id", 0) + 1)
        return cls.from_dict(fields)

    def generator_shape(self) -> dict[str, int]:
        """ELECTRA's generator: this model's hidden, heads and ffn times generator_fraction (heads at least one)."""
        f = self.generator_fraction
        return {"hidden_size": round(self.hidden_size * f), "num_heads": max(1, round(self.num_heads * f)),
                "intermediate_size": round(self.intermediate_size * f)}

    def objectives_text(self) -> str:
        """The objectives this model trains, in words (an export's card and description)."""
        if self.goal.words:
            return self.goal.words.format(**dataclasses.asdict(self))
        return "masked LM + next sentence" if self.nsp_weight else "masked LM"

    @property
    def goal(self):
        """The objective's row (schemas/objectives.py)."""
        return objectives.objective(self.objective)

    @property
    def row(self):
        """The family's row (schemas/families.py)."""
        return families.family(self.family)

    @property
    def network(self) -> str:
        """The trainer's network (trainer/model/__init__.py NETWORK_CLASSES): the family's own, else the objective's."""
        return self.row.network or self.goal.network

    @property
    def position_offset(self) -> int:
        """The position id of a sequence's first token: 0, or padding_idx + 1 for RoBERTa's (fairseq's count)."""
        return self.row.first_position(self.pad_token_id)

    @classmethod
    def architecture_of_hf(cls, body: dict[str, Any], where: str) -> dict[str, Any]:
        """The ModelConfig fields a transformers config.json fixes (its family from model_type, the shape; an absent
        key takes the config class's default, as transformers does); ContractError for a model_type of no family."""
        goal = objectives.of_model_type(body.get("model_type"))  # ELECTRA's "electra": the bert family's network
        family = families.family(goal.families[0]) if goal else families.of_model_type(body.get("model_type"), where)
        spelling = SPELLINGS[family.spelling]
        try:
            # from the class's own keys; a family without them, ModelConfig's defaults (every source states each field)
            own = spelling.fields(body) if spelling.fields is not None else {
                f.name: f.default for f in dataclasses.fields(cls) if f.name in _ROTARY_FIELDS}
        except ValueError as e:
            raise ContractError(f"{where}: {e}") from None
        if spelling.architecture is not None:  # a class whose config names the fields otherwise (XLM's emb_dim, ...)
            try:
                body = spelling.architecture(body)
            except ValueError as e:
                raise ContractError(f"{where}: {e}") from None
        shape = {ours: body.get(theirs, HF_DEFAULTS[ours]) for theirs, ours in HF_CONFIG_KEYS.items()}
        shape["pad_token_id"] = shape["pad_token_id"] or 0  # null in some configs
        if goal and body.get("embedding_size", shape["hidden_size"]) != shape["hidden_size"]:
            raise ContractError(f"{where}: embedding_size {body['embedding_size']} differs from hidden_size "
                                         f"{shape['hidden_size']}; clozeforge's ELECTRA discriminator has one width")
        languages = tuple(body["languages"]) if family.languages else ()
        return {"family": family.name, **shape, **own, "languages": languages, "pre_layernorm": False,
                **({"objective": goal.name} if goal else {})}

    @property
    def max_tokens(self) -> int:
        """The longest sequence its positions hold (RoBERTa's 514 positions hold 512 tokens after padding_idx + 1)."""
        return self.max_position_embeddings - self.position_offset

    def to_hf_config(self) -> dict[str, Any]:
        """The body of the `config.json` that the family's transformers config class reads for this model."""
        if self.pre_layernorm:
            raise ValueError("a pre-LayerNorm model has no transformers BERT-family equivalent; train with "
                             "pre_layernorm=False to export")
        row, goal = self.row, self.goal
        body = {
            "architectures": [goal.hf_pretraining_class or row.hf_pretraining_class],
            "model_type": goal.hf_model_type or row.hf_model_type,
            **({"embedding_size": self.hidden_size} if goal.hf_embedding_size else {}),  # no projection: one width
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": "gelu",  # exact erf GELU, what trainer.model uses
            "hidden_dropout_prob": self.hidden_dropout,
            "attention_probs_dropout_prob": self.attention_dropout,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "initializer_range": self.initializer_range,
            "layer_norm_eps": self.layer_norm_eps,
            "pad_token_id": self.pad_token_id,
            "position_embedding_type": "absolute",
            "classifier_dropout": None,
            "is_decoder": False,
            "add_cross_attention": False,
            "use_cache": True,
            "tie_word_embeddings": True,
            "dtype": "float32",
        }
        spelling = SPELLINGS[row.spelling]
        return spelling.hf_config(body, self) if spelling.hf_config is not None else body

    def generator_hf_config(self) -> dict[str, Any]:
        """The config.json of ELECTRA's generator (transformers' ElectraForMaskedLM): its own width and heads over
        the discriminator's embeddings (embedding_size: the discriminator's hidden, projected to its own)."""
        g = self.generator_shape()
        return {**self.to_hf_config(), "architectures": [self.goal.hf_generator_class], "hidden_size": g["hidden_size"],
                "num_attention_heads": g["num_heads"], "intermediate_size": g["intermediate_size"]}
