"""`clozeforge embed HF_DIR --input FILE --output X.npy|X.arrow`: contextual embeddings of texts.

In:  an exported directory and texts (one a line).
Out: sentence vectors (texts, hidden) from [CLS] or the mean over real tokens, or per-token vectors as the
     average of the last four layers (the feature-based recipe of the BERT paper, section 5.3), whose rows
     `embedded_tokens` names; written to .npy, or .arrow with the texts and tokens beside.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from schemas import ContractError
from trainer.downstream.fill_mask import _fail
from trainer.downstream.load import batch, encode, load_exported
from trainer.model import BertForPretraining

POOLINGS = ("cls", "mean", "tokens")


def embedded_tokens(model: BertForPretraining, tokenizer, texts: list[str]) -> list[list[str]]:
    """The tokens of each text that `embed_texts(..., pooling="tokens")` returns a vector for, in order."""
    encodings = encode(tokenizer, texts, model.config.max_position_embeddings)
    return [[t for t, real in zip(e.tokens, e.attention_mask) if real] for e in encodings]


@torch.no_grad()
def embed_texts(model: BertForPretraining, tokenizer, texts: list[str], *, pooling: str = "cls", batch_size: int = 32):
    """Sentence vectors (len(texts), hidden) for pooling 'cls'/'mean'; for 'tokens', a list of (n_i, hidden)."""
    if pooling not in POOLINGS:  # before any work, and also when `texts` is empty
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if not texts:
        return [] if pooling == "tokens" else np.zeros((0, model.config.hidden_size), np.float32)
    out = []
    for start in range(0, len(texts), batch_size):
        inputs = batch(tokenizer, texts[start : start + batch_size], model.config.max_position_embeddings)
        sequence_output, _, states = model.encode(**inputs, output_hidden_states=pooling == "tokens")
        mask = inputs["attention_mask"].unsqueeze(-1).float()  # (batch, seq, 1)
        if pooling == "cls":
            out.append(sequence_output[:, 0].numpy())
        elif pooling == "mean":
            out.append(((sequence_output * mask).sum(1) / mask.sum(1)).numpy())
        else:
            last4 = torch.stack(states[-4:]).mean(0)  # (batch, seq, hidden)
            out += [row[: int(n)].numpy() for row, n in zip(last4, inputs["attention_mask"].sum(1))]
    return out if pooling == "tokens" else np.concatenate(out)


def write_embeddings(vectors, path: str, columns: dict[str, list] | None = None) -> None:
    """Save to .npy (sentence vectors only) or .arrow: `embedding` and `shape` per row, plus `columns`
    (for example the texts, and for per-token vectors the tokens each row of the matrix belongs to)."""
    if path.endswith(".npy"):
        if isinstance(vectors, list):
            raise ValueError("per-token embeddings have ragged lengths: write them to .arrow")
        np.save(path, vectors)
    elif path.endswith(".arrow"):
        import pyarrow as pa

        rows = list(vectors)
        column = pa.array([np.asarray(r, dtype=np.float32).reshape(-1).tolist() for r in rows], type=pa.list_(pa.float32()))
        dims = pa.array([list(np.asarray(r).shape) for r in rows], type=pa.list_(pa.int32()))
        extra = {name: pa.array(values) for name, values in (columns or {}).items()}
        if any(len(values) != len(rows) for values in extra.values()):
            raise ValueError(f"every column needs one value per embedding ({len(rows)})")
        table = pa.table({"embedding": column, "shape": dims, **extra})
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    else:
        raise ValueError(f"--output must end in .npy or .arrow, got {path}")


def embed_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge embed", description="Contextual embeddings of texts (one per line of --input).")
    ap.add_argument("model", help="exported HuggingFace directory")
    ap.add_argument("--input", required=True, help="text file, one text per line")
    ap.add_argument("--output", required=True, help=".npy, or .arrow (with the texts, and for --pooling tokens the tokens)")
    ap.add_argument("--pooling", default="cls", choices=("cls", "mean", "tokens"),
                    help="sentence vector from [CLS] or the mean of tokens; 'tokens': per-token vectors (mean of the last 4 layers)")
    ap.add_argument("--batch-size", type=int, default=32, metavar="N", help="texts per forward pass (default: 32)")
    return ap


def embed_main(argv: list[str] | None = None) -> int:
    args = embed_parser().parse_args(argv)
    if not args.output.endswith((".npy", ".arrow")):
        return _fail("embed", f"--output must end in .npy or .arrow, got {args.output}")
    if args.pooling == "tokens" and args.output.endswith(".npy"):
        return _fail("embed", "per-token embeddings have ragged lengths: use an .arrow --output")
    try:
        model, tokenizer = load_exported(args.model)
        with open(args.input, encoding="utf-8") as f:
            texts = [line.rstrip("\n") for line in f if line.strip()]
    except (FileNotFoundError, ContractError) as e:
        return _fail("embed", str(e))
    if not texts:
        return _fail("embed", f"{args.input}: no non-empty line")
    vectors = embed_texts(model, tokenizer, texts, pooling=args.pooling, batch_size=args.batch_size)
    columns = {"text": texts}
    if args.pooling == "tokens":
        columns["tokens"] = embedded_tokens(model, tokenizer, texts)
    write_embeddings(vectors, args.output, columns)
    print(f"embedded {len(texts)} texts ({args.pooling}) -> {args.output}")
    return 0
