"""The Beam stages of prep, one PTransform per module; pipelines/graph.py wires them in this order:

    read_corpus.py       ReadCorpus        URL globs → RawDoc, Drop, accounting tallies
    identify_language.py IdentifyLanguage  RawDoc → RawDoc tagged with its language, or Drop (--identify-languages)
    clean_documents.py   CleanDocuments    RawDoc → Doc (normalized, filtered, split into sentences) or Drop
    deduplicate.py       Deduplicate       Doc → Doc, exact and near duplicates dropped
    decontaminate.py     Decontaminate     Doc → Doc, documents sharing a 13-gram with --decontaminate files dropped
    write_clean_docs.py  WriteCleanDocs    Doc → clean/*.parquet (staged: each attempt's own files)
    count_scripts.py     CountScripts      Doc → letters per script, the accent-stripping warning (or --strict's refusal)
    language_vocab_stats.py  LanguageVocabStats  clean/ shards → each language's pieces per word, [UNK] rate
    count_words.py       CountWords        Doc → (word, count), the --tokenizer kind's words
    learn_vocabulary.py  LearnVocabulary   (word, count) → vocab/ of that kind, staged (or ReuseVocab with --vocab)
    tokenize.py          Tokenize          clean/ shards → TokenizedDoc, token counts
    make_nsp_pairs.py    MakeNspPairs      TokenizedDoc → NSP pair rows
    write_shards.py      WriteShards       pair rows → pairs/*.arrow, globally shuffled, staged
    read_parallel.py     ReadParallel      --parallel files → translation Pairs, cleaned, or Drop
    write_parallel.py    WriteParallel     Pair → deduplicated, parallel/*.parquet (staged)
    finalize.py          Finalize          the staged files into place, token_counts.txt, pairs/manifest.json, report.json
    accounting.py        the drop and keep tallies every stage feeds (report.json; Beam counters, which count attempts)

What a stage does to one record lives beside them without Beam: pipelines/documents, filters, wordpiece, bpe,
unigram (a tokenizer kind is a row of pipelines/tokenizer_kinds.py).
"""
