"""The worker of `python bench/run.py finetune_vs_trainer --shapes ...` (its driver: bench/finetune_vs_trainer.py,
`paired`): one side's fine-tuning run in this process, paused every CHUNK training steps until the driver says go.

    python -m bench._finetune_shapes --worker ours|ours_whole|ours_grouped|trainer LAYERSxHIDDEN ROWS EPOCHS CHUNK

In:  the side, the model shape, the rows and epochs; its environment (the driver gives each side its own
     threading defaults). Out: on stdout a JSON line at each pause ({"steps", "t"}) and at the end ({"done",
     "steps", "threads", "process_s": this process's seconds less its pauses}); it reads "go" from stdin to go on.
torch is imported first, so libgomp reads the environment the driver gave, before anything imports process/
(which would set clozeforge's defaults).
"""

from __future__ import annotations

import json
import os
import sys
import time

# ---- a worker: one side, run as `python -m bench._finetune_shapes --worker SIDE LxH ROWS EPOCHS` ----


def _worker(side: str, shape: str, rows: int, epochs: int, chunk: int) -> None:
    started = time.perf_counter()
    import torch  # first: libgomp reads its environment now, before anything imports process/ (which sets ours)

    layers, hidden = map(int, shape.split("x"))
    from bench.finetune_vs_trainer import setup

    s = setup(layers=layers, hidden=hidden, train=rows, valid=8, max_len=128)
    model = s.new_model()
    waited = 0.0
    steps = 0

    def pause(optimizer, args, kwargs):
        nonlocal waited, steps
        if steps % chunk == 0:
            print(json.dumps({"steps": steps, "t": time.perf_counter()}), flush=True)
            t = time.perf_counter()
            if sys.stdin.readline().strip() != "go":
                os._exit(0)
            waited += time.perf_counter() - t
        steps += 1

    # before every optimizer step, whoever makes it (ours computes a batch in pieces: several forwards a step)
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(pause)
    if side == "trainer":
        _train_with_trainer(s, model, epochs)
    else:
        _train_with_ours(s, model, epochs, grouped=side == "ours_grouped", pieces=side != "ours_whole")
    print(json.dumps({"done": True, "steps": steps, "t": time.perf_counter(), "threads": torch.get_num_threads(),
                      "process_s": time.perf_counter() - started - waited}), flush=True)
    sys.stdin.readline()


def _train_with_ours(s, model, epochs: int, grouped: bool = False, pieces: bool = True) -> None:
    from downstream.finetune import loop
    from downstream.finetune.job import Progress

    recipe = loop.Recipe(epochs=epochs, batch_size=32, group_by_length=grouped, length_pieces=pieces)
    loop.train(s.task, model, s.train_features, s.one, s.valid_examples[:1], recipe,
               lr=1e-3, seed=0, progress=Progress(1, print_fn=lambda *a, **k: None), label="")


def _train_with_trainer(s, model, epochs: int) -> None:
    import tempfile

    from transformers import Trainer, TrainingArguments

    from bench.finetune_loop import pad_batch

    with tempfile.TemporaryDirectory(prefix="bench-trainer.") as out:
        targs = TrainingArguments(output_dir=out, per_device_train_batch_size=32, num_train_epochs=epochs, learning_rate=1e-3,
                                  warmup_steps=0.1, weight_decay=0.01, lr_scheduler_type="linear", max_grad_norm=1.0, seed=0,
                                  save_strategy="no", eval_strategy="no", report_to=[], logging_strategy="no", use_cpu=True,
                                  dataloader_num_workers=0, disable_tqdm=True)
        Trainer(model=model, args=targs, train_dataset=s.rows, data_collator=pad_batch).train()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
