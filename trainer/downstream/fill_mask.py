"""`clozeforge fill-mask HF_DIR "text with [MASK]"`: the top-k predictions for each [MASK] of a text.

In:  an exported directory and texts. Out: per [MASK], the top-k (token, probability), printed.
"""

from __future__ import annotations

import argparse
import sys

import torch

from schemas import ContractError
from trainer.downstream.load import batch, load_exported
from trainer.model import BertForPretraining


@torch.no_grad()
def fill_mask(model: BertForPretraining, tokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    mask_id = tokenizer.token_to_id("[MASK]")
    inputs = batch(tokenizer, [text], model.config.max_position_embeddings)
    positions = (inputs["input_ids"][0] == mask_id).nonzero().flatten()
    if positions.numel() == 0:
        raise ValueError(f"no [MASK] in {text!r}")
    sequence_output, _, _ = model.encode(**inputs)
    probs = model.dense_mlm_logits(sequence_output)[0, positions].softmax(-1)  # (masks, vocab)
    top = probs.topk(top_k, dim=-1)
    return [
        [(tokenizer.id_to_token(int(i)), float(p)) for p, i in zip(values, indices)]
        for values, indices in zip(top.values, top.indices)
    ]



def _fail(command: str, message: str) -> int:
    print(f"clozeforge {command}: error: {message}", file=sys.stderr)
    return 2


def fill_mask_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge fill-mask", description="Predict the [MASK] tokens of a text.")
    ap.add_argument("model", help="exported HuggingFace directory")
    ap.add_argument("text", nargs="+", help="text(s) with [MASK]")
    ap.add_argument("--top-k", type=int, default=5, metavar="K", help="predictions shown per [MASK] (default: 5)")
    return ap


def fill_mask_main(argv: list[str] | None = None) -> int:
    args = fill_mask_parser().parse_args(argv)
    try:
        model, tokenizer = load_exported(args.model)
    except (FileNotFoundError, ContractError) as e:
        return _fail("fill-mask", str(e))
    for text in args.text:
        try:
            predictions = fill_mask(model, tokenizer, text, top_k=args.top_k)
        except ValueError as e:
            return _fail("fill-mask", str(e))
        print(text)
        for i, options in enumerate(predictions):
            shown = "  ".join(f"{tok} ({p:.3f})" for tok, p in options)
            print(f"  [MASK] {i + 1}: {shown}")
    return 0


