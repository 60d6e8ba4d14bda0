"""`clozeforge score MODEL --input TEXT`: held-out masked-LM accuracy and pseudo-perplexity of a model on your text.

In:  MODEL, a masked LM of one of the families (schemas/families.py): a `clozeforge export` (an ELECTRA export is
     scored by its generator, EXPORT/generator/) or any transformers directory AutoModelForMaskedLM loads with its
     masked-LM head; TEXT, a file of lines (a local path or an fsspec URL, compression inferred from the name), one
     text a line, of which the first --max-lines that are not blank are read.
Out: one JSON object on stdout (and in --output FILE): the model, the input, the seed; the lines read, scored and
     dropped by reason (`blank`; `no_token`: nothing but special tokens, e.g. all [UNK]) and those cut at the model's
     trained length; the held-out MLM accuracy, its standard error clustered by line and the tokens masked; the
     pseudo-perplexity and the tokens it scored.

Held-out MLM accuracy: each line, tokenized by the model's own tokenizer and cut at the length the model trained on,
is masked by the trainer's own Masker (trainer/masking.py, BERT's rule as pretraining validates: 15% of the line's
ordinary tokens, at least one, 80% [MASK], 10% a random token, 10% kept) with a generator seeded by (--seed, the
line's number), so models of one vocabulary meet the same masks and their difference is paired; the accuracy is the
share of masked positions whose most likely token is the original. The SE is clustered by line: the masked tokens
of one line are not independent draws.
Pseudo-perplexity (Salazar et al. 2020, "Masked Language Model Scoring"): every ordinary token of a line is masked
in turn, alone, and scored by log p(token | the rest of the line); PPPL = exp(-(sum of those log p) / N) over the N
tokens of every scored line. Special tokens ([CLS], [SEP], [UNK], ...) are neither masked nor scored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os

import numpy as np
import torch

from process.devices import DEVICES
from process.exits import fail
from process.outputs import write_json
from schemas import ContractError, families, objectives
from schemas.config import Config, add_flags, flag, from_flags
from trainer.masking import Masker, MaskingConfig

COMMAND = "score"
VALIDATION_MASKING = MaskingConfig()
"""BERT's 15% and 80/10/10, uniform random tokens: the masks pretraining's validation draws."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScoreConfig(Config):
    """Held-out masked-LM scoring"""

    model: str = flag(default="", hidden=True)
    input: str = flag(metavar="TEXT")
    """A file of lines (local path or fsspec URL; .gz/.zst/... inferred), one text a line."""
    max_lines: int = 1000
    """Score the first this many lines that are not blank."""
    seed: int = 0
    """The masks' seed: with the same seed and vocabulary, two models are scored on the same masks."""
    batch_size: int = 16
    """Rows per forward pass (memory: rows x tokens x vocabulary logits)."""
    output: str | None = flag(default=None, metavar="FILE")
    """Also write the JSON here (replaced whole)."""
    device: str = flag(default="auto", choices=DEVICES)
    """Where the model runs: auto takes a CUDA GPU when torch sees one."""

    def __post_init__(self) -> None:
        for name in ("max_lines", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")


@dataclasses.dataclass
class Scored:
    """One model's figures per scored line, in line order: what the command sums and a study pairs."""

    line_numbers: list[int]
    """Each scored line's number among the lines read (0-based), so two models' lines pair up."""
    correct: list[int]
    masked: list[int]
    log_likelihood: list[float]
    """Per line, the sum of log p of its tokens, each masked alone."""
    tokens: list[int]
    dropped: dict[str, int]
    truncated: int
    vocabulary: str
    """The tokenizer's vocabulary digest: masks are the same only between models of one vocabulary."""


def read_lines(url: str, max_lines: int) -> tuple[list[str], dict[str, int]]:
    """(the first `max_lines` non-blank lines of `url`, {"read": lines read, "blank": blank ones among them})."""
    import fsspec

    lines, read, blank = [], 0, 0
    try:
        with fsspec.open(url, mode="rt", compression="infer", encoding="utf-8") as f:
            for line in f:
                read += 1
                text = line.rstrip("\r\n")
                if not text.strip():
                    blank += 1
                    continue
                lines.append(text)
                if len(lines) == max_lines:
                    break
    except FileNotFoundError:
        raise FileNotFoundError(f"--input {url}: no such file") from None
    except IsADirectoryError:
        raise FileNotFoundError(f"--input {url}: a directory (name a file of lines)") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"--input {url}: line {read + 1} is not UTF-8 ({e.reason})") from None
    return lines, {"read": read, "blank": blank}


