"""A byte-level BPE's vocabulary directory: written from the learned tokens and merges, or from a RoBERTa directory.

In:  the tokens and merges (pipelines/bpe/learner.py) and the BpeConfig, or a tokenizer directory AutoTokenizer loads
     as RobertaTokenizerFast (`--vocab DIR`: transformers 5's tokenizer.json + tokenizer_config.json, or
     vocab.json + merges.txt).
Out: vocab.txt, tokenizer.json, vocab.json, merges.txt, tokenizer_config.json (schemas/hf_tokenizers.py, so that
     AutoTokenizer loads the directory as RobertaTokenizerFast and `tokenizers` encodes it with AutoTokenizer's ids)
     and vocab_config.json; returns the vocabulary summary.
"""

from __future__ import annotations

from pipelines.bpe.config import BpeConfig
from pipelines.outputs.vocabulary import write_directory
from schemas.hf_tokenizers import ByteLevelBpe, added_tokens, read_bpe
from schemas.tokenizer_formats import BPE
from schemas.vocab import (
    BPE_VOCAB_FILE,
    MERGES_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
)


def _write(directory: str, model: ByteLevelBpe, settings: dict) -> dict:
    files = {
        TOKENIZER_FILE: model.tokenizer_json(),
        BPE_VOCAB_FILE: model.vocab_json(),
        MERGES_FILE: model.merges_txt(),
        TOKENIZER_CONFIG_FILE: model.tokenizer_config_json(),
    }
    return write_directory(directory, list(model.tokens), files, BPE, settings)


def write_bpe(directory: str, tokens: list[str], merges: list[tuple[str, str]], config: BpeConfig) -> dict:
    """Write what the learner made; <mask> takes the space before it, as roberta-base's does."""
    model = ByteLevelBpe(tokens=tuple(tokens), merges=tuple(merges), added=added_tokens(tokens, BPE))
    return _write(directory, model, config.to_dict())


def reuse_bpe(source: str, directory: str) -> dict:
    """Write the byte-level BPE of `source` (a RoBERTa tokenizer directory, or a prep run's vocab/) into `directory`."""
    model = read_bpe(source)
    return _write(directory, model, {"add_prefix_space": model.add_prefix_space})
