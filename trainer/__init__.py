"""clozeforge train: a DeepSpeed ZeRO trainer over prep's pair shards (never imports apache_beam).

    pretrain.py  the entry point (`clozeforge train`, `python -m trainer.pretrain`, `deepspeed --module ...`)
    launch.py    `clozeforge train --nproc-per-node N`: starts N ranks through torch's launcher
    cpu_sharing.py  threading defaults (OpenMP wait policy) set on import, before torch loads; threads per rank
    config.py    TrainConfig, every setting of a run, and the DeepSpeed JSON generated from it
    runtime.py   this process's place in the job: rank, world size, device, precision
    loop.py      the training loop: steps, logging, evaluation, checkpoints, phases, stopping
    builders.py  the model, the masker, the engine (optimizer, schedule), each phase's data streams
    evaluate.py  validation losses and accuracies, over all ranks
    resume.py    what a checkpoint may be resumed under; the run directory's records
    stopping.py  SIGTERM / SIGINT → a checkpoint at the end of the step
    checkpoint.py  DeepSpeed checkpoints, `latest`, and the consolidated fp32 weights for export
    metrics.py   metrics.jsonl, the progress line, TensorBoard, curves.png
    masking.py   online masking: BERT 80/10/10, whole-word, SpanBERT spans + SBO targets
    data/        shards → masked batches: layout, reader, collate, streams, mixtures
    model/       the BERT (transformers' parameter names) and its config
    downstream/  export to HuggingFace, fill-mask, embeddings
"""

from trainer import cpu_sharing

# Before any trainer module imports torch (and so loads its OpenMP runtime): see trainer/cpu_sharing.py.
cpu_sharing.apply()
