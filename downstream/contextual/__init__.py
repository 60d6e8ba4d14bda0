"""Contextual embeddings as the notes teach them: a word's vector in its context, word senses by nearest
neighbour, word similarity, the anisotropy that spoils cosine, and translation retrieval across languages. Every
module works on any transformers encoder with a fast tokenizer (an export of clozeforge, or a BERT, RoBERTa, XLM-R,
XLM saved with save_pretrained).

    vectors.py       WordVectors (--layers, --standardize, --reference, --stats: the flags embed, senses and
                     similarity share) and which hidden states --layers names
    encoder.py       a model directory → vectors of whole words (the tokenizer's own word boundaries) and of
                     character spans, per layer or averaged over --layers; mean-pooled sentence vectors of one
                     layer (an XLM model fed its language ids)
    standardize.py   none | center | zscore: statistics fitted on a reference file, saved beside the vectors,
                     applied to new text
    instances.py     a sense-labelled table → instances (text, target span or word index, lemma, sense), every
                     row kept or dropped with a counted reason
    senses.py        sense embeddings (the mean vector of a sense's instances), 1-NN by cosine with the runner-up
                     and the margin, accuracy beside the most-frequent-sense and random baselines, leave-one-out
    senses_command.py  `clozeforge senses fit|predict|evaluate` (evaluate: an export, a RUN's checkpoints, scratch)
    similarity.py    `clozeforge similarity`: Spearman of cosine per layer against human scores, anisotropy (mean
                     cosine of random words, share of the top dimensions) before and after standardisation, a PNG
    retrieval.py     translation pairs (prep --parallel's shards, a TSV) per language pair, deduplicated per side and
                     sampled; accuracy@1 of cosine nearest-neighbour retrieval both ways, with its binomial SE
    retrieve_command.py  `clozeforge retrieve`: Tatoeba-style retrieval of held-out pairs, middle layer mean-pooled
    plots.py         senses.png (accuracy over pretraining steps beside the fine-tuning gain) and similarity.png
    wordnet.py       WordNet's gloss examples (Debian's wordnet-base) → sense-labelled train/test tables
"""
