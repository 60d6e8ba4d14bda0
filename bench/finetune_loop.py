"""Our fine-tuning loop against transformers' Trainer on the same model, data and schedule.

    python -m bench.finetune_loop HF_DIR TRAIN.jsonl [EPOCHS]   CPU, one process: an export on a classify split
    python bench/finetune_loop.py --gpu                          BERT-base on one GPU in bf16 (bench/gpu_check.sh)
    python bench/finetune_loop.py --tiny --device cpu            the --gpu path on a 2-layer model on the CPU (its test)

The first form prints the seconds to import each and the seconds per epoch of each on the same encoded rows
(batch 32, the same AdamW and linear schedule, no evaluation inside the loop), three alternating rounds.

--gpu: a randomly initialised BERT-base (transformers' BertConfig defaults, vocabulary 30,522) with a 2-class
head; --examples synthetic rows of uniformly mixed lengths (8 to 128 word pieces). Each side gets a warm-up
(--warmup-steps steps on a model of its own), then one timed epoch on a fresh model: ours through `loop.train`
(`--device cuda --precision bf16`: pinned host batches cut to their longest row, bf16 autocast, fused AdamW),
Trainer with bf16=True, optim adamw_torch_fused, the same batch size, lr, warm-up ratio, linear decay, weight
decay, clipping, and a collator that pads each batch to its longest row, as ours cuts it; no evaluation, no
checkpoints. The last line is one JSON object: examples/s of each and `ratio` (ours / Trainer). Without a GPU it
fails in one line (exit 2). --group-by-length: both sides batch rows of similar length. Needs `accelerate` for Trainer (pip install 'clozeforge[bench]').
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # run as a file: the repository root, not bench/ (whose tokenize.py shadows the stdlib's)
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bench/finetune_loop.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("hf", nargs="?", help="an export directory (CPU form)")
    ap.add_argument("train", nargs="?", help="a classify split, JSON lines (CPU form)")
    ap.add_argument("epochs", nargs="?", type=int, default=3, help="epochs per round (CPU form; default: 3)")
    ap.add_argument("--gpu", action="store_true", help="BERT-base on one GPU in bf16, ours against Trainer")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer, 32-wide BERT instead of BERT-base (tests)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="with --gpu/--tiny (default: cuda)")
    ap.add_argument("--examples", type=int, default=4096, help="synthetic training rows (default: 4096)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128, help="longest row in word pieces (default: 128)")
    ap.add_argument("--warmup-steps", type=int, default=10, help="untimed steps each side runs first (default: 10)")
    ap.add_argument("--group-by-length", action="store_true",
                    help="both sides batch rows of similar length: ours --group-by-length, Trainer its length-grouped sampler")
    return ap


def synthetic(n: int, max_len: int, vocab: int, seed: int = 0):
    """(Features for our loop, rows for Trainer): `n` rows [CLS] w... [SEP] of uniform lengths 8..max_len, 2 labels."""
    import numpy as np
    import torch

    from downstream.finetune.tasks import Features

    rng = np.random.default_rng(seed)
    lengths = rng.integers(min(8, max_len), max_len + 1, size=n)
    ids = np.zeros((n, max_len), dtype=np.int64)
    for i, length in enumerate(lengths):
        ids[i, :length] = [101, *rng.integers(1000, vocab, size=length - 2), 102]  # BERT's [CLS] and [SEP] ids
    mask = (ids != 0).astype(np.int64)
    labels = rng.integers(0, 2, size=n)
    tensors = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
               "token_type_ids": torch.zeros_like(torch.from_numpy(ids)), "labels": torch.from_numpy(labels)}
    rows = [{"input_ids": ids[i, :lengths[i]].tolist(), "labels": int(labels[i])} for i in range(n)]
    return Features(tensors, np.arange(n)), rows


def pad_batch(rows: list[dict]) -> dict:
    """Trainer's collator: the batch padded to its longest row (what our loop's cut to the longest row gives)."""
    import torch

    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r["input_ids"])] = torch.tensor(r["input_ids"])
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "token_type_ids": torch.zeros_like(ids),
            "labels": torch.tensor([r["labels"] for r in rows])}


def trainer_grouping(grouped: bool) -> dict:
    """TrainingArguments' length grouping: a sampling strategy in transformers 5, a flag in 4."""
    import inspect

    from transformers import TrainingArguments

    if "train_sampling_strategy" in inspect.signature(TrainingArguments).parameters:
        return {"train_sampling_strategy": "group_by_length" if grouped else "random"}
    return {"group_by_length": grouped}


