"""`clozeforge finetune`: fine-tune an export (or a run's checkpoints) on labelled data and measure what pretraining bought.

    command.py    the command: its flags (config.py's FinetuneConfig), the launcher, one suite or one task job
    config.py     FinetuneConfig: every flag
    job.py        one task job end to end (`run_task`), its plan of (arm, lr, seed) runs, each run's transformers
                  model, how ranks share the runs, its progress lines, and model/ saved from the chosen one
    models.py     the arms: MODEL (an export, or a RUN's checkpoints exported once, before any job) and the
                  baseline; lr grids, the sequence length
    data.py       read a split (JSONL / CSV / Parquet via fsspec), row by row through the task; counted drops
    tasks/        one class per kind of task (classify/regression, pair, tag, span) and their table: columns,
                  reading a row, label map, inputs for transformers' heads, decoding, gold, metric, pipeline
    loop.py       one run: its loop, BERT's fine-tuning recipe (Recipe), where it computes (Place: device,
                  precision, ranks)
    ranks.py      the job's processes: this one's Place from the flags and the launcher, starting and leaving ranks
    protocol.py   the comparison: each arm's lr grid (where it starts, how it grows while its best rate is at an
                  edge), selection (each lr's mean ± SE, the chosen lr, the run model/ comes from) and statistics
                  (the gain's paired SE over seeds, its bootstrap interval over test examples)
    metrics.py    accuracy, macro-F1, MCC, Pearson, Spearman, entity F1 over BIO spans, SQuAD EM and F1
    output.py     the output directory (lock, staging, swap), results.json, model/, the sweep's figure, the summary
    suites/       benchmarks in their official files (GLUE, SQuAD, CoNLL-2003): each task one job, then a table
    builtin/      tasks made from text on the machine (man pages, GNU manuals, licences, the standard library);
                  --builtin-task NAME writes one for the job, --test-language CODE tests it in another language
    __main__.py   `python -m downstream.finetune`: one rank of a job started by --nproc-per-node or torchrun
"""
