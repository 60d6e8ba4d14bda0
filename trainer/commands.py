"""`clozeforge export`, `fill-mask` and `embed`: from a run's checkpoint to a model other code can use.

In:  export: a run directory (checkpoints/, vocab/, train_config.json) and --output HF_DIR;
     fill-mask / embed: an exported HF directory and text.
Out: export writes the HuggingFace directory (trainer/export.py) from the latest (or --tag) checkpoint of
     any ZeRO stage, consolidated on CPU; --verify reloads it with transformers and prints the max abs
     difference of MLM and NSP logits against the project's model on validation pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from schemas import ContractError, Manifest
from trainer import checkpoint
from trainer.model import BertForPretraining
from trainer.model_config import ModelConfig


def _fail(command: str, message: str) -> int:
    print(f"clozeforge {command}: error: {message}", file=sys.stderr)
    return 2


def load_run_model(run_dir: str, tag: str | None = None) -> tuple[BertForPretraining, dict, str, dict]:
    """The project's model with a checkpoint's consolidated fp32 weights, its client state and tag."""
    state, client, tag = checkpoint.consolidated_state_dict(run_dir, tag)
    model_config = ModelConfig.from_dict(client["model_config"])
    model = BertForPretraining(model_config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "cls.predictions.decoder.weight"]  # tied to the word embeddings
    if missing or unexpected:
        raise ContractError(f"{run_dir}/{tag}: checkpoint does not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.eval(), client, tag, state


def validation_batch(train_config: dict, rows: int = 16) -> dict[str, torch.Tensor]:
    """A few pairs of the run's data (validation split if there is one), collated without masking."""
    import numpy as np

    from trainer.collate import collate_segments
    from trainer.data import gather_segments
    import fsspec
    import pyarrow as pa

    manifest = Manifest.read(train_config["data"])
    split = "validation" if manifest.split_shards("validation") else "train"
    shard = manifest.split_shards(split)[0]
    with fsspec.open(manifest.resolve(shard.path), "rb") as f:
        table = pa.ipc.open_file(pa.BufferReader(f.read())).read_all().slice(0, rows).combine_chunks()
    batch = table.to_batches()[0]
    parts = [(batch, np.arange(batch.num_rows))]
    s = manifest.special_tokens
    arrays = collate_segments(
        *gather_segments(parts, "tokens_a"), *gather_segments(parts, "tokens_b"),
        batch.column("is_random_next").to_numpy(zero_copy_only=False),
        cls_id=s["[CLS]"], sep_id=s["[SEP]"], pad_id=s["[PAD]"], max_seq_len=manifest.max_seq_len,
    )
    return {k: torch.from_numpy(v) for k, v in arrays.items() if k != "special_mask"}


def export_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clozeforge export", description="Export a run's checkpoint as a HuggingFace directory.")
    ap.add_argument("run", help="run directory of clozeforge train")
    ap.add_argument("--output", required=True, help="HuggingFace directory to write")
    ap.add_argument("--tag", default=None, help="checkpoint tag (default: the latest)")
    ap.add_argument("--verify", action="store_true", help="reload with transformers and compare logits")
    args = ap.parse_args(argv)
    from trainer.export import ExportError, export_hf, verify_export

    try:
        model, client, tag, state = load_run_model(args.run, args.tag)
        metrics = client.get("metrics") or _final_metrics(args.run, up_to_step=client.get("step"))
        card = {"train_config": client.get("train_config", {}), "step": client.get("step"), "metrics": metrics,
                "data_fingerprint": _data_fingerprint(args.run), "checkpoint": tag}
        export_hf(state, model.config, os.path.join(args.run, "vocab"), args.output, card=card)
    except (FileNotFoundError, ContractError, ExportError) as e:
        return _fail("export", str(e))
    print(f"exported {args.run} ({tag}, step {client.get('step')}) -> {args.output}")
    if args.verify:
        try:
            diffs = verify_export(args.output, model, validation_batch(client["train_config"]))
        except (FileNotFoundError, ContractError, ExportError) as e:
            return _fail("export", f"--verify: {e}")
        print(f"verify: max |ours - transformers|  mlm {diffs['mlm_max_abs_diff']:.2e}  nsp {diffs['nsp_max_abs_diff']:.2e}")
        if max(diffs.values()) > 1e-4:
            print("verify: FAILED (tolerance 1e-4)", file=sys.stderr)
            return 1
    return 0


def _data_fingerprint(run_dir: str) -> str | None:
    path = os.path.join(run_dir, "train_config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f).get("data_fingerprint")


def _final_metrics(run_dir: str, up_to_step: int | None) -> dict:
    """The last logged train and validation figures at or before `up_to_step` (the exported checkpoint's)."""
    from trainer.metrics import read_metrics

    records = read_metrics(run_dir)
    out = {}
    for r in records:
        if up_to_step is not None and r.get("step", 0) > up_to_step:
            continue
        prefix = "valid_" if r.get("split") == "validation" else "train_"
        out.update({prefix + k: v for k, v in r.items() if k not in ("split",) and isinstance(v, (int, float))})
    return out


def fill_mask_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clozeforge fill-mask", description="Predict the [MASK] tokens of a text.")
    ap.add_argument("model", help="exported HuggingFace directory")
    ap.add_argument("text", nargs="+", help="text(s) with [MASK]")
    ap.add_argument("--top-k", type=int, default=5)
    args = ap.parse_args(argv)
    from trainer.downstream import fill_mask, load_exported

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


def embed_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clozeforge embed", description="Contextual embeddings of texts (one per line of --input).")
    ap.add_argument("model", help="exported HuggingFace directory")
    ap.add_argument("--input", required=True, help="text file, one text per line")
    ap.add_argument("--output", required=True, help=".npy, or .arrow (with the texts, and for --pooling tokens the tokens)")
    ap.add_argument("--pooling", default="cls", choices=("cls", "mean", "tokens"),
                    help="sentence vector from [CLS] or the mean of tokens; 'tokens': per-token vectors (mean of the last 4 layers)")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args(argv)
    from trainer.downstream import embed_texts, embedded_tokens, load_exported, write_embeddings

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