def compare(args) -> dict:
    """Ours against Trainer, one timed epoch each after a warm-up; the figures of the last line."""
    import torch
    import transformers
    from transformers import Trainer, TrainingArguments

    from downstream.finetune import loop, tasks
    from downstream.finetune.data import Split
    from downstream.finetune.job import Progress
    from downstream.finetune.tasks import Features
    from schemas.tables import Account

    transformers.logging.set_verbosity_error()
    cuda = args.device == "cuda"
    precision = "bf16" if cuda else "fp32"
    config = transformers.BertConfig(num_labels=2)  # BERT-base: 12 x 768, vocabulary 30,522
    if args.tiny:
        config = transformers.BertConfig(num_labels=2, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=max(args.max_len, 128))
    features, rows = synthetic(args.examples, args.max_len, config.vocab_size)
    split = Split("synthetic", "", [{"label": r["labels"], "line": i + 1} for i, r in enumerate(rows)],
                  Account("jsonl", read=len(rows)))
    task = tasks.of("classify")
    task.prepare(split, [])
    one = Features({k: v[:1] for k, v in features.tensors.items()}, features.example_of_row[:1])  # ours scores each epoch
    place = loop.Place(device=torch.device(args.device), precision=precision)
    lr, quiet = 5e-5, Progress(1, print_fn=lambda *a, **k: None)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def new_model():
        torch.manual_seed(0)
        return transformers.BertForSequenceClassification(config)

    def ours(n: int) -> float:
        part = Features({k: v[:n] for k, v in features.tensors.items()}, features.example_of_row[:n])
        model = new_model().to(place.device)  # as Trainer's constructor moves it, outside the timed call
        sync()
        started = time.perf_counter()
        loop.train(task, model, part, one, split.examples[:1],
                     loop.Recipe(epochs=1, batch_size=args.batch_size, group_by_length=args.group_by_length),
                     lr=lr, seed=0, progress=quiet, label="", place=place)
        sync()
        return time.perf_counter() - started

    def theirs(n: int) -> float:
        with tempfile.TemporaryDirectory(prefix="bench-trainer.") as out:
            targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch_size, num_train_epochs=1,
                                      learning_rate=lr, warmup_steps=0.1, weight_decay=0.01, lr_scheduler_type="linear",
                                      max_grad_norm=1.0, bf16=precision == "bf16", optim="adamw_torch_fused", seed=0,
                                      save_strategy="no", eval_strategy="no", report_to=[], logging_strategy="no",
                                      use_cpu=not cuda, dataloader_num_workers=0, disable_tqdm=True,
                                      **trainer_grouping(args.group_by_length))
            trainer = Trainer(model=new_model(), args=targs, train_dataset=rows[:n], data_collator=pad_batch)
            sync()
            started = time.perf_counter()
            trainer.train()
            sync()
            return time.perf_counter() - started

    warm = min(args.warmup_steps * args.batch_size, args.examples)
    ours(warm), theirs(warm)
    ours_s, theirs_s = ours(args.examples), theirs(args.examples)
    return {"bench": "finetune_loop", "device": torch.cuda.get_device_name() if cuda else "cpu", "precision": precision,
            "model": "tiny" if args.tiny else "bert-base", "examples": args.examples, "batch_size": args.batch_size,
            "max_len": args.max_len, "group_by_length": args.group_by_length, "ours_s": round(ours_s, 3), "trainer_s": round(theirs_s, 3),
            "ours_examples_per_s": round(args.examples / ours_s, 1), "trainer_examples_per_s": round(args.examples / theirs_s, 1),
            "ratio": round(theirs_s / ours_s, 3), "torch": torch.__version__, "transformers": transformers.__version__}


def cpu_rounds(hf: str, train_path: str, epochs: int) -> None:
    """The CPU form: an export on a classify split, three alternating rounds."""
    t0 = time.time()
    import torch
    import transformers

    from downstream.finetune import loop, tasks
    from downstream.finetune.data import read_split
    from downstream.finetune.job import Progress
    t_ours = time.time() - t0
    t0 = time.time()
    from transformers import Trainer, TrainingArguments
    t_trainer = time.time() - t0
    transformers.logging.set_verbosity_error()
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf)
    task = tasks.of("classify")
    split = read_split(train_path, task)
    task.prepare(split, [])
    features = task.encode(split.examples, tokenizer, max_len=64)
    head = task.head_config()

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return len(split.examples)

        def __getitem__(self, i):
            return {k: v[i] for k, v in features.tensors.items()}

    def run_ours() -> float:
        torch.manual_seed(0)
        model = transformers.AutoModelForSequenceClassification.from_pretrained(hf, **head)
        # validation on a single row: the loop scores each epoch, Trainer (as called here) does not
        one = tasks.Features({k: v[:1] for k, v in features.tensors.items()}, features.example_of_row[:1])
        t0 = time.time()
        loop.train(task, model, features, one, split.examples[:1], loop.Recipe(epochs=epochs),
                     lr=1e-3, seed=0, progress=Progress(epochs, print_fn=lambda *a, **k: None), label="")
        return (time.time() - t0) / epochs

    def run_trainer() -> float:
        torch.manual_seed(0)
        model = transformers.AutoModelForSequenceClassification.from_pretrained(hf, **head)
        args = TrainingArguments(output_dir="/tmp/bench-trainer", per_device_train_batch_size=32, num_train_epochs=epochs,
                                 learning_rate=1e-3, warmup_steps=0.1, weight_decay=0.01, lr_scheduler_type="linear",
                                 save_strategy="no", report_to=[], logging_strategy="no", use_cpu=True,
                                 dataloader_num_workers=0, disable_tqdm=True)
        t0 = time.time()
        Trainer(model=model, args=args, train_dataset=Rows()).train()
        return (time.time() - t0) / epochs

    rounds = [(run_ours(), run_trainer()) for _ in range(3)]
    print(f"import: ours {t_ours:.1f} s, Trainer (+accelerate) {t_trainer:.1f} s more")
    for ours, theirs in rounds:
        print(f"s/epoch ({len(split.examples)} rows, batch 32): ours {ours:.2f}, Trainer {theirs:.2f}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not (args.gpu or args.tiny):
        if not (args.hf and args.train):
            print("bench/finetune_loop.py: give HF_DIR TRAIN.jsonl, or --gpu (or --tiny --device cpu)", file=sys.stderr)
            return 2
        cpu_rounds(args.hf, args.train, args.epochs)
        return 0
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench/finetune_loop.py: error: --gpu needs a CUDA GPU and torch sees none (--tiny --device cpu runs "
              "the same path on the CPU)", file=sys.stderr)
        return 2
    try:
        import accelerate  # noqa: F401
    except ImportError:
        print("bench/finetune_loop.py: error: Trainer needs accelerate: pip install 'clozeforge[bench]'", file=sys.stderr)
        return 2
    print(json.dumps(compare(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
