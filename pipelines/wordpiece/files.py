"""The vocabulary directory's files (schemas/vocab.py), written from a token list and read back as a VocabConfig.

In:  the learned tokens and the VocabConfig they were learned with.
Out: `write_vocab` writes the vocabulary file, tokenizer.json (loads in `tokenizers.Tokenizer` and in
     transformers' `BertTokenizerFast(tokenizer_file=...)`), tokenizer_config.json (what
     `AutoTokenizer.from_pretrained(dir)` needs beside it; both made by schemas/vocab.py, which export uses
     too) and vocab_config.json, each renamed into place once whole; `read_vocab_config` reads the VocabConfig
     back (from a HuggingFace BERT's tokenizer.json when there is no vocab_config.json).
"""

from __future__ import annotations

from pipelines.outputs import vocabulary
from pipelines.wordpiece.config import VocabConfig
from schemas import vocab as vocab_files
from schemas.tokenizer_formats import WORDPIECE
from schemas.vocab import TOKENIZER_CONFIG_FILE, TOKENIZER_FILE

CONFIG_RECORD_KEYS = vocabulary.RECORD_KEYS
"""Keys of vocab_config.json that record the result rather than configure the build."""


def read_vocab_config(directory: str) -> VocabConfig:
    """The VocabConfig recorded in `directory`/vocab_config.json.

    A directory without one but with a BERT tokenizer.json (a HuggingFace BERT checkpoint's, say) gives the
    normalization recorded there, so its vocabulary can be reused as is.
    """
    body = vocab_files.read_config(directory)
    if body is None:
        return VocabConfig(**vocab_files.tokenizer_json_settings(directory))
    return VocabConfig.from_dict({k: v for k, v in body.items() if k not in CONFIG_RECORD_KEYS})


def check_tokens(tokens: list[str]) -> dict[str, int]:
    """The special tokens' ids, once `tokens` is found fit for a vocabulary: each special token present, every
    token distinct, non-empty, without line breaks or edge whitespace; else a ValueError saying which."""
    return vocabulary.check_tokens(tokens, WORDPIECE)


def write_vocab(directory: str, tokens: list[str], config: VocabConfig) -> dict:
    """Write the vocabulary directory (see the module docstring); returns the manifest's `vocab` entry.

    {"file": the vocabulary file's name, "sha256": hex digest of its bytes, "size": len(tokens), "lowercase": bool,
    "tokenizer": "wordpiece"}. Each file goes to a temporary name first, then is renamed, so a retried writer never
    leaves half a file.
    """
    check_tokens(tokens)
    files = {
        TOKENIZER_FILE: vocab_files.tokenizer_json(tokens, config.to_dict()),
        TOKENIZER_CONFIG_FILE: vocab_files.tokenizer_config_json(config.to_dict()),
    }
    return vocabulary.write_directory(directory, tokens, files, WORDPIECE, config.to_dict(), lowercase=config.lowercase)
