"""A run's checkpoints: written atomically, verified before use, loaded without running code, resumed by rule.

    store.py      DeepSpeed checkpoints under RUN/checkpoints/, `latest`, and the consolidated fp32 weights for export
    integrity.py  the record of every file a checkpoint holds (size, sha256), written last and checked on load
    safe_load.py  torch.load with weights_only=True and DeepSpeed's four classes allowed, nothing else
    resume.py     the run directory before training: the refusals trainer/config.py's RESUME_RULES ask for,
                  train_config.json (read here only), vocab/; on another number of ranks, the run's global batch
                  and partitions, and its ZeRO state in DeepSpeed's universal form
"""
