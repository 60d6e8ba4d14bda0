"""What happens to one document, with no Beam import (the stages in pipelines/stages/ call these).

    records.py         the records that flow between stages: RawDoc, Doc, TokenizedDoc, Drop, Pair
    line_stream.py     a file's bytes → lines, in bounded memory (compressed streams, cut streams)
    readers.py         a file → RawDoc / Drop / Event per record (.txt, .jsonl[.gz|.zst], .parquet)
    normalize.py       text cleaning: HTML, line breaks, control characters, Unicode form, white space
    clean.py           one document cleaned: normalize → filters (pipelines/filters) → sentences
    sentences.py       text → sentences
    minhash.py         MinHash signatures and LSH bands for near-duplicate detection
    decontaminate.py   evaluation files → 13-word n-gram hashes; a document's n-gram shared with them
    nsp.py             a document's sentences → BERT's next-sentence-prediction pairs
    languages.py       language codes; a document's language (py3langid)
    scripts.py         the scripts of a text, and the letters uncased normalisation would delete
    catalogs.py        gettext .mo / .po catalogs read as data
    parallel.py        translation pairs from catalogs, TSV, line-aligned files; each pair kept or dropped
    keys.py            seeded, runner-independent hashes: every random choice of prep
    builtin_corpus.py  the demo's corpus: docstrings of the installed Python modules, read with `ast`
"""