def masked_lm_directory(model_dir: str) -> tuple[str, families.Family]:
    """(the directory that holds MODEL's masked LM, its family's row): an ELECTRA export's generator/, else MODEL."""
    where = os.path.join(model_dir, "config.json")
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"{model_dir}: no such model directory")
    try:
        with open(where, encoding="utf-8") as f:
            body = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{model_dir}: no config.json (an export, or a transformers model directory)") from None
    except ValueError as e:
        raise ContractError(f"{where}: not JSON ({e})") from None
    goal = objectives.of_model_type(body.get("model_type"))
    if goal is None:
        return model_dir, families.of_model_type(body.get("model_type"), where)
    row = families.family(goal.families[0])
    if goal.hf_generator_class in body.get("architectures", []):  # the generator's own directory
        return model_dir, row
    generator = os.path.join(model_dir, goal.generator_dir or "")
    if not goal.generator_dir or not os.path.exists(os.path.join(generator, "config.json")):
        raise ContractError(f"{model_dir}: an {goal.name} model without its masked-LM generator ({goal.generator_dir}/): "
                            "nothing predicts its masked tokens")
    return generator, row


def load(model_dir: str, device: torch.device):
    """(tokenizer, masked LM in eval mode on `device`, the longest line in tokens it reads, the lm directory)."""
    from downstream.contextual.encoder import quiet_transformers
    from downstream.finetune.models import trained_length

    lm_dir, row = masked_lm_directory(model_dir)
    with quiet_transformers() as transformers:  # an export's NSP head and pooler go unread: expected, not news
        tokenizer = transformers.AutoTokenizer.from_pretrained(lm_dir)
        model, info = transformers.AutoModelForMaskedLM.from_pretrained(lm_dir, output_loading_info=True)
    if info.get("missing_keys"):  # a bare encoder: transformers would put a random head on it and score noise
        raise ContractError(f"{lm_dir}: no masked-LM head ({len(info['missing_keys'])} weights missing, "
                            f"{sorted(info['missing_keys'])[0]} first)")
    if tokenizer.mask_token_id is None:
        raise ContractError(f"{lm_dir}: its tokenizer has no mask token")
    pad = getattr(model.config, "pad_token_id", None) or 0
    positions = trained_length(lm_dir)[1] - row.first_position(pad)  # RoBERTa's first position ids are taken
    return tokenizer, model.to(device).eval(), min(trained_length(lm_dir)[0], positions), lm_dir


def _batches(rows: list[list[int]], size: int, pad: int, device: torch.device):
    """(input ids, attention mask) of `rows`, `size` at a time, each batch padded to its longest row."""
    for start in range(0, len(rows), size):
        chunk = rows[start:start + size]
        width = max(map(len, chunk))
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in chunk], device=device)  # (rows, width)
        lengths = torch.tensor([len(r) for r in chunk], device=device)
        yield start, ids, (torch.arange(width, device=device)[None, :] < lengths[:, None]).long()


@torch.no_grad()
def score_lines(model_dir: str, lines: list[str], seed: int = 0, batch_size: int = 16, device: str = "cpu") -> Scored:
    """MODEL's masked-LM figures on `lines`, per line (see the module docstring)."""
    import hashlib

    from downstream.contextual.encoder import quiet_transformers

    tokenizer, model, length, _ = load(model_dir, torch.device(device))
    special = set(tokenizer.all_special_ids)
    masker = Masker(VALIDATION_MASKING, vocab_size=len(tokenizer), special_ids=sorted(special), mask_id=tokenizer.mask_token_id)
    with quiet_transformers():  # its note on lines longer than the model's length: they are cut below, and counted
        encoded = tokenizer(lines, truncation=False)["input_ids"]
    kept, dropped, truncated = [], {"no_token": 0}, 0
    for number, ids in enumerate(encoded):
        if len(ids) > length:  # cut, its closing special token kept, as truncation=True does
            ids, truncated = ids[:length - 1] + ids[-1:], truncated + 1
        if all(t in special for t in ids):
            dropped["no_token"] += 1
        else:
            kept.append((number, ids))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    masked_rows, targets = [], []
    for number, ids in kept:
        row = np.asarray([ids], dtype=np.int64)
        out = masker(row, np.isin(row, list(special)), np.random.default_rng([seed, number]))
        masked_rows.append(out["input_ids"][0].tolist())
        targets.append((out["mlm_positions"][0], out["mlm_labels"][0]))
    correct = [0] * len(kept)
    for start, ids, attention in _batches(masked_rows, batch_size, pad, model.device):
        predicted = model(input_ids=ids, attention_mask=attention).logits.argmax(-1).cpu().numpy()  # (rows, width)
        for r in range(ids.shape[0]):
            positions, labels = targets[start + r]
            correct[start + r] = int((predicted[r, positions] == labels).sum())
    # pseudo-log-likelihood: one row per (line, ordinary token), that token masked alone
    where = [(i, p) for i, (_, ids) in enumerate(kept) for p, t in enumerate(ids) if t not in special]
    copies = []
    for i, p in where:
        row = list(kept[i][1])
        row[p] = tokenizer.mask_token_id
        copies.append(row)
    log_likelihood = [0.0] * len(kept)
    for start, ids, attention in _batches(copies, batch_size, pad, model.device):
        log_p = model(input_ids=ids, attention_mask=attention).logits.float().log_softmax(-1)  # (rows, width, vocab)
        for r in range(ids.shape[0]):
            i, p = where[start + r]
            log_likelihood[i] += float(log_p[r, p, kept[i][1][p]])
    vocabulary = hashlib.sha256(json.dumps(sorted(tokenizer.get_vocab().items())).encode()).hexdigest()
    return Scored(line_numbers=[n for n, _ in kept], correct=correct, masked=[len(t[0]) for t in targets],
                  log_likelihood=log_likelihood, tokens=[sum(t not in special for t in ids) for _, ids in kept],
                  dropped=dropped, truncated=truncated, vocabulary=vocabulary)


