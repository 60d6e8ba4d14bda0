"""Byte-level BPE (GPT-2's and RoBERTa's), with no Beam import: the alphabet and words, the learner, the files.

    byte_level.py  the 256-symbol byte alphabet and GPT-2's pre-tokenizer: text → the words the learner counts
    config.py      BpeConfig (--vocab-size, --min-frequency)
    merges.py      the merge loop, deterministic (WordPiece's learner runs it too)
    learner.py     (word, count) pairs → tokens and merges
    files.py       tokens and merges → the vocabulary directory AutoTokenizer loads as RobertaTokenizerFast

The encoder is `tokenizers`' own, on the tokenizer.json written here (pipelines/tokenizer_kinds.py).
"""
