"""clozeforge downstream: from a run's checkpoints to models other code uses, and what they are worth.

    export.py     `clozeforge export`: any ZeRO stage consolidated → a HuggingFace directory (transformers loads it)
    export_dir.py an export's files, how an export of ours is known, its directory written whole
    load.py       an exported directory → the project's model and tokenizer, without transformers
    fill_mask.py  `clozeforge fill-mask`: top-k predictions per [MASK]
    score.py      `clozeforge score`: held-out masked-LM accuracy (the trainer's masks) and pseudo-perplexity of a text
    embed.py      `clozeforge embed`: contextual embeddings (CLS, mean, per token, or per word: contextual/)
    contextual/   `clozeforge senses` (1-NN word sense disambiguation) and `clozeforge similarity` (word similarity,
                  anisotropy): word vectors from any transformers encoder, standardised, scored beside baselines
    finetune/     `clozeforge finetune`: heads for sequences, pairs, tokens, spans; benchmark suites; built-in tasks;
                  each score beside a baseline tuned on its own grid

NOTE: export lives here, not in trainer/: it is the first thing that *uses* a checkpoint (a run is read, never
trained), fine-tuning and senses export a run's checkpoints through it before they start, and trainer/ then holds
pretraining alone.
It reads the trainer's checkpoint store and model (downstream imports trainer, never the other way round).
"""

import process  # noqa: F401  (its __init__ sets the OpenMP defaults before any module here loads torch)
