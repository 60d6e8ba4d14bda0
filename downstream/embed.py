"""`clozeforge embed HF_DIR --input FILE --output X.npy|X.arrow`: contextual embeddings of texts.

In:  an exported directory and texts: one a line of a text file, or the --text-column of a table (.jsonl, .csv,
     .tsv, .parquet), read by schemas/tables.py (every record kept or dropped with a counted reason, which a line
     on stderr reports; a bad row is one line naming file and line, or a drop with --skip-bad-rows; --quoting
     for .tsv/.csv). Text is decoded strictly with --encoding (UTF-8 by default; a binary file or a byte that
     does not decode is one line naming it). A text longer than the model's positions is embedded from its
     start, and a note names the lines cut.
Out: sentence vectors (texts, hidden) from [CLS], the mean, the max or the mean x sqrt(length) over real tokens
     (sentence-transformers' pooling modes; by default the directory's own: a sentence-transformers directory's
     1_Pooling and Normalize, or what an export's card records of the source it continued, else [CLS]), or per-token vectors as the
     average of the last four layers (the feature-based recipe of the BERT paper, section 5.3), whose rows
     `embedded_tokens` names; written to .npy, or .arrow with the texts, their line numbers (rows, for Parquet)
     and the tokens beside.
     --pooling words: one vector per whole word, the mean of its pieces over --layers (the last four by default),
     words found by the tokenizer's own word boundaries (downstream/contextual/encoder.py: any transformers
     encoder), in .arrow with `words` and `word_spans` naming each row; --standardize center|zscore with statistics
     fitted on --reference (or reused from --stats) and saved beside the output as X.standardize.npz.
"""

from __future__ import annotations

import argparse
import codecs
import os
import sys

import numpy as np
import torch

from downstream.contextual.vectors import WordVectors
from downstream.load import batch, encode, load_exported
from process.exits import fail
from schemas import ContractError
from schemas.config import add_flags, from_flags
from schemas.tables import (
    Account,
    TableReading,
    Undecodable,
    read_texts,
)
from trainer.model import BertForPretraining

def _max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return x.masked_fill(mask == 0, -1e9).max(1).values  # as sentence-transformers: padding never the max


POOLERS = {  # (batch, seq, hidden) and the (batch, seq, 1) mask of real tokens -> (batch, hidden)
    "cls": lambda x, mask: x[:, 0],
    "mean": lambda x, mask: (x * mask).sum(1) / mask.sum(1).clamp(min=1e-9),
    "max": _max,
    "mean_sqrt_len_tokens": lambda x, mask: (x * mask).sum(1) / mask.sum(1).clamp(min=1e-9).sqrt(),
}
"""Sentence vectors, by sentence-transformers' name of each mode (schemas/encoder_layout.py POOLING_MODES)."""
POOLINGS = (*POOLERS, "tokens")
"""What embed_texts pools (the project's own model); `words` goes through downstream/contextual/encoder.py."""


def embedded_tokens(model: BertForPretraining, tokenizer, texts: list[str]) -> list[list[str]]:
    """The tokens of each text that `embed_texts(..., pooling="tokens")` returns a vector for, in order."""
    encodings = encode(tokenizer, texts, model.config.max_tokens)
    return [[t for t, real in zip(e.tokens, e.attention_mask) if real] for e in encodings]


@torch.no_grad()
def embed_texts(model: BertForPretraining, tokenizer, texts: list[str], *, pooling: str = "cls", batch_size: int = 32,
                normalize: bool = False, max_length: int | None = None):
    """Sentence vectors (len(texts), hidden) for a POOLERS mode (L2-normalised with `normalize`); for 'tokens', a
    list of (n_i, hidden). Texts are cut at `max_length` tokens (default: the model's positions)."""
    if pooling not in POOLINGS:  # before any work, and also when `texts` is empty
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if not texts:
        return [] if pooling == "tokens" else np.zeros((0, model.config.hidden_size), np.float32)
    out = []
    for start in range(0, len(texts), batch_size):
        inputs = batch(tokenizer, texts[start : start + batch_size], min(max_length or model.config.max_tokens, model.config.max_tokens))
        if not model.config.row.token_types:  # one segment; XLM's token types are languages, none named here
            inputs.pop("token_type_ids")
        sequence_output, _, states = model.encode(**inputs, output_hidden_states=pooling == "tokens")
        mask = inputs["attention_mask"].unsqueeze(-1).float()  # (batch, seq, 1)
        if pooling in POOLERS:
            vectors = POOLERS[pooling](sequence_output, mask)
            out.append((torch.nn.functional.normalize(vectors, p=2, dim=-1) if normalize else vectors).numpy())
        else:
            last4 = torch.stack(states[-4:]).mean(0)  # (batch, seq, hidden)
            out += [row[: int(n)].numpy() for row, n in zip(last4, inputs["attention_mask"].sum(1))]
    return out if pooling == "tokens" else np.concatenate(out)


