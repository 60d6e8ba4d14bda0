"""How the encoder sees a batch: padded rows under a key mask, or packed rows with no padding at all.

In:  a batch's layout, built once per forward (`layout_of`): `Padded` for (batch, seq) rows with an attention mask
     (0 at padding; None when nothing is padded), `Packed` for the rows' tokens concatenated, (tokens,), row i being
     tokens cu_seqlens[i] .. cu_seqlens[i + 1] (trainer/data/batch_forms.py writes such batches). Then a layer's query, key
     and value projections in that layout, and the 4-D attention to run on (rows, heads, seq, head_dim) tensors.
Out: the attention output in the same layout ((batch, seq, hidden) or (tokens, hidden)), and each row's first token
     (the [CLS] the pooler reads).

Padded: the additive key mask is built once per forward and dtype, not in every layer. Packed rows are exact: a row
attends to its own tokens only, nothing is computed at padding and no mask exists. Its kernels, the first that applies:

    varlen  torch.nn.attention.varlen.varlen_attn, FlashAttention's variable-length kernel: a CUDA tensor in bf16 or
            fp16, a torch that has it (>= 2.10), and no attention dropout in effect (the kernel has none; MosaicBERT and
            ModernBERT train at 0: `train --attention-dropout 0`)
    runs    the 4-D attention once per run of rows of one length: the collator sorts a batch's rows longest first, so a
            run is a contiguous slice of the tokens, viewed as (rows, heads, length, head_dim) without a copy, and
            attended without a mask (SDPA, or on a CPU in training bert.py's written-out arithmetic and cheap dropout)

NSP pairs at seq 128 are ~90% full rows, so a batch of 32 has a handful of runs; the runs are read from cu_seqlens on
the host once per forward (free on a CPU, one synchronisation per step on a GPU, where varlen needs none).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None", float], torch.Tensor]
"""(q, k, v as (rows, heads, seq, head_dim), an additive key mask or None, the dropout in effect) -> the same shape."""


def _varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:  # torch before 2.10
        return None
    return varlen_attn


class Padded:
    """(batch, seq, hidden) rows; `keep` (batch, seq) is True at real tokens, or None when nothing is padded."""

    def __init__(self, attention_mask: torch.Tensor | None):
        self.keep = None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # (batch, 1, 1, seq)
        self.biases: dict[torch.dtype, torch.Tensor] = {}

    def bias(self, dtype: torch.dtype) -> torch.Tensor | None:
        """The additive key mask in the attention's dtype (which autocast may change), built once per forward.
        Additive rather than boolean: a row whose keys are all padding then gets a finite uniform softmax on every
        torch version and backend (boolean masks gave NaN there on some; torch 2.13 CPU returns zeros)."""
        if self.keep is None:
            return None
        if dtype not in self.biases:
            self.biases[dtype] = torch.zeros(self.keep.shape, dtype=dtype, device=self.keep.device).masked_fill_(
                ~self.keep, torch.finfo(dtype).min)
        return self.biases[dtype]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, attend: Attend, p: float) -> torch.Tensor:
        b, s, h = q.shape

        def split(t: torch.Tensor) -> torch.Tensor:  # (batch, seq, hidden) -> (batch, heads, seq, head_dim)
            return t.view(b, s, heads, h // heads).transpose(1, 2)

        return attend(split(q), split(k), split(v), self.bias(q.dtype), p).transpose(1, 2).reshape(b, s, h)

    def first_tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]  # (batch, hidden)


class Packed:
    """(tokens, hidden): the rows' tokens concatenated, row i at cu_seqlens[i] .. cu_seqlens[i + 1]; `bound` is at
    least the longest row (what the varlen kernel sizes its grid by, so no host read is needed for it)."""

    def __init__(self, cu_seqlens: torch.Tensor, bound: int):
        self.cu_seqlens, self.bound = cu_seqlens, bound
        self._runs: list[tuple[int, int, int]] | None = None

    @property
    def runs(self) -> list[tuple[int, int, int]]:
        """[(first token, rows, length)] of each run of consecutive rows of one length (read on the host once)."""
        if self._runs is None:
            cu = self.cu_seqlens.tolist()
            runs: list[tuple[int, int, int]] = []
            for start, end in zip(cu, cu[1:]):
                length = end - start
                if runs and runs[-1][2] == length:
                    runs[-1] = (runs[-1][0], runs[-1][1] + 1, length)
                elif length:
                    runs.append((start, 1, length))
            self._runs = runs
        return self._runs

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, attend: Attend, p: float) -> torch.Tensor:
        t, h = q.shape
        d = h // heads
        # FlashAttention's kernels take half precision only: an fp32 run on a GPU attends by runs
        varlen = _varlen() if q.is_cuda and p == 0.0 and q.dtype in (torch.float16, torch.bfloat16) else None
        if varlen is not None:
            cu = self.cu_seqlens.to(torch.int32)
            out = varlen(q.view(t, heads, d), k.view(t, heads, d), v.view(t, heads, d), cu, cu, self.bound, self.bound)
            return out.reshape(t, h)
        parts = []
        for start, rows, length in self.runs:
            end = start + rows * length

            def split(x: torch.Tensor) -> torch.Tensor:  # (rows * length, hidden) -> (rows, heads, length, head_dim)
                return x[start:end].view(rows, length, heads, d).transpose(1, 2)

            parts.append(attend(split(q), split(k), split(v), None, p).transpose(1, 2).reshape(rows * length, h))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def first_tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, self.cu_seqlens[:-1].long())  # (batch, hidden)


def layout_of(attention_mask: torch.Tensor | None, cu_seqlens: torch.Tensor | None, bound: int) -> Padded | Packed:
    """The layout of one batch: packed when it has cu_seqlens (then no attention mask), else padded."""
    if cu_seqlens is None:
        return Padded(attention_mask)
    if attention_mask is not None:
        raise ValueError("a packed batch (cu_seqlens) has no attention_mask: its rows hold no padding")
    return Packed(cu_seqlens, bound)
