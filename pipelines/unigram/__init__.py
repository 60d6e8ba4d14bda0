"""SentencePiece's Unigram (XLM-R's), with no Beam import: normalization and words, the learner, the files.

    normalizer.py  NFKC with nmt_nfkc's rules as a precompiled charsmap, and text → the '▁' words the learner counts
    darts.py       the double-array trie a charsmap holds
    config.py      UnigramConfig (--vocab-size, --character-coverage, SentencePiece's defaults)
    seeds.py       the words' frequent substrings: where learning starts (suffix sorting in numpy)
    lattice.py     every cut of a batch of words: expected piece counts (forward-backward) and Viterbi, in numpy
    learner.py     (word, count) pairs → pieces and scores: EM with pruning, as SentencePiece trains
    files.py       pieces → the vocabulary directory AutoTokenizer loads as XLMRobertaTokenizerFast

The encoder is `tokenizers`' own, on the tokenizer.json written here (pipelines/tokenizer_kinds.py).
"""