def write_embeddings(vectors, path: str, columns: dict[str, list] | None = None) -> None:
    """Save to .npy (sentence vectors only) or .arrow: `embedding` and `shape` per row, plus `columns`
    (for example the texts, and for per-token vectors the tokens each row of the matrix belongs to)."""
    if not path.endswith((".npy", ".arrow")):
        raise ValueError(f"--output must end in .npy or .arrow, got {path}")
    if path.endswith(".npy") and isinstance(vectors, list):
        raise ValueError("per-token embeddings have ragged lengths: write them to .arrow")
    # NOTE: written beside, then renamed: a failure leaves an earlier output whole; open() keeps the user's umask
    partial = f"{path}.tmp-{os.getpid()}"
    try:
        _write(vectors, partial, ".npy" if path.endswith(".npy") else ".arrow", columns)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _write(vectors, path: str, kind: str, columns: dict[str, list] | None) -> None:
    if kind == ".npy":
        with open(path, "wb") as f:
            np.save(f, vectors)
    else:
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


def embed_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="clozeforge embed", description="Contextual embeddings of texts (one per line of --input).")
    ap.add_argument("model", help="exported HuggingFace directory")
    ap.add_argument("--input", required=True, help="text file, one text per line; or a .jsonl, .csv, .tsv or .parquet table "
                    "(any fsspec URL)")
    ap.add_argument("--text-column", default="text", metavar="NAME", help="column of a table's texts (default: text)")
    ap.add_argument("--output", required=True, help=".npy, or .arrow (with the texts, and for --pooling tokens the tokens)")
    ap.add_argument("--pooling", default=None, choices=(*POOLINGS, "words"),
                    help="sentence vector from [CLS], the mean, max or mean x sqrt(length) of tokens (default: the directory's "
                         "sentence-transformers pooling, or its card's, else cls); 'tokens': per-token vectors (mean of the last 4 "
                         "layers); 'words': per-word vectors (the mean of a word's pieces over --layers), any transformers encoder")
    ap.add_argument("--batch-size", type=int, default=32, metavar="N", help="texts per forward pass (default: 32)")
    ap.add_argument("--encoding", default="utf-8",
                    help="how --input is decoded, strictly: a byte that does not decode is an error (default: utf-8)")
    add_flags(ap.add_argument_group("reading a table"), TableReading)
    add_flags(ap.add_argument_group("--pooling words: layers and standardisation"), WordVectors)
    return ap


def cut_note(model: BertForPretraining, tokenizer, texts: list[str], lines: list[int], max_length: int | None = None) -> str | None:
    """One line naming the texts longer than the model's positions (or `max_length`), whose vectors see only their start."""
    width = min(max_length or model.config.max_tokens, model.config.max_tokens) - 2
    tokenizer.no_truncation()
    tokenizer.no_padding()
    long = [n for n, e in zip(lines, tokenizer.encode_batch(texts, add_special_tokens=False)) if len(e.ids) > width]
    if not long:
        return None
    shown = ", ".join(map(str, long[:5])) + (" ..." if len(long) > 5 else "")
    return f"{len(long)} text(s) longer than the model's {width + 2} positions embedded from their first {width} tokens only (line {shown})"


def _accounted(account: Account, kept: int) -> str:
    dropped = ", ".join(f"{reason} {n} (line {', '.join(map(str, account.dropped_at[reason][:3]))}"
                        f"{' ...' if n > 3 else ''})" for reason, n in sorted(account.dropped.items()))
    return f"{account.read} {account.format} records read, {kept} kept, dropped {sum(account.dropped.values())}" + (
        f": {dropped}" if dropped else "")


