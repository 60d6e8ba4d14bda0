"""clozeforge train: a DeepSpeed ZeRO trainer over prep's pair shards (never imports apache_beam); pretraining only,
what uses its checkpoints is downstream/.

    pretrain.py  the one entry point: `clozeforge train`, `python -m trainer.pretrain`, `deepspeed --module
                 trainer.pretrain`, `torchrun -m trainer.pretrain`; with --nproc-per-node N it starts N ranks
    config.py    TrainConfig, every setting of a run (its flags are generated from it), TrainError, and
                 RESUME_RULES, the one table of what a resumed run may change
    loop.py      the training loop: steps, logging, evaluation, checkpoints, phases, stopping
    start/       the run's start-up, in order (where it starts: resume, --init-from or random; what trains;
                 what it reads), --init-from's sources and continued pretraining's defaults
    builders.py  the model, the masker, the engine (optimizer, schedule, the DeepSpeed JSON), each phase's streams
    optim.py     AdamW as every training here builds it: BERT's weight-decay groups, torch's fused kernel
    heads.py     the one table of pretraining outputs: each head's loss, labels and fill, weight; plotted,
                 evaluated, exported
    masking/     online masking: BERT 80/10/10, whole-word, SpanBERT spans + SBO targets, one strategy a row
    evaluate.py  validation losses and accuracies, over all ranks
    metrics.py   metrics.jsonl, the progress line, TensorBoard, curves.png
    run/         this rank's runtime (rank, device, precision, process group) and the run lock; launching,
                 stopping and precision are process/'s, shared with fine-tuning
    checkpoint/  save and verify, safe loading, resume (refusals by RESUME_RULES), elastic world sizes
    data/        shards → masked batches: layout, reader, collate, streams, mixtures
    model/       the networks (BERT-family under transformers' parameter names, ELECTRA) and their config
"""

import process  # noqa: F401  (its __init__ sets the OpenMP defaults before any trainer module loads torch)
