"""`clozeforge finetune`: fine-tune an export (or a run's checkpoints) on labelled data and measure what pretraining bought.

    data.py       read and check a split (JSONL / CSV / Parquet via fsspec); label maps; counted drops
    tasks.py      classify, pair, tag, span: inputs for transformers' heads, predictions back to labels
    metrics.py    accuracy, macro-F1, MCC, Pearson, Spearman, entity F1 over BIO spans, SQuAD EM and F1
    recipe.py     BERT's fine-tuning recipe and its loop on a device (autocast, DDP), and why it is not Trainer
    ranks.py      --device/--precision resolved; --nproc-per-node ranks: a job's runs spread, or one run data-parallel
    config.py     FinetuneConfig: every flag
    output.py     the output directory (lock, staging, swap) and the checkpoint-sweep figure and table
    command.py    the command: every (model, lr, seed) run, the scratch baseline, results.json
    demo_task.py  the demo's built-in downstream task, from text of this Python environment
"""
