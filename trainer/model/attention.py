"""How the encoder sees a batch: padded rows under a key mask, or packed rows with no padding at all.

In:  a batch's layout, built once per forward (`layout_of`): `Padded` for (batch, seq) rows with an attention mask
     (0 at padding; None when nothing is padded), `Packed` for the rows' tokens concatenated, (tokens,), row i being
     tokens cu_seqlens[i] .. cu_seqlens[i + 1] (trainer/data/batch_forms.py writes such batches). Then a layer's query, key
     and value projections in that layout, and the 4-D attention to run on (rows, heads, seq, head_dim) tensors.
Out: the attention output in the same layout ((batch, seq, hidden) or (tokens, hidden)), and each row's first token
     (the [CLS] the pooler reads).

Packed rows that record their documents (prep's `doc_starts`, trainer/data/batch_forms.py) attend per document: in the
unpadded form each document is a segment of cu_seqlens of its own, in the padded form `Padded` gets each token's
document number and its mask is block-diagonal. A `window` (ModernBERT's local layers) limits a token to the keys at
most window // 2 positions away, as transformers' sliding-window mask does: a band over the key mask (padded), or over
each run's rows (packed); FlashAttention's varlen kernel is used for global attention only.

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


def band(length: int, window: int | None, device) -> torch.Tensor | None:
    """(length, length) True where |query - key| <= window // 2, or None when that holds everywhere (no window, or a
    row no longer than half of it)."""
    if window is None or length <= window // 2 + 1:
        return None
    at = torch.arange(length, device=device)
    return (at[:, None] - at[None, :]).abs() <= window // 2


def additive(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask as an additive one in `dtype`. Additive rather than boolean: a row whose keys are all masked then
    gets a finite uniform softmax on every torch version and backend (boolean masks gave NaN there on some; torch 2.13
    CPU returns zeros)."""
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(~keep, torch.finfo(dtype).min)


class Padded:
    """(batch, seq, hidden) rows; `keep` (batch, seq) is True at real tokens, or None when nothing is padded;
    `documents` (batch, seq), each token's document number in its row (packed rows that record them), or None."""

    def __init__(self, attention_mask: torch.Tensor | None, documents: torch.Tensor | None = None):
        self.keep = None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # (batch, 1, 1, seq)
        if documents is not None:  # block-diagonal: a query sees the keys of its own document only
            same = (documents[:, :, None] == documents[:, None, :])[:, None]  # (batch, 1, seq, seq)
            self.keep = same if self.keep is None else same & self.keep
        self.biases: dict[tuple, torch.Tensor] = {}

    def bias(self, dtype: torch.dtype, window: int | None = None, length: int = 0) -> torch.Tensor | None:
        """The additive mask in the attention's dtype (which autocast may change), built once per forward and window."""
        if (dtype, window) not in self.biases:
            near = band(length, window, None if self.keep is None else self.keep.device)
            keep = self.keep if near is None else near if self.keep is None else self.keep & near
            self.biases[dtype, window] = None if keep is None else additive(keep, dtype)
        return self.biases[dtype, window]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, attend: Attend, p: float,
               window: int | None = None) -> torch.Tensor:
        b, s, h = q.shape

        def split(t: torch.Tensor) -> torch.Tensor:  # (batch, seq, hidden) -> (batch, heads, seq, head_dim)
            return t.view(b, s, heads, h // heads).transpose(1, 2)

        if window is not None and self.keep is None and band(s, window, None) is not None:
            self.keep = torch.ones((b, 1, 1, s), dtype=torch.bool, device=q.device)  # the band needs a device
        bias = self.bias(q.dtype, window, s)
        return attend(split(q), split(k), split(v), bias, p).transpose(1, 2).reshape(b, s, h)

    def first_tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]  # (batch, hidden)


class Packed:
    """(tokens, hidden): the rows' tokens concatenated, row i at cu_seqlens[i] .. cu_seqlens[i + 1]; `bound` is at
    least the longest row (what the varlen kernel sizes its grid by, so no host read is needed for it)."""

    def __init__(self, cu_seqlens: torch.Tensor, bound: int, row_starts: torch.Tensor | None = None):
        self.cu_seqlens, self.bound = cu_seqlens, bound
        self.row_starts = cu_seqlens[:-1] if row_starts is None else row_starts  # a segment a document: rows differ
        self._runs: list[tuple[int, int, int]] | None = None
        self._bands: dict[tuple, torch.Tensor | None] = {}

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

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, attend: Attend, p: float,
               window: int | None = None) -> torch.Tensor:
        t, h = q.shape
        d = h // heads
        # FlashAttention's kernels take half precision only: an fp32 run on a GPU attends by runs
        plain = window is None and q.is_cuda and p == 0.0 and q.dtype in (torch.float16, torch.bfloat16)
        varlen = _varlen() if plain else None
        if varlen is not None:
            cu = self.cu_seqlens.to(torch.int32)
            out = varlen(q.view(t, heads, d), k.view(t, heads, d), v.view(t, heads, d), cu, cu, self.bound, self.bound)
            return out.reshape(t, h)
        parts = []
        for start, rows, length in self.runs:
            end = start + rows * length

            def split(x: torch.Tensor) -> torch.Tensor:  # (rows * length, hidden) -> (rows, heads, length, head_dim)
                return x[start:end].view(rows, length, heads, d).transpose(1, 2)

            if (length, q.dtype, window) not in self._bands:
                near = band(length, window, q.device)
                self._bands[length, q.dtype, window] = None if near is None else additive(near, q.dtype)
            bias = self._bands[length, q.dtype, window]
            parts.append(attend(split(q), split(k), split(v), bias, p).transpose(1, 2).reshape(rows * length, h))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def first_tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, self.row_starts.long())  # (batch, hidden)


def layout_of(attention_mask: torch.Tensor | None, cu_seqlens: torch.Tensor | None, bound: int,
              documents: torch.Tensor | None = None, row_starts: torch.Tensor | None = None) -> Padded | Packed:
    """The layout of one batch: packed when it has cu_seqlens (then no attention mask; one segment a document where
    the rows record them), else padded (block-diagonal over `documents` when given)."""
    if cu_seqlens is None:
        return Padded(attention_mask, documents)
    if attention_mask is not None:
        raise ValueError("a packed batch (cu_seqlens) has no attention_mask: its rows hold no padding")
    return Packed(cu_seqlens, bound, row_starts)
