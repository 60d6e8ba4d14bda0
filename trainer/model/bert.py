"""BertForPretraining: a BERT-family encoder with MLM, NSP (BERT's) and (optionally) SpanBERT SBO heads, and any head
of trainer/heads.py that brings a module of its own (trainer/model/heads.py holds the heads' modules).

In: a `ModelConfig` and padded batches of token ids, segment ids and an attention mask, plus the masker's
targets (masked positions and their labels, next-sentence labels, span boundaries). Out: a dict of logits,
losses and correct/total counts, each head's loss weighted in `loss` by its row's weight (trainer/heads.py).

The family (ModelConfig.family, schemas/families.py) decides what the network has besides BERT's encoder: the
pooler and NSP head (BERT), one token type and position ids from padding_idx + 1 (RoBERTa, XLM-R), languages for token
types and an MLM head without its transform (XLM). Parameter names are
those of transformers' `BertForPreTraining` state dict, one to one, in every family: this model's
`state_dict()` has exactly the same keys (the tied `cls.predictions.decoder.weight` / `.decoder.bias` entries
included, as transformers lists them), plus `bert.encoder.LayerNorm.*` when `pre_layernorm`, `sbo.*` when
`use_sbo` and `heads.*` for a head row's own module (all project-only). Export drops those and the tied duplicates and spells the rest as the family's
transformers class does (trainer/model/families/: RoBERTa's `roberta.` and `lm_head.`).

MLM logits are computed at the masked positions only ("sparse prediction"): the hidden states are gathered to
(batch, P, hidden) before the transform and the vocabulary-sized decoder. With 15% masking that is ~1/7 of
the dense decoder work, which for small models dominates a step (vocabulary 30,522 vs hidden 128-768);
`python bench/run.py train` measures the gain (its `dense_ratio`).

Two CPU-only shortcuts keep the arithmetic and change only how it is computed (`bench/README.md` has the
profiles): dropout masks are cut from 16-bit lanes of full 64-bit random words (`dropout`; torch's bernoulli draws
one random number per element and was 15% of a CPU step), and the MLM/NSP/SBO losses are one softmax
cross-entropy with its own backward (`SoftmaxCrossEntropy`: three passes over the logits forward and one back,
where log_softmax + nll_loss + argmax made about ten). On a GPU (`cpu_kernels`), `dropout` is F.dropout, attention
is SDPA with its fused kernels and the losses are F.cross_entropy: the code transformers runs, which torch.compile
traces as one graph (the CPU's in-place loss would break it in two at each loss).

NOTE: every cross-module weight use (the tied decoder in the MLM and SBO heads) goes through the owning
module's forward, never a raw `.weight` access, so DeepSpeed ZeRO-3's gather hooks see it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trainer.heads import HEADS, IGNORE_INDEX, project_only_prefixes, weight_of
from trainer.model.attention import Packed, Padded, layout_of
from trainer.model.config import ModelConfig
from trainer.model.heads import PreTrainingHeads, SpanBoundaryHead, gather, own_heads, own_losses
from trainer.model.init import init_bert_weights

_LANE_LEVELS = 1 << 16  # a dropout decision per 16-bit lane: p is rounded to a multiple of 1/65,536


def cpu_kernels(x: torch.Tensor) -> bool:
    """Whether `x`'s computations take this module's CPU-only shortcuts (dropout's lane masks, attention written
    out, the in-place softmax cross-entropy); elsewhere the model is torch's own ops, which compile into one graph."""
    return x.device.type == "cpu"


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, F.dropout's contract (zero with probability p, scale the rest by 1/(1-p)).

    On a CPU the mask comes from 16-bit lanes of 64-bit random words (four decisions per draw of the generator,
    against one per element in torch's bernoulli, which is single-threaded there: 4x faster for the mask); p is
    rounded to a multiple of 1/65,536 (0.1 becomes 0.100006) and the scale follows the rounded p. Elsewhere
    this is F.dropout, whose fused kernels are already cheap. Fine-tuning on a CPU gives transformers' encoders
    the same masks (downstream/finetune/cpu_kernels.py)."""
    if not training or p == 0.0:
        return x
    if not cpu_kernels(x):
        return F.dropout(x, p, True)
    drop = round(p * _LANE_LEVELS)
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)  # every bit uniform
    keep = words.view(torch.int16)[:n].view(x.shape) >= drop - _LANE_LEVELS // 2
    return x * keep.to(x.dtype).mul_(_LANE_LEVELS / (_LANE_LEVELS - drop))


class _Dropout(nn.Module):
    """`dropout` as a module (no parameters, so the state dict is unchanged)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


class _Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = _Dropout(cfg.hidden_dropout)

        self.position_offset = cfg.position_offset  # 0 for BERT; padding_idx + 1 for RoBERTa's (fairseq's count)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, seq) ids -> (batch, seq, hidden); packed (tokens,) ids with each token's `position_ids` (its place in
        its row) -> (tokens, hidden). No `token_type_ids`: no token-type row is added (XLM's text of no named language,
        as transformers' XLM without `langs`)."""
        # NOTE: RoBERTa numbers a padded position padding_idx (transformers' create_position_ids_from_input_ids),
        # here it goes on counting: the same ids at every real token, and a padded position is attended by none.
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[-1], device=input_ids.device)  # (seq,), broadcast over batch
        x = self.word_embeddings(input_ids)
        if token_type_ids is not None:
            x = x + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids + self.position_offset)
        return self.dropout(self.LayerNorm(x))


