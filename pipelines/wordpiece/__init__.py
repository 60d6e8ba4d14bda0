"""WordPiece, with no Beam import: BERT's basic tokenizer, the learner, the encoder and the vocabulary files.

    basic.py    text → basic words, character for character as `tokenizers`' BertNormalizer + BertPreTokenizer
    config.py   VocabConfig (how a vocabulary is learned, how text is normalized) and the special-token layout
    learner.py  (word, count) pairs → tokens: the WordPiece merges, deterministic
    encoder.py  text → ids, equal to `tokenizers`' with the same vocabulary, several times faster per core
    files.py    tokens → the vocabulary directory (schemas/vocab.py) and its VocabConfig back

Import from here.
"""

from pipelines.wordpiece.basic import basic_words, bert_normalize
from pipelines.wordpiece.config import VocabConfig, special_token_layout
from pipelines.wordpiece.encoder import DEFAULT_CACHE_SIZE, WordPieceEncoder
from pipelines.wordpiece.files import check_tokens, read_vocab_config, write_vocab
from pipelines.wordpiece.learner import learn_wordpiece

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "VocabConfig",
    "WordPieceEncoder",
    "basic_words",
    "check_tokens",
    "bert_normalize",
    "learn_wordpiece",
    "read_vocab_config",
    "special_token_layout",
    "write_vocab",
]
