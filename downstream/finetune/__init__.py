"""`clozeforge finetune`: fine-tune an export (or a run's checkpoints) on labelled data and measure what pretraining bought.

    tasks/        one class per kind of task (classify/regression, pair, tag, span) and their table: columns,
                  reading a row, label map, inputs for transformers' heads, decoding, gold, metric, pipeline
    data.py       read a split (JSONL / CSV / Parquet via fsspec), row by row through the task; counted drops
    metrics.py    accuracy, macro-F1, MCC, Pearson, Spearman, entity F1 over BIO spans, SQuAD EM and F1
    recipe.py     BERT's fine-tuning recipe and its loop on a device (autocast, DDP), and why it is not Trainer
    ranks.py      --device/--precision resolved; --nproc-per-node ranks: a job's runs spread, or one run data-parallel
    protocol.py   selection (each lr's mean ± SE, the chosen lr, the run model/ comes from) and statistics (the
                  gain's paired SE over seeds, its bootstrap interval over test examples, scratch's own lr grid)
    job.py        the arms (the model, each checkpoint, the baseline) and every (arm, lr, seed) run
    config.py     FinetuneConfig: every flag
    output.py     the output directory (lock, staging, swap) and the checkpoint-sweep figure and table
    command.py    the command: the splits, the arms, the gain, results.json
    demo_task.py  the demo's built-in downstream task, from text of this Python environment
"""