class _SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads, self.p_drop = cfg.num_heads, cfg.attention_dropout
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor, layout: Padded | Packed) -> torch.Tensor:
        p = self.p_drop if self.training else 0.0
        return layout.attend(self.query(x), self.key(x), self.value(x), self.num_heads, self.attend, p)

    @staticmethod
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, p: float) -> torch.Tensor:
        """Attention over (rows, heads, seq, head_dim), `bias` an additive key mask or None, `p` the dropout."""
        if p > 0 and cpu_kernels(q):
            # SDPA's CPU math path, written out so the probabilities' dropout is `dropout`'s cheap mask
            scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1]))  # (rows, heads, seq, seq)
            if bias is not None:
                scores = scores + bias
            return dropout(scores.softmax(-1), p, True) @ v
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)


class _DenseNorm(nn.Module):
    """A projection back to hidden size, dropout, and the LayerNorm of the sub-layer (HF's *Output)."""

    def __init__(self, cfg: ModelConfig, in_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = _Dropout(cfg.hidden_dropout)


class _Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self = _SelfAttention(cfg)
        self.output = _DenseNorm(cfg, cfg.hidden_size)


class _Intermediate(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)


class _Layer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre_ln = cfg.pre_layernorm
        self.attention = _Attention(cfg)
        self.intermediate = _Intermediate(cfg)
        self.output = _DenseNorm(cfg, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, layout: Padded | Packed) -> torch.Tensor:
        attn, ffn = self.attention.output, self.output
        if self.pre_ln:  # the sub-layers' LayerNorms move to their inputs; the residual stream stays un-normed
            x = x + attn.dropout(attn.dense(self.attention.self(attn.LayerNorm(x), layout)))
            return x + ffn.dropout(ffn.dense(F.gelu(self.intermediate.dense(ffn.LayerNorm(x)))))
        x = attn.LayerNorm(x + attn.dropout(attn.dense(self.attention.self(x, layout))))
        return ffn.LayerNorm(x + ffn.dropout(ffn.dense(F.gelu(self.intermediate.dense(x)))))


class _Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layer = nn.ModuleList(_Layer(cfg) for _ in range(cfg.num_layers))
        # Pre-LN leaves the last layer's output un-normalised; this final norm is project-only.
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if cfg.pre_layernorm else None

    def forward(self, x: torch.Tensor, layout, states: list | None = None) -> torch.Tensor:
        """Every layer over `x` in `layout` (trainer/model/attention.py), then the pre-LN final norm; `states`, when
        given, gets each layer's output (the last one normalised), as transformers' hidden states."""
        for layer in self.layer:
            x = layer(x, layout)
            if states is not None:
                states.append(x)
        if self.LayerNorm is not None:
            x = self.LayerNorm(x)
            if states is not None:
                states[-1] = x
        return x


class _Pooler(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, first_tokens: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(first_tokens))  # (batch, hidden), from each row's [CLS]


class _Bert(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embeddings = _Embeddings(cfg)
        self.encoder = _Encoder(cfg)
        self.pooler = _Pooler(cfg) if cfg.row.nsp else None  # what the NSP head reads; RoBERTa's masked LM has none



class SoftmaxCrossEntropy(torch.autograd.Function):
    """(summed cross-entropy, correct count, spent logits) of (N, C) float logits against (N,) labels, IGNORE_INDEX rows
    left out.

    F.cross_entropy's value and gradient, in fewer passes over the logits and no (N, C) buffer of its own: forward
    turns the logits into exp(logits - max) in place (they come back as the third output, spent: the caller
    must not read them) and keeps the row sums; backward turns that buffer into the gradient in place (one
    multiply plus a scatter at the labels). A row is correct when its label's logit equals the row's maximum,
    which is argmax == label except that a tie counts as correct. In place because the MLM logits are the
    largest tensor of a step ((predictions, vocabulary), 20 MB at 640 x 8,192) and a fresh one costs its page
    faults under glibc's default allocator."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        valid = labels != IGNORE_INDEX  # (N,)
        index = labels.clamp(min=0)[:, None]  # (N, 1), any class for the left-out rows
        top = logits.amax(-1, keepdim=True)  # (N, 1)
        target = logits.gather(1, index)  # (N, 1), before the logits are overwritten
        exp = logits.sub_(top).exp_()  # (N, C), the logits' own storage
        total = exp.sum(-1, keepdim=True)  # (N, 1)
        loss = torch.where(valid, (top + total.log() - target).squeeze(1), 0.0).sum()
        correct = ((target >= top).squeeze(1) & valid).sum()
        ctx.mark_dirty(logits)
        ctx.save_for_backward(exp, total, index, valid)
        ctx.mark_non_differentiable(correct, exp)
        ctx.set_materialize_grads(False)  # else autograd zero-fills an (N, C) gradient for `exp` (3% of a step)
        return loss, correct, exp

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_correct: torch.Tensor, _grad_spent: torch.Tensor):
        if getattr(ctx, "spent", False):
            raise RuntimeError("SoftmaxCrossEntropy: a second backward through the same loss is not supported")
        ctx.spent = True  # the gradient is built in the saved buffer
        exp, total, index, valid = ctx.saved_tensors
        weight = torch.where(valid, grad_loss, 0.0)[:, None]  # (N, 1)
        grad = exp.mul_(weight / total)  # softmax, scaled
        return grad.scatter_add_(1, index, -weight), None  # minus one at each label


def _classification(logits: torch.Tensor, labels: torch.Tensor, prefix: str) -> dict[str, torch.Tensor]:
    """Mean cross-entropy over labels != IGNORE_INDEX (0 when there are none, never NaN) and correct/count totals.
    Float32 logits are spent (overwritten, see SoftmaxCrossEntropy); other dtypes are copied to float32 first."""
    # 2-D logits go in as they are: a reshape would hand the loss a view, and overwriting a view in place makes
    # autograd route the base's gradient through a copy of it (CopySlices), the 20 MB this loss exists to save
    flat_logits = (logits if logits.dim() == 2 else logits.reshape(-1, logits.shape[-1])).float()
    flat_labels = labels.reshape(-1).long()
    count = (flat_labels != IGNORE_INDEX).sum()
    if cpu_kernels(flat_logits):
        loss_sum, correct, _spent = SoftmaxCrossEntropy.apply(flat_logits, flat_labels)
    else:  # F.cross_entropy, which torch.compile fuses (the in-place Function above would break the graph there)
        loss_sum = F.cross_entropy(flat_logits, flat_labels, ignore_index=IGNORE_INDEX, reduction="sum")
        with torch.no_grad():  # a tie counts as correct, as above
            target = flat_logits.gather(1, flat_labels.clamp(min=0)[:, None])
            correct = ((target >= flat_logits.amax(-1, keepdim=True)).squeeze(1) & (flat_labels != IGNORE_INDEX)).sum()
    return {f"{prefix}_loss": loss_sum / count.clamp(min=1), f"{prefix}_correct": correct, f"{prefix}_count": count}


def distinct_parameters(model: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Parameters of `model`, a tied one counted once, leaving out those whose names start with `skip`."""
    seen = {id(p): p for name, p in model.named_parameters() if not (skip and name.startswith(skip))}
    return sum(p.numel() for p in seen.values())


class BertForPretraining(nn.Module):
    """BERT with MLM + NSP heads (and SBO when `config.use_sbo`), initialised from `seed`."""

    def __init__(self, config: ModelConfig, *, seed: int = 0):
        super().__init__()
        self.config = config
        self.bert = _Bert(config)
        self.cls = PreTrainingHeads(config)
        self.sbo = SpanBoundaryHead(config) if config.use_sbo else None
        self.heads = own_heads(config)  # a head row's own module (trainer/heads.py); none of the shipped heads
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight  # tied, as in BERT
        self.init_weights(torch.Generator().manual_seed(seed))

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """BERT's init: weights ~ N(0, initializer_range), biases 0, LayerNorm 1/0, the [PAD] embedding row 0.

        Draws from `generator` only (a CPU generator for a CPU-built model), in module order, so the same seed
        gives the same weights on every rank."""
        init_bert_weights(self, self.config.initializer_range, generator)
        self.cls.predictions.bias.zero_()

    def num_parameters(self, *, exported_only: bool = False) -> int:
        """Distinct parameters (the tied decoder counted once); `exported_only` leaves out project-only heads."""
        return distinct_parameters(self, (*project_only_prefixes(), "bert.encoder.LayerNorm") if exported_only else ())

    def encode(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None, output_hidden_states: bool = False, *,
               cu_seqlens: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
               documents: torch.Tensor | None = None, row_starts: torch.Tensor | None = None):
        """(sequence_output (batch, seq, hidden), pooled (batch, hidden; None without a pooler), hidden states or None).

        `attention_mask` is 1 for real tokens and 0 for padding, or None when nothing is padded. In a family whose token
        types are languages (XLM's), `token_type_ids` are language ids, and None adds no language embedding. A packed batch
        (trainer/data/batch_forms.py) gives (tokens,) ids, token types and `position_ids` (each token's place in its row)
        with `cu_seqlens` (batch + 1,) instead, and gets (tokens, hidden) back (trainer/model/attention.py). The hidden
        states, when asked for, are the embedding output then each layer's output (num_layers + 1 tensors),
        as transformers returns them. Packed rows that record their documents (trainer/data/collate.py) come with
        `documents` (padded: (batch, seq), attention block-diagonal) or a cu_seqlens segment a document and `row_starts`
        (unpadded: where each row, whose first token the pooler reads, starts)."""
        if token_type_ids is None and not self.config.row.languages:  # XLM's: no language named, none added
            token_type_ids = torch.zeros_like(input_ids)
        layout = layout_of(attention_mask, cu_seqlens, self.config.max_tokens, documents, row_starts)
        x = self.bert.embeddings(input_ids, token_type_ids, position_ids)
        states = [x] if output_hidden_states else None
        x = self.bert.encoder(x, layout, states)
        pooled = self.bert.pooler(layout.first_tokens(x)) if self.bert.pooler is not None else None
        return x, pooled, None if states is None else tuple(states)

    def masked_lm_hidden(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                         attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The hidden states (batch, seq, hidden) the MLM head reads (fill-mask asks any of our networks for them)."""
        return self.encode(input_ids, token_type_ids, attention_mask)[0]

    def dense_mlm_logits(self, sequence_output: torch.Tensor) -> torch.Tensor:
        """MLM logits at every position, (batch, seq, vocab): what transformers' prediction_logits holds."""
        return self.cls.predictions(sequence_output)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, mlm_positions: torch.Tensor | None = None,
                mlm_labels: torch.Tensor | None = None, next_sentence_label: torch.Tensor | None = None,
                sbo_left: torch.Tensor | None = None, sbo_right: torch.Tensor | None = None,
                sbo_rel_pos: torch.Tensor | None = None, sbo_labels: torch.Tensor | None = None,
                cu_seqlens: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                documents: torch.Tensor | None = None, row_starts: torch.Tensor | None = None,
                **targets: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Logits, losses and counts for one batch.

        input_ids, token_type_ids, attention_mask: (batch, seq).
        mlm_positions, mlm_labels: (batch, P); padding entries have label IGNORE_INDEX (their position may be anything
            in range, e.g. 0).
        A packed batch (`encode`: cu_seqlens, position_ids, no attention_mask) has every per-prediction input as (N,)
            real predictions, positions counted in the packed tokens; its logits are (N, vocab).
        next_sentence_label: (batch,), 1 when segment B is a random next (the shards' `is_random_next`).
        sbo_left, sbo_right: (batch, P) positions of the tokens just outside each target's span;
        sbo_rel_pos: (batch, P) 0-based offset of the target inside its span; sbo_labels: (batch, P), defaulting
            to mlm_labels (SpanBERT predicts every span token with both objectives).
        targets: the targets of a head with its own module (`heads`), as its row names them.

        Returns "nsp_logits" (batch, 2) always in a family with NSP (none in RoBERTa's); "mlm_logits" (batch, P, vocab) with mlm_positions and no
        mlm_labels; "sbo_logits" (batch, P, vocab) with the SBO inputs, `use_sbo` and no labels (with labels
        the loss computes in the logits' storage, the step's largest tensor, so they are not returned); per
        objective with labels,
        "<obj>_loss" (mean over labelled entries), "<obj>_correct" and "<obj>_count" (0-dim int tensors, no
        grad); and "loss", the config-weighted sum of the losses present. A loss with weight 0 stays in the
        sum (times 0) so every parameter gets a gradient each step, which DDP and ZeRO-2/3 expect.
        """
        cfg = self.config
        sequence_output, pooled, _ = self.encode(input_ids, token_type_ids, attention_mask, cu_seqlens=cu_seqlens,
                                                 position_ids=position_ids, documents=documents, row_starts=row_starts)
        out: dict[str, torch.Tensor] = {} if pooled is None else {"nsp_logits": self.cls.seq_relationship(pooled)}
        weighted: list[torch.Tensor] = []
        if mlm_positions is not None:
            # 2-D logits (batch * P, vocab), the decoder's own output and no view of it, which the loss spends
            hidden = gather(sequence_output, mlm_positions)
            logits = self.cls.predictions(hidden.reshape(-1, hidden.shape[-1]))
            if mlm_labels is None:
                out["mlm_logits"] = logits.view(*mlm_positions.shape, -1)  # (batch, P, vocab)
            else:
                out.update(_classification(logits, mlm_labels, "mlm"))
                weighted.append(weight_of(HEADS["mlm"], cfg) * out["mlm_loss"])
        if next_sentence_label is not None and "nsp_logits" in out:
            out.update(_classification(out["nsp_logits"].clone(), next_sentence_label, "nsp"))
            weighted.append(weight_of(HEADS["nsp"], cfg) * out["nsp_loss"])
        if self.sbo is not None and sbo_left is not None and sbo_right is not None and sbo_rel_pos is not None:
            span = self.sbo(sequence_output, sbo_left, sbo_right, sbo_rel_pos)  # (batch, P, hidden)
            logits = self.cls.predictions.decoder(span.reshape(-1, span.shape[-1]))  # (batch * P, vocab)
            labels = sbo_labels if sbo_labels is not None else mlm_labels
            if labels is None:
                out["sbo_logits"] = logits.view(*sbo_left.shape, -1)
            else:
                out.update(_classification(logits, labels, "sbo"))
                weighted.append(weight_of(HEADS["sbo"], cfg) * out["sbo_loss"])
        if len(self.heads):
            batch = {"mlm_positions": mlm_positions, "mlm_labels": mlm_labels, "next_sentence_label": next_sentence_label,
                     "cu_seqlens": cu_seqlens, **targets}
            found, more = own_losses(self.heads, cfg, sequence_output, batch)
            out.update(found)
            weighted += more
        if weighted:
            out["loss"] = torch.stack(weighted).sum()
        return out
