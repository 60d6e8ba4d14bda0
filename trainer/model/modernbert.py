"""ModernBertForPretraining: ModernBERT's encoder (Warner et al. 2024) and its masked-LM head, under the tensor names of
transformers' `ModernBertForMaskedLM`, one to one.

In:  a `ModelConfig` of the modernbert family (schemas/families.py) and batches as BertForPretraining takes them:
     padded (batch, seq) ids under an attention mask, or packed (tokens,) ids with cu_seqlens and each token's position
     (trainer/model/attention.py); `documents` (batch, seq) for padded rows attended per document; the masked positions
     and labels. Out: the same dict of logits, losses and counts as BertForPretraining's (MLM only).

The network, as transformers computes it (its modeling_modernbert.py), so an export's logits match ours:
    embeddings   token embeddings, LayerNorm (no bias), dropout; no position table and no token types
    layer i      x + Wo(attention(rope(Wqkv(attn_norm(x))))), then x + Wo(drop(gelu(a) * g)) for (a, g) = Wi(mlp_norm(x));
                 layer 0 has no attn_norm (the embeddings' norm is its input's); no linear layer has a bias
    attention    global in layer i when i % global_attention_every == 0, rotary base global_rope_theta; else within
                 local_window // 2 positions on either side, base local_rope_theta
    final_norm   then the head: LayerNorm(gelu(dense(x))) and the decoder, tied to the embeddings, with a bias

Rotary embeddings are computed in fp32 from each token's position id (its place in its document in a packed row), so
a document attends in a packed row as it does alone. As in bert.py, MLM logits are computed at the masked positions
only, and the CPU's losses are bert.py's in-place softmax cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainer.heads import HEADS, OWN_MODULES, project_only_prefixes, weight_of
from trainer.model.attention import layout_of
from trainer.model.bert import _classification, cpu_kernels, distinct_parameters, dropout
from trainer.model.config import ModelConfig
from trainer.model.heads import gather, own_heads, own_losses


def _norm(cfg: ModelConfig) -> nn.LayerNorm:
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=False)


def rotary(position_ids: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each position_ids' shape + (1, head_dim), fp32: the rotation of each position (transformers' default
    rope: inverse frequencies theta ** (-2i / head_dim), each frequency twice, the halves rotated together)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=position_ids.device) / head_dim))
    freqs = position_ids[..., None].float() * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)[..., None, :]  # (..., 1, head_dim): one rotation for every head
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int) -> torch.Tensor:
    """(..., hidden) queries or keys rotated by position, computed in fp32 and returned in x's dtype."""
    shape = x.shape
    h = x.view(*shape[:-1], heads, shape[-1] // heads).float()  # (..., heads, head_dim)
    half = h.shape[-1] // 2
    turned = torch.cat((-h[..., half:], h[..., :half]), dim=-1)
    return (h * cos + turned * sin).to(x.dtype).view(shape)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, p: float) -> torch.Tensor:
    """Attention over (rows, heads, seq, head_dim), written out on a CPU in training for bert.py's cheap dropout."""
    if p > 0 and cpu_kernels(q):
        scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        if bias is not None:
            scores = scores + bias
        return dropout(scores.softmax(-1), p, True) @ v
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)


class _Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.norm = _norm(cfg)
        self.p = cfg.hidden_dropout

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return dropout(self.norm(self.tok_embeddings(input_ids)), self.p, self.training)


class _Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.heads, self.p = cfg.num_heads, cfg.attention_dropout
        self.is_global = index % cfg.global_attention_every == 0
        self.window = None if self.is_global else cfg.local_window
        self.Wqkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)  # [q | k | v], heads inside each
        self.Wo = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, layout, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        q, k, v = self.Wqkv(x).chunk(3, dim=-1)
        q, k = rotate(q, *rope, self.heads), rotate(k, *rope, self.heads)
        p = self.p if self.training else 0.0
        out = layout.attend(q.contiguous(), k.contiguous(), v.contiguous(), self.heads, _attend, p, window=self.window)
        return dropout(self.Wo(out), p, True)


class _MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.Wi = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)  # [input | gate]
        self.Wo = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.p = cfg.hidden_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(dropout(F.gelu(a) * gate, self.p, self.training))