def clustered_mean(per_line: list[tuple[float, int]]) -> tuple[float, float]:
    """The mean over tokens and its standard error clustered by line, from (sum over the line's tokens, its tokens)."""
    total, n = sum(s for s, _ in per_line), sum(k for _, k in per_line)
    if n == 0:
        return float("nan"), float("nan")
    mean, lines = total / n, len(per_line)
    spread = sum((s - mean * k) ** 2 for s, k in per_line)
    return mean, math.sqrt(lines / max(lines - 1, 1) * spread) / n


def figures(scored: Scored) -> dict:
    """The accuracy with its clustered SE, the masked tokens, the pseudo-perplexity and the tokens it scored."""
    accuracy, se = clustered_mean(list(zip(scored.correct, scored.masked)))
    tokens = sum(scored.tokens)
    return {"mlm_accuracy": round(accuracy, 4), "mlm_accuracy_se": round(se, 4), "masked_tokens": sum(scored.masked),
            "pseudo_perplexity": round(math.exp(-sum(scored.log_likelihood) / tokens), 4) if tokens else None,
            "pseudo_perplexity_tokens": tokens}


def run(config: ScoreConfig) -> dict:
    from process.devices import resolve_device

    if config.output and os.path.isdir(config.output):
        raise ValueError(f"--output {config.output}: a directory (name the JSON file to write)")
    if config.output and os.path.exists(config.input) and os.path.realpath(config.output) == os.path.realpath(config.input):
        raise ValueError(f"--output {config.output}: that is --input (this command never writes what it reads)")
    masked_lm_directory(config.model)  # a wrong MODEL fails in one line before the text is read
    lines, counts = read_lines(config.input, config.max_lines)
    scored = score_lines(config.model, lines, config.seed, config.batch_size, str(resolve_device(config.device)))
    dropped = {"blank": counts["blank"], **scored.dropped}
    report = {"model": os.path.abspath(config.model), "input": config.input, "seed": config.seed,
              "masking": "bert: 15% of a line's ordinary tokens, at least one; 80% [MASK], 10% random, 10% kept",
              "lines": {"read": counts["read"], "scored": len(scored.line_numbers), "dropped": dropped,
                        "truncated": scored.truncated},
              **figures(scored)}
    assert report["lines"]["read"] == report["lines"]["scored"] + sum(dropped.values())  # every line accounted for
    if config.output:
        try:
            write_json(report, config.output)
        except OSError as e:
            raise ValueError(f"--output {config.output}: {e.strerror or e}") from None
    return report


def score_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"clozeforge {COMMAND}", description="Held-out masked-LM accuracy and "
                                 "pseudo-perplexity of a model on a file of lines.")
    ap.add_argument("model", metavar="MODEL", help="an export (an ELECTRA export: its generator), or any transformers "
                    "masked-LM directory of the families")
    add_flags(ap, ScoreConfig)
    return ap


def score_main(argv: list[str] | None = None) -> int:
    args = score_parser().parse_args(argv)
    try:
        config = dataclasses.replace(from_flags(ScoreConfig, args), model=args.model)
        report = run(config)
    except (ContractError, FileNotFoundError) as e:
        return fail(COMMAND, str(e))
    except (ValueError, OSError) as e:
        return fail(COMMAND, str(e).splitlines()[0])
    print(json.dumps(report))
    return 0
