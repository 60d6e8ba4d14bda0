"""A Unigram vocabulary directory: written from the learned pieces, or from an XLM-R tokenizer directory.

In:  the pieces and scores (pipelines/unigram/learner.py) and the UnigramConfig, or a tokenizer directory AutoTokenizer
     loads as XLMRobertaTokenizerFast (`--vocab DIR`: its tokenizer.json, as transformers 5 saves it).
Out: vocab.txt, tokenizer.json (with the NFKC charsmap of pipelines/unigram/normalizer.py, or the source's own),
     tokenizer_config.json (schemas/hf_tokenizers.py: AutoTokenizer loads the directory as XLMRobertaTokenizerFast and
     `tokenizers` encodes it with AutoTokenizer's ids) and vocab_config.json; returns the vocabulary summary.
"""

from __future__ import annotations

from pipelines.outputs.vocabulary import write_directory
from pipelines.unigram.config import UnigramConfig
from pipelines.unigram.normalizer import charsmap_base64
from schemas.hf_tokenizers import UnigramModel, added_tokens, read_unigram
from schemas.tokenizer_formats import UNIGRAM
from schemas.vocab import TOKENIZER_CONFIG_FILE, TOKENIZER_FILE


def _write(directory: str, model: UnigramModel, settings: dict) -> dict:
    files = {TOKENIZER_FILE: model.tokenizer_json(), TOKENIZER_CONFIG_FILE: model.tokenizer_config_json()}
    return write_directory(directory, list(model.tokens), files, UNIGRAM, settings)


def write_unigram(directory: str, pieces: list[tuple[str, float]], config: UnigramConfig) -> dict:
    """Write what the learner made, normalizing as it learned (NFKC with nmt_nfkc's rules)."""
    tokens = [p for p, _ in pieces]
    model = UnigramModel(pieces=tuple(pieces), added=added_tokens(tokens, UNIGRAM), charsmap=charsmap_base64())
    return _write(directory, model, config.to_dict())


def reuse_unigram(source: str, directory: str) -> dict:
    """Write the Unigram model of `source` (an XLM-R tokenizer directory, or a prep run's vocab/) into `directory`."""
    model = read_unigram(source)
    return _write(directory, model, {"add_prefix_space": model.add_prefix_space, "normalized": model.charsmap is not None})
