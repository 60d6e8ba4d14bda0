"""`clozeforge fill-mask HF_DIR "text with [MASK]"`: the top-k predictions for each [MASK] of a text (`<mask>` for a
RoBERTa or XLM-R export: the tokenizer's own mask token).

In:  an exported directory and texts. Out: per [MASK], the top-k (token, probability), printed. A text longer
     than the model's positions is read in windows, one around each [MASK], and a note says so; messages
     quote at most the first EXCERPT_CHARS characters of a text.
"""

from __future__ import annotations

import argparse
import sys

import torch

from downstream.load import load_exported, roles
from process.exits import fail
from schemas import ContractError
from trainer.model import BertForPretraining

EXCERPT_CHARS = 60
"""How much of a text a message quotes."""
WINDOWS_PER_PASS = 16


def excerpt(text: str) -> str:
    """The start of `text`, quoted, with its length when it is cut: messages never echo a whole document."""
    if len(text) <= EXCERPT_CHARS:
        return repr(text)
    return f"{text[:EXCERPT_CHARS]!r}... ({len(text):,} characters)"


def mask_windows(length: int, masks: list[int], width: int) -> list[tuple[int, int]]:
    """For each [MASK] at `masks` (token offsets in a text of `length` tokens), the [start, end) span of at most
    `width` tokens the model reads it in: the whole text when it fits, else a window centred on it (moved
    inwards at the ends of the text, so a [MASK] at either end keeps `width` tokens of context)."""
    if length <= width:
        return [(0, length)] * len(masks)
    return [(s, s + width) for s in (min(max(0, m - width // 2), length - width) for m in masks)]


@torch.no_grad()
def fill_mask(model: BertForPretraining, tokenizer, text: str, top_k: int = 5, warn=None) -> list[list[tuple[str, float]]]:
    """The top-k (token, probability) for each [MASK] of `text`, in order. A text longer than the model's
    positions is read in windows, one around each [MASK]; `warn` (a callable) gets one line saying so."""
    special = roles(tokenizer)
    mask_id, cls_id, sep_id = (tokenizer.token_to_id(special[r]) for r in ("mask_token", "cls_token", "sep_token"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    masks = [i for i, t in enumerate(ids) if t == mask_id]
    if mask_id is None or not masks:
        raise ValueError(f"no {special['mask_token']} in {excerpt(text)}")
    width = model.config.max_tokens - 2  # [CLS] ... [SEP]
    spans = mask_windows(len(ids), masks, width)
    if len(ids) > width and warn:
        warn(f"{excerpt(text)} is {len(ids):,} tokens, more than the model's {width + 2} positions: each of its "
             f"{len(masks)} [MASK] is predicted from the {width} tokens around it")
    out = []
    for first in range(0, len(masks), WINDOWS_PER_PASS):
        rows = [[cls_id, *ids[s:e], sep_id] for s, e in spans[first : first + WINDOWS_PER_PASS]]
        longest = max(map(len, rows))
        input_ids = torch.tensor([r + [0] * (longest - len(r)) for r in rows])  # (windows, seq)
        attention = torch.tensor([[1] * len(r) + [0] * (longest - len(r)) for r in rows])
        types = torch.zeros_like(input_ids) if model.config.row.token_types else None  # XLM's are languages: none named
        sequence_output = model.masked_lm_hidden(input_ids, types, attention)  # ELECTRA: its generator's
        where = torch.tensor([1 + m - s for m, (s, _) in zip(masks[first : first + WINDOWS_PER_PASS], spans[first:])])
        hidden = sequence_output[torch.arange(len(rows)), where]  # (windows, hidden): each row's own [MASK]
        top = model.dense_mlm_logits(hidden).softmax(-1).topk(top_k, dim=-1)
        out += [[(tokenizer.id_to_token(int(i)), float(p)) for p, i in zip(values, indices)]
                for values, indices in zip(top.values, top.indices)]
    return out




def fill_mask_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge fill-mask", description="Predict the [MASK] tokens of a text.")
    ap.add_argument("model", help="exported HuggingFace directory")
    ap.add_argument("text", nargs="+", help="text(s) with [MASK]")
    ap.add_argument("--top-k", type=int, default=5, metavar="K", help="predictions shown per [MASK] (default: 5)")
    return ap


def fill_mask_main(argv: list[str] | None = None) -> int:
    args = fill_mask_parser().parse_args(argv)
    if args.top_k < 1:
        return fail("fill-mask", f"--top-k must be >= 1, got {args.top_k}")
    try:
        model, tokenizer = load_exported(args.model)
    except (FileNotFoundError, ContractError) as e:
        return fail("fill-mask", str(e))
    if args.top_k > model.config.vocab_size:
        return fail("fill-mask", f"--top-k {args.top_k} is more than the model's {model.config.vocab_size} tokens")
    for text in args.text:
        try:
            predictions = fill_mask(model, tokenizer, text, top_k=args.top_k,
                                    warn=lambda line: print(f"clozeforge fill-mask: note: {line}", file=sys.stderr))
        except ValueError as e:
            return fail("fill-mask", str(e))
        print(text if len(text) <= EXCERPT_CHARS else excerpt(text))
        for i, options in enumerate(predictions):
            shown = "  ".join(f"{tok} ({p:.3f})" for tok, p in options)
            print(f"  {roles(tokenizer)['mask_token']} {i + 1}: {shown}")
    return 0