class _Layer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.attn_norm = _norm(cfg) if index else nn.Identity()  # layer 0 reads the embeddings' norm
        self.attn = _Attention(cfg, index)
        self.mlp_norm = _norm(cfg)
        self.mlp = _MLP(cfg)

    def forward(self, x: torch.Tensor, layout, ropes: dict[bool, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), layout, ropes[self.attn.is_global])
        return x + self.mlp(self.mlp_norm(x))


class _Model(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embeddings = _Embeddings(cfg)
        self.layers = nn.ModuleList(_Layer(cfg, i) for i in range(cfg.num_layers))
        self.final_norm = _norm(cfg)


class _Head(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.norm = _norm(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(x)))


class ModernBertForPretraining(nn.Module):
    """ModernBERT with its masked-LM head, initialised from `seed`; state-dict keys are ModernBertForMaskedLM's."""

    def __init__(self, config: ModelConfig, *, seed: int = 0):
        super().__init__()
        self.config = config
        self.model = _Model(config)
        self.head = _Head(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.heads = own_heads(config)
        self.decoder.weight = self.model.embeddings.tok_embeddings.weight  # tied, as transformers ties them
        self.init_weights(torch.Generator().manual_seed(seed))

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """ModernBERT's init: weights ~ N(0, std) truncated at 2 std, std initializer_range for the embeddings and the
        input projections, initializer_range / sqrt(2 x layers) for the output projections and the head (transformers'
        _init_weights); norms 1, the decoder's bias 0, the [PAD] row 0. Drawn in module order from `generator` only."""
        std = self.config.initializer_range
        out = std / (2.0 * self.config.num_layers) ** 0.5

        def draw(weight: torch.Tensor, sigma: float) -> None:
            weight.copy_(torch.randn(weight.shape, generator=generator).clamp_(-2, 2).mul_(sigma))  # clipped, not redrawn

        draw(self.model.embeddings.tok_embeddings.weight, std)
        self.model.embeddings.tok_embeddings.weight[self.config.pad_token_id].zero_()
        for layer in self.model.layers:
            draw(layer.attn.Wqkv.weight, std)
            draw(layer.attn.Wo.weight, out)
            draw(layer.mlp.Wi.weight, std)
            draw(layer.mlp.Wo.weight, out)
        draw(self.head.dense.weight, out)
        for module in self.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
        self.decoder.bias.zero_()

    def num_parameters(self, *, exported_only: bool = False) -> int:
        """Distinct parameters (the tied decoder counted once); `exported_only` leaves out project-only heads."""
        return distinct_parameters(self, project_only_prefixes() if exported_only else ())

    def encode(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None, output_hidden_states: bool = False, *,
               cu_seqlens: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
               documents: torch.Tensor | None = None, row_starts: torch.Tensor | None = None):
        """(sequence_output after the final norm, None (no pooler), hidden states or None), as BertForPretraining's.
        `token_type_ids` are ignored (one segment). Padded rows: position ids default to 0 .. seq - 1, and `documents`
        (batch, seq) makes attention block-diagonal; packed rows take `position_ids` and `cu_seqlens` (`row_starts`,
        where the rows start when a segment is a document, is read by no pooler here)."""
        cfg = self.config
        layout = layout_of(attention_mask, cu_seqlens, cfg.max_tokens, documents)
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[-1], device=input_ids.device)  # (seq,), broadcast over rows
        d = cfg.hidden_size // cfg.num_heads
        ropes = {True: rotary(position_ids, d, cfg.global_rope_theta), False: rotary(position_ids, d, cfg.local_rope_theta)}
        x = self.model.embeddings(input_ids)
        states = [x] if output_hidden_states else None
        for layer in self.model.layers:
            x = layer(x, layout, ropes)
            if states is not None:
                states.append(x)
        x = self.model.final_norm(x)
        if states is not None:
            states[-1] = x  # transformers' last hidden state is the normed one
        return x, None, None if states is None else tuple(states)

    def masked_lm_hidden(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                         attention_mask: torch.Tensor | None) -> torch.Tensor:
        return self.encode(input_ids, token_type_ids, attention_mask)[0]

    def dense_mlm_logits(self, sequence_output: torch.Tensor) -> torch.Tensor:
        """MLM logits at every position, (batch, seq, vocab): ModernBertForMaskedLM's logits."""
        return self.decoder(self.head(sequence_output))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, mlm_positions: torch.Tensor | None = None,
                mlm_labels: torch.Tensor | None = None, cu_seqlens: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, documents: torch.Tensor | None = None,
                row_starts: torch.Tensor | None = None, **targets: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """BertForPretraining.forward's contract for the masked LM (and a head row's own module): "mlm_logits" without
        labels, "mlm_loss", "_correct", "_count" and "loss" with them. Other targets (NSP's, SBO's) are not this
        network's and are ignored, as is `row_starts` (no pooler reads a row's first token)."""
        cfg = self.config
        sequence_output, _, _ = self.encode(input_ids, None, attention_mask, cu_seqlens=cu_seqlens,
                                            position_ids=position_ids, documents=documents)
        out: dict[str, torch.Tensor] = {}
        weighted: list[torch.Tensor] = []
        if mlm_positions is not None:
            hidden = gather(sequence_output, mlm_positions)
            logits = self.decoder(self.head(hidden.reshape(-1, hidden.shape[-1])))  # (batch * P, vocab)
            if mlm_labels is None:
                out["mlm_logits"] = logits.view(*mlm_positions.shape, -1)
            else:
                out.update(_classification(logits, mlm_labels, "mlm"))
                weighted.append(weight_of(HEADS["mlm"], cfg) * out["mlm_loss"])
        if len(self.heads):
            batch = {"mlm_positions": mlm_positions, "mlm_labels": mlm_labels, "cu_seqlens": cu_seqlens, **targets}
            found, more = own_losses(self.heads, cfg, sequence_output, batch)
            out.update(found)
            weighted += more
        if weighted:
            out["loss"] = torch.stack(weighted).sum()
        return out


PARTS: dict[str, tuple[str, ...]] = {"encoder": ("model.",), "MLM head": ("head.", "decoder."),
                                     "own heads": (OWN_MODULES,)}
"""Our tensors by part, as `load_tensors` reports what a source lacks (a bare ModernBertModel: the MLM head)."""
TIED = ("decoder.weight",)
"""The decoder's weight: the token embeddings under another name (transformers re-ties it on load)."""


def to_transformers(state_dict: dict[str, torch.Tensor], model_config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict as model.safetensors holds it: the same names, the tied decoder and project-only heads left out,
    fp32, contiguous, owning its memory; a ValueError naming a missing or unexpected tensor."""
    wanted = _names(model_config)
    have = {k for k in state_dict if k not in TIED and not k.startswith(project_only_prefixes())}
    if have != set(wanted):
        raise ValueError(f"state dict does not match ModelConfig: missing {sorted(set(wanted) - have)[:5]}, "
                         f"unexpected {sorted(have - set(wanted))[:5]}")
    return {k: state_dict[k].detach().to("cpu", torch.float32).contiguous().clone() for k in wanted}


def _names(model_config: ModelConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = ModernBertForPretraining(model_config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()
            if k not in TIED and not k.startswith(project_only_prefixes())}


def load_tensors(tensors: dict, model_config: ModelConfig, where: str) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """(our state dict, the parts `tensors` lacks, the names it held that we drop) from a ModernBertForMaskedLM's or a
    bare ModernBertModel's tensors (or their shapes: the state dict is then empty); WeightsError naming a tensor that
    is missing, misshapen or unknown."""
    from trainer.model.hf_names import WeightsError

    expected = _names(model_config)
    ours, dropped = {}, []
    for name, value in tensors.items():
        key = "model." + name if name.startswith(("embeddings.", "layers.", "final_norm.")) else name  # a bare encoder
        if key in TIED:
            dropped.append(name)
            continue
        if key not in expected:
            raise WeightsError(f"{where}: {name} is not a tensor of a modernbert encoder or its masked-LM head")
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else tuple(value)
        if shape != expected[key]:
            raise WeightsError(f"{where}: {name} has shape {shape}, the config says {expected[key]}")
        ours[key] = value
    encoder = [k for k in expected if k.startswith("model.")]
    head = [k for k in expected if not k.startswith("model.")]
    lacking = []
    for part, names in (("encoder", encoder), ("MLM head", head)):
        held = [k for k in names if k in ours]
        if not held:
            lacking.append(part)
        elif len(held) < len(names):
            raise WeightsError(f"{where}: lacks {next(k for k in names if k not in ours)} ({len(names) - len(held)} of "
                               f"the {part}'s {len(names)} tensors missing)")
    if "encoder" in lacking:
        raise WeightsError(f"{where}: holds no modernbert encoder tensors (model.embeddings.*, model.layers.*)")
    state = {k: v.detach().to("cpu", torch.float32) for k, v in ours.items() if isinstance(v, torch.Tensor)}
    return state, lacking, dropped
