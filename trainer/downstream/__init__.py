"""From a run's checkpoint to a model other code uses.

    export.py     `clozeforge export`: consolidate any ZeRO stage → a HuggingFace directory (transformers loads it)
    load.py       an exported directory → the project's model and tokenizer, without transformers
    fill_mask.py  `clozeforge fill-mask`: top-k predictions per [MASK]
    embed.py      `clozeforge embed`: contextual embeddings (CLS, mean, or per token)
"""
