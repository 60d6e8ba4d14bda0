"""Our fine-tuning loop against transformers' Trainer on the same model, data and steps (CPU, in one process).

    python -m bench.finetune_loop HF_DIR TRAIN.jsonl [EPOCHS]

Prints the seconds to import each, and the seconds per epoch of each on the same encoded rows (batch 32, the
same AdamW and linear schedule, no evaluation inside the loop). Needs `accelerate` for Trainer
(pip install 'clozeforge[bench]').
"""

from __future__ import annotations

import sys
import time


def main() -> None:
    hf, train_path = sys.argv[1], sys.argv[2]
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    t0 = time.time()
    import torch
    import transformers

    from trainer.downstream.finetune import recipe, tasks
    from trainer.downstream.finetune.data import read_split
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
        recipe.train(task, model, features, one, split.examples[:1], recipe.Recipe(epochs=epochs),
                     lr=1e-3, seed=0, progress=recipe.Progress(epochs, print_fn=lambda *a, **k: None), label="")
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


if __name__ == "__main__":
    main()