def embed_words(model_dir: str, texts: list[str], lines: list[int], config: WordVectors, output: str,
                batch_size: int = 32, read: str = "") -> int:
    """--pooling words: each text's words and their vectors (standardised as `config` says, the statistics saved
    beside `output`), written to the .arrow `output`; `read` (the input's account) is said once the flags hold."""
    from downstream.contextual.encoder import Encoder
    from downstream.contextual.standardize import beside, fit_or_load
    from downstream.contextual.vectors import layer_indices
    from process.devices import resolve_device

    encoder = Encoder(model_dir, resolve_device("auto"))
    layers, note = layer_indices(config.layers, encoder.num_layers)
    say = lambda line: print(f"clozeforge embed: note: {line}", file=sys.stderr)
    stats = fit_or_load(encoder, config, layers, per_layer=False, batch_size=batch_size, log=say)
    if read:
        print(f"clozeforge embed: {read}", file=sys.stderr)
    if note:  # said once the flags are known to hold: an error stays the one line
        say(note)
    found = encoder.words(texts, layers, batch_size=batch_size)
    cut = [line for line, w in zip(lines, found) if w.cut]
    if cut:
        say(f"{len(cut)} text(s) longer than the model's {encoder.max_length} positions: their words past it have no "
            f"vector (line {', '.join(map(str, cut[:5]))}{' ...' if len(cut) > 5 else ''})")
    vectors = [stats.apply(w.vectors) if stats is not None else w.vectors for w in found]
    try:
        write_embeddings(vectors, output, {"text": texts, "line": lines, "words": [w.words for w in found],
                                           "word_spans": [[list(s) for s in w.spans] for w in found]})
        if stats is not None:
            stats.save(beside(output))
    except OSError as e:
        return fail("embed", f"--output {output}: {e.strerror or e}")
    print(f"embedded {sum(len(w.words) for w in found)} words of {len(texts)} texts (layers {','.join(map(str, layers))}"
          f"{', ' + config.standardize if stats is not None else ''}) -> {output}"
          + (f" (statistics: {beside(output)})" if stats is not None else ""))
    return 0


def recorded_pooling(hf_dir: str):
    """The directory's own sentence pooling (schemas/encoder_layout.py `recorded_pooling`), or None."""
    from schemas import encoder_layout

    def cat(path: str) -> bytes:
        with open(os.path.join(hf_dir, path), "rb") as f:
            return f.read()

    return encoder_layout.recorded_pooling(cat, hf_dir)


def embed_main(argv: list[str] | None = None) -> int:
    args = embed_parser().parse_args(argv)
    if not args.output.endswith((".npy", ".arrow")):
        return fail("embed", f"--output must end in .npy or .arrow, got {args.output}")
    if args.pooling in ("tokens", "words") and args.output.endswith(".npy"):
        return fail("embed", f"per-{args.pooling.removesuffix('s')} embeddings have ragged lengths: use an .arrow --output")
    if args.batch_size < 1:
        return fail("embed", f"--batch-size must be >= 1, got {args.batch_size}")
    try:
        codecs.lookup(args.encoding)
    except LookupError:
        return fail("embed", f"--encoding: unknown encoding {args.encoding!r}")
    try:
        reading, words = from_flags(TableReading, args), from_flags(WordVectors, args)
        if args.pooling != "words" and words != WordVectors():
            return fail("embed", "--layers, --standardize, --reference and --stats go with --pooling words")
        texts, lines, account = read_texts(args.input, args.encoding, args.text_column, reading)
        if not texts:
            return fail("embed", f"{args.input}: no text (read {account.read}, dropped {dict(account.dropped)})")
        if args.pooling == "words":
            return embed_words(args.model, texts, lines, words, args.output, args.batch_size,
                               read=f"{args.input}: {_accounted(account, len(texts))}")
        recorded = None if args.pooling else recorded_pooling(args.model)
        args.pooling = recorded.mode if recorded else (args.pooling or "cls")
        model, tokenizer = load_exported(args.model, masked_lm=False)
    except Undecodable as e:
        return fail("embed", f"{e}; pass --encoding (for example latin-1 or cp1252) or convert the file to UTF-8")
    except (ValueError, ContractError) as e:
        return fail("embed", str(e))
    except OSError as e:
        return fail("embed", f"{e.filename or args.input}: {e.strerror or e}")
    print(f"clozeforge embed: {args.input}: {_accounted(account, len(texts))}", file=sys.stderr)
    if recorded:
        print(f"clozeforge embed: note: {recorded.describe()} (the directory's sentence-transformers pooling; "
              "--pooling chooses another, unnormalized)", file=sys.stderr)
    note = cut_note(model, tokenizer, texts, lines, recorded.max_seq_length if recorded else None)
    if note:
        print(f"clozeforge embed: note: {note}", file=sys.stderr)
    vectors = embed_texts(model, tokenizer, texts, pooling=args.pooling, batch_size=args.batch_size,
                          normalize=bool(recorded and recorded.normalize), max_length=recorded and recorded.max_seq_length)
    columns = {"text": texts, "line": lines}
    if args.pooling == "tokens":
        columns["tokens"] = embedded_tokens(model, tokenizer, texts)
    try:
        write_embeddings(vectors, args.output, columns)
    except OSError as e:
        return fail("embed", f"--output {args.output}: {e.strerror or e}")
    print(f"embedded {len(texts)} texts ({args.pooling}) -> {args.output}")
    return 0
