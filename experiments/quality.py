"""Study: what the pre-training objectives buy at equal tokens, so a user can choose `--masking`,
`--mask-prob` and `--nsp-weight`.

In:  `corpus`, a glob of .txt / .jsonl(.gz|.zst) files, or None for the built-in docstring corpus (3 MB; 0.5 MB
     with `quick`); prepped here by `pipelines.prep` as the demo does (4,096-piece vocabulary, 64-token pairs,
     5% of documents held out).
Out: one row per variant (the last JSON line's `table`): validation MLM loss and accuracy, and NSP accuracy,
     after the same number of steps over the same pairs in the same order (so equal tokens), all evaluated
     on the same held-out batches with the same BERT 15% masks (80/10/10), whatever the variant trained on.

Variants: `bert-15` (BERT's recipe, the reference), `bert-30` (30% masking, as MosaicBERT and ModernBERT),
`bert-15-no-nsp` (NSP loss weight 0, RoBERTa-style), `wwm-15` (whole-word masking), `span-15` (SpanBERT spans
with the span-boundary objective), and `demo` (what `clozeforge demo` trains with: 30% masking, no dropout,
lr 3e-3, against 0.1 and 2e-3 for the others). Each trains the `tiny` model from the same initial weights with the
trainer's own pieces (ShardStream, Masker, BertForPretraining, AdamW and the linear schedule of
trainer.builders, bf16 autocast where the CPU has it) in one process, without DeepSpeed: the objective is
what differs, not the engine. `delta_mlm_acc` is each row's accuracy minus bert-15's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile

import torch

from process.precision import cpu_bf16_instructions
from schemas import Manifest
from trainer.builders import lr_lambda
from trainer.config import TrainConfig
from trainer.data import ShardStream
from trainer.masking import Masker, MaskingConfig
from trainer.model import BertForPretraining, ModelConfig
from trainer.optim import adamw


@dataclasses.dataclass(frozen=True)
class Variant:
    masking: MaskingConfig
    nsp_weight: float = 1.0
    dropout: float = 0.1
    lr: float = 2e-3


VARIANTS = {
    "bert-15": Variant(MaskingConfig(strategy="bert", mask_prob=0.15)),
    "bert-30": Variant(MaskingConfig(strategy="bert", mask_prob=0.30)),
    "bert-15-no-nsp": Variant(MaskingConfig(strategy="bert", mask_prob=0.15), nsp_weight=0.0),
    "wwm-15": Variant(MaskingConfig(strategy="wwm", mask_prob=0.15)),
    "span-15": Variant(MaskingConfig(strategy="span", mask_prob=0.15)),
    "demo": Variant(MaskingConfig(strategy="bert", mask_prob=0.30), dropout=0.0, lr=3e-3),  # clozeforge demo's recipe
}
EVAL_MASKING = MaskingConfig(strategy="bert", mask_prob=0.15)
BATCH, SEED = 32, 0


def _prep(corpus: str | None, quick: bool, work: str) -> Manifest:
    from pipelines import prep

    if corpus is None:
        from pipelines.documents.builtin_corpus import write_builtin_corpus

        write_builtin_corpus(os.path.join(work, "corpus"), 500_000 if quick else 3_000_000)
        corpus = os.path.join(work, "corpus", "*.jsonl")
    prep.run(["--input", f"docs={corpus}", "--output", os.path.join(work, "prep"), "--vocab-size", "4096",
              "--max-seq-len", "64", "--validation-fraction", "0.05", "--rows-per-shard", "50000"])
    return Manifest.read(os.path.join(work, "prep", "pairs"))


@torch.no_grad()
def _evaluate(model: BertForPretraining, batches: list[dict], autocast) -> dict[str, float]:
    model.eval()
    sums = {"mlm_loss": 0.0, "mlm_correct": 0, "mlm_count": 0, "nsp_correct": 0, "nsp_count": 0}
    for b in batches:
        with autocast():
            out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], mlm_positions=b["mlm_positions"],
                        mlm_labels=b["mlm_labels"], next_sentence_label=b["next_sentence_label"])
        n = int(out["mlm_count"])
        sums["mlm_loss"] += float(out["mlm_loss"]) * n
        sums["mlm_count"] += n
        sums["mlm_correct"] += int(out["mlm_correct"])
        sums["nsp_correct"] += int(out["nsp_correct"])
        sums["nsp_count"] += int(out["nsp_count"])
    model.train()
    return {"mlm_loss": sums["mlm_loss"] / sums["mlm_count"], "mlm_acc": sums["mlm_correct"] / sums["mlm_count"],
            "nsp_acc": sums["nsp_correct"] / sums["nsp_count"]}


def _train(name: str, manifest: Manifest, steps: int, valid: list[dict], autocast) -> dict:
    variant = VARIANTS[name]
    masking, lr = variant.masking, variant.lr
    cfg = ModelConfig.preset("tiny", vocab_size=manifest.vocab["size"], pad_token_id=manifest.special_tokens["[PAD]"],
                             nsp_weight=variant.nsp_weight, use_sbo=masking.strategy == "span",
                             hidden_dropout=variant.dropout, attention_dropout=variant.dropout)
    model = BertForPretraining(cfg, seed=SEED).train()
    optimizer = adamw(model, lr=lr, weight_decay=0.01, eps=1e-6)  # the trainer's
    schedule = lr_lambda(TrainConfig(data="-", output="-", max_steps=steps, lr=lr))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    stream = ShardStream(manifest, split="train", batch_size=BATCH, masker=Masker.for_manifest(masking, manifest), seed=SEED)
    tokens_seen = predictions = 0
    for step, batch in zip(range(steps), stream):
        torch.manual_seed(hash((SEED, step)) & 0x7FFF_FFFF)  # the same dropout draws for every variant
        inputs = {k: v for k, v in batch.items() if k != "position"}
        with autocast():
            loss = model(**inputs)["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        tokens_seen += int(batch["attention_mask"].sum())
        predictions += int((batch["mlm_labels"] != -100).sum())
    return {"variant": name, "lr": lr, "dropout": variant.dropout, **{k: round(v, 4) for k, v in _evaluate(model, valid, autocast).items()},
            "train_tokens": tokens_seen, "train_predictions": predictions}


def main(corpus: str | None, quick: bool) -> dict:
    torch.set_num_threads(os.cpu_count() or 1)
    bf16 = cpu_bf16_instructions()
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    steps, eval_batches = (40, 4) if quick else (1500, 40)
    with tempfile.TemporaryDirectory(prefix="clozeforge-quality-") as work:
        manifest = _prep(corpus, quick, work)
        valid_stream = ShardStream(manifest, split="validation", batch_size=BATCH, seed=SEED + 1, epochs=1,
                                   masker=Masker.for_manifest(EVAL_MASKING, manifest))
        valid = [{k: v for k, v in b.items() if k != "position"} for _, b in zip(range(eval_batches), valid_stream)]
        train_pairs = manifest.splits["train"]
        rows = [_train(name, manifest, steps, valid, autocast) for name in VARIANTS]
    reference = rows[0]["mlm_acc"]
    for row in rows:
        row["delta_mlm_acc"] = round(row["mlm_acc"] - reference, 4)
    if len({row["train_tokens"] for row in rows}) != 1:
        raise RuntimeError("the variants did not see the same tokens")
    return {
        "model": "tiny (2 layers, hidden 128)", "vocab_size": manifest.vocab["size"], "seq_len": manifest.max_seq_len,
        "steps": steps, "batch": BATCH, "train_pairs": train_pairs, "epochs": round(steps * BATCH / train_pairs, 2),
        "tokens_each": rows[0]["train_tokens"], "eval_pairs": sum(int(b["input_ids"].shape[0]) for b in valid),
        "eval_masking": "bert 15% (80/10/10), the same masks for every variant",
        "precision": "bf16 autocast" if bf16 else "fp32", "threads": torch.get_num_threads(),
        "best_mlm_acc": max(rows, key=lambda r: r["mlm_acc"])["variant"],
        "table": rows,
    }
