"""ElectraForPretraining: ELECTRA's replaced-token detection (Clark et al. 2020), a discriminator and a small generator
that share the embeddings.

In:  a ModelConfig whose objective is electra (its shape is the discriminator's; `generator_shape()` the generator's)
     and the masker's batches, as BertForPretraining takes them: input ids with the masked positions already
     [MASK]ed (or kept, or random), mlm_positions and mlm_labels (the original tokens there).
Out: a dict of losses and counts: the generator's "mlm_*" (its masked LM at the masked positions), the
     discriminator's "rtd_*" (replaced or not, every real token), and "loss" = mlm_weight x mlm + λ x rtd.

One step: the generator reads the masked input and predicts each masked position; a token is sampled there from its
softmax (no gradient flows through the sample, as in the paper); the discriminator reads the input with those
samples in place of the masks and labels every real token replaced (the sample differs from the original) or not: a
sample that happens to be the original counts as original, as the paper does. The masked input is --masking's (BERT's
80/10/10 by default; the paper's released code splits the chosen positions between [MASK] and kept tokens its own
way, not checked here): the generator is trained on it as BERT's MLM is; the discriminator sees only the samples.

Parameter names are transformers' ElectraForPreTraining's (`electra.`, `discriminator_predictions.`), and under
`generator.` those of ElectraForMaskedLM less its embeddings (the discriminator's, shared: `electra.embeddings.`):
`generator.electra.embeddings_project` (the shared embedding width to the generator's), `generator.electra.encoder`,
`generator.generator_predictions` (dense, gelu, LayerNorm back to the embedding width) and `generator.generator_lm_head`
(decoder tied to the word embeddings, its own bias). Export splits them into the two transformers directories
(downstream/export.py) with no renaming beyond that prefix.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from trainer.heads import HEADS, IGNORE_INDEX, weight_of
from trainer.model.attention import Padded
from trainer.model.bert import _classification, _Embeddings, _Encoder
from trainer.model.config import ModelConfig
from trainer.model.heads import gather
from trainer.model.init import init_bert_weights


class _Body(nn.Module):
    """The discriminator's ElectraModel: BERT's embeddings and encoder, no pooler."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embeddings = _Embeddings(cfg)
        self.encoder = _Encoder(cfg)


class _DiscriminatorPredictions(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dense_prediction = nn.Linear(cfg.hidden_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(F.gelu(self.dense(x))).squeeze(-1)  # (..., ) one logit a token: replaced


class _GeneratorBody(nn.Module):
    """The generator's ElectraModel less its embeddings (the discriminator's): a projection and its own encoder."""

    def __init__(self, cfg: ModelConfig, embedding_size: int):
        super().__init__()
        self.embeddings_project = nn.Linear(embedding_size, cfg.hidden_size) if cfg.hidden_size != embedding_size else None
        self.encoder = _Encoder(cfg)


class _GeneratorPredictions(nn.Module):
    def __init__(self, cfg: ModelConfig, embedding_size: int):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, embedding_size)
        self.LayerNorm = nn.LayerNorm(embedding_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class _Generator(nn.Module):
    def __init__(self, cfg: ModelConfig, embedding_size: int):
        super().__init__()
        self.electra = _GeneratorBody(cfg, embedding_size)
        self.generator_predictions = _GeneratorPredictions(cfg, embedding_size)
        self.generator_lm_head = nn.Linear(embedding_size, cfg.vocab_size)  # weight: tied to the word embeddings


class ElectraForPretraining(nn.Module):
    """ELECTRA's discriminator and generator (module docstring), initialised from `seed` as BERT is."""

    def __init__(self, config: ModelConfig, *, seed: int = 0):
        super().__init__()
        if not config.goal.has_generator:
            raise ValueError(f"ElectraForPretraining needs an objective with a generator, got {config.objective}")
        self.config = config
        self.generator_config = dataclasses.replace(config, objective="mlm", **config.generator_shape())  # a shape only
        self.electra = _Body(config)
        self.discriminator_predictions = _DiscriminatorPredictions(config)
        self.generator = _Generator(self.generator_config, config.hidden_size)
        self.generator.generator_lm_head.weight = self.electra.embeddings.word_embeddings.weight  # tied, shared
        self.init_weights(torch.Generator().manual_seed(seed))

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """BERT's init (trainer/model/bert.py): N(0, initializer_range) weights, zero biases, LayerNorm 1/0, [PAD] 0."""
        init_bert_weights(self, self.config.initializer_range, generator)

    def num_parameters(self, *, exported_only: bool = False) -> int:
        """Distinct parameters (the tied decoder and the shared embeddings counted once), generator included."""
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    def _keep(self, attention_mask: torch.Tensor | None, documents: torch.Tensor | None = None) -> Padded:
        return Padded(attention_mask, documents)  # padded rows (trainer/model/attention.py): no unpadded batch yet

    def encode(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
               output_hidden_states: bool = False, *, position_ids: torch.Tensor | None = None,
               documents: torch.Tensor | None = None):
        """The discriminator's (sequence_output, None: no pooler, hidden states or None), as BertForPretraining.encode
        (packed rows' `documents` and `position_ids` per document as there)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.electra.embeddings(input_ids, token_type_ids, position_ids)
        states = [x] if output_hidden_states else None
        x = self.electra.encoder(x, self._keep(attention_mask, documents), states)
        return x, None, None if states is None else tuple(states)

    def discriminator_logits(self, sequence_output: torch.Tensor) -> torch.Tensor:
        """(batch, seq) replaced-token logits: transformers' ElectraForPreTraining `logits`."""
        return self.discriminator_predictions(sequence_output)

    def generator_hidden(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                         attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None = None,
                         documents: torch.Tensor | None = None) -> torch.Tensor:
        """The generator's last hidden states (batch, seq, generator hidden) over the shared embeddings."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.electra.embeddings(input_ids, token_type_ids, position_ids)
        if self.generator.electra.embeddings_project is not None:
            x = self.generator.electra.embeddings_project(x)
        return self.generator.electra.encoder(x, self._keep(attention_mask, documents))

    def generator_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """MLM logits (..., vocab) from generator hidden states: transformers' ElectraForMaskedLM `logits`."""
        return self.generator.generator_lm_head(self.generator.generator_predictions(hidden))

    # what fill-mask reads of any of our networks (BertForPretraining has the same two): here the generator's
    masked_lm_hidden = generator_hidden
    dense_mlm_logits = generator_logits

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
                mlm_positions: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, documents: torch.Tensor | None = None,
                **unused: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Losses and counts for one batch (module docstring); the inputs are BertForPretraining.forward's (NSP and
        SBO inputs, which an ELECTRA batch may carry, are not read)."""
        cfg = self.config
        if mlm_positions is None or mlm_labels is None:
            raise ValueError("ElectraForPretraining needs mlm_positions and mlm_labels (a masked batch)")
        hidden = self.generator_hidden(input_ids, token_type_ids, attention_mask, position_ids, documents)
        logits = self.generator_logits(gather(hidden, mlm_positions).flatten(0, 1))  # (batch * P, vocab)
        labels = mlm_labels.reshape(-1).long()
        valid = labels != IGNORE_INDEX
        with torch.no_grad():  # sampled before the loss spends the logits in place; no gradient through the sample
            sampled = torch.multinomial(logits.detach().float().softmax(-1), 1).squeeze(1)  # (batch * P,)
        out = _classification(logits, mlm_labels, "mlm")
        positions = mlm_positions.long()
        shown = input_ids.gather(1, positions)  # what the generator read there: [MASK], the original or a random token
        original = input_ids.scatter(1, positions, torch.where(valid.view_as(shown), labels.view_as(shown), shown))
        replaced_input = input_ids.scatter(1, positions, torch.where(valid.view_as(shown), sampled.view_as(shown), shown))
        replaced = (replaced_input != original).float()  # (batch, seq)
        sequence_output, _, _ = self.encode(replaced_input, token_type_ids, attention_mask, position_ids=position_ids,
                                            documents=documents)
        rtd = self.discriminator_logits(sequence_output).float()  # (batch, seq)
        real = torch.ones_like(replaced, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        count = real.sum()
        loss = F.binary_cross_entropy_with_logits(rtd, replaced, reduction="none")
        out["rtd_loss"] = torch.where(real, loss, 0.0).sum() / count.clamp(min=1)
        with torch.no_grad():
            out["rtd_correct"] = (((rtd > 0).float() == replaced) & real).sum()
        out["rtd_count"] = count
        out["rtd_replaced"] = (replaced.bool() & real).sum()  # how often the generator's sample was not the original
        out["loss"] = weight_of(HEADS["mlm"], cfg) * out["mlm_loss"] + weight_of(HEADS["rtd"], cfg) * out["rtd_loss"]
        return out


GENERATOR = "generator."
TIED = ("generator.generator_lm_head.weight",)
"""Our entry that is the word embeddings under another name (transformers re-ties it on load)."""


def to_transformers(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Our state dict as (ElectraForPreTraining's tensors, ElectraForMaskedLM's): the generator's names without
    `generator.`, over the discriminator's embeddings (shared); the tied decoder left out, as save_pretrained does.
    fp32, contiguous, owning their memory (a consolidated tensor may be a view into a flat buffer)."""
    def own(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to("cpu", torch.float32).contiguous().clone()

    discriminator = {k: own(v) for k, v in state_dict.items() if not k.startswith(GENERATOR)}
    generator = {k: v for k, v in discriminator.items() if k.startswith("electra.embeddings.")}
    generator.update({k[len(GENERATOR):]: own(v) for k, v in state_dict.items() if k.startswith(GENERATOR) and k not in TIED})
    return discriminator, generator


def from_transformers(discriminator: dict[str, torch.Tensor], generator: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
    """The inverse of `to_transformers` (the generator's embeddings, the discriminator's, are not read twice); without
    a generator, the discriminator's tensors alone (the caller initialises the generator fresh)."""
    state = {k: v for k, v in discriminator.items()}
    for k, v in (generator or {}).items():
        if not k.startswith("electra.embeddings.") and GENERATOR + k not in TIED:
            state[GENERATOR + k] = v
    return state


PARTS = {"discriminator": ("electra.",), "discriminator head": ("discriminator_predictions.",), "generator": (GENERATOR,)}
"""Our tensors by part; a source holds each whole or not at all, and every part but the discriminator may be absent
(an ElectraModel has no head, an export without its generator/ no generator): they start fresh."""
BUFFERS = ("electra.embeddings.position_ids", "electra.embeddings.token_type_ids")
BARE_STARTS = ("embeddings.", "encoder.")
"""How a bare ElectraModel's names start (saved without its base model's `electra.` prefix): read under the prefix."""
"""Non-parameters older transformers versions saved; rebuilt from the config, never read."""


def load_tensors(tensors: dict, model_config: ModelConfig, where: str) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """(our state dict, the parts `tensors` lacks, the names it held that we drop) for ELECTRA `model_config`, from
    tensors under our names (a run's; an export's through `from_transformers`), or from shapes alone (the state dict
    is then empty): hf_names.from_transformers' contract, with a WeightsError naming the first tensor that does not fit."""
    from trainer.model.hf_names import WeightsError

    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in ElectraForPretraining(model_config).state_dict().items() if k not in TIED}
    ours, dropped = {}, []
    for name, value in tensors.items():
        name = f"electra.{name}" if name.startswith(BARE_STARTS) else name  # a bare ElectraModel
        if name in TIED or name in BUFFERS or name.startswith(GENERATOR + "electra.embeddings."):
            dropped.append(name)
            continue
        if name not in expected:
            raise WeightsError(f"{where}: {name} is not a tensor of an ELECTRA discriminator or generator of this shape")
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else tuple(value)
        if shape != expected[name]:
            raise WeightsError(f"{where}: {name} has shape {shape}, the config says {expected[name]}")
        ours[name] = value
    lacking = []
    for part, prefixes in PARTS.items():
        names = [k for k in expected if k.startswith(prefixes)]
        held = [k for k in names if k in ours]
        if not held:
            lacking.append(part)
        elif len(held) < len(names):
            first = next(k for k in names if k not in ours)
            raise WeightsError(f"{where}: lacks {first} ({len(names) - len(held)} of the {part}'s {len(names)} tensors missing)")
    if "discriminator" in lacking:
        raise WeightsError(f"{where}: holds no ELECTRA discriminator tensors (electra.embeddings.*, electra.encoder.*)")
    state = {k: v.detach().to("cpu", torch.float32) for k, v in ours.items() if isinstance(v, torch.Tensor)}
    return state, lacking, dropped


def generator_fraction_of(body: dict, generator: dict | None, where: str) -> float | None:
    """The generator_fraction that gives the generator of `generator` (its config.json) beside the discriminator of
    `body`; None without a generator. A generator this fraction does not reproduce (heads, ffn) is a ValueError."""
    if generator is None:
        return None
    fraction = generator.get("hidden_size", 0) / body.get("hidden_size", 768)
    shape = {"hidden_size": generator.get("hidden_size"), "num_heads": generator.get("num_attention_heads"),
             "intermediate_size": generator.get("intermediate_size")}
    heads, ffn = body.get("num_attention_heads", 12), body.get("intermediate_size", 3072)
    made = {"hidden_size": round(body.get("hidden_size", 768) * fraction), "num_heads": max(1, round(heads * fraction)),
            "intermediate_size": round(ffn * fraction)}
    if made != shape or generator.get("num_hidden_layers") != body.get("num_hidden_layers"):
        raise ValueError(f"{where}: a generator of {shape} is not the discriminator's width times one fraction at its "
                         f"depth ({made}), which is what clozeforge's ELECTRA trains")
    return fraction
