"""clozeforge prep: Apache Beam pipelines from raw text to NSP pair or packed-row shards (never imports torch).

    prep.py      the `clozeforge prep` entry point: flags → PrepConfig → the Beam pipeline → summary
    config.py    PrepConfig, every setting of a run
    graph.py     which stage feeds which
    runners.py   the kinds of Beam runner: local or not, whether a job outlives its launcher, how to cancel it
    tokenizer_kinds.py  the --tokenizer kinds, one object each: words, learner, files, encoder  (no Beam)
    stages/      the Beam PTransforms, one a module, in graph order      (needs Beam)
    shuffle/     prep's shuffles through run files                      (needs Beam; runs.py does not)
    documents/   one document: read, clean, split; NSP pairs, packing    (no Beam)
    filters/     quality filters, one rule family a module              (no Beam)
    wordpiece/   BERT's basic tokenizer, the learner, the encoder       (no Beam)
    bpe/         byte-level BPE: GPT-2's words, the learner, the files  (no Beam)
    unigram/     SentencePiece's Unigram: NFKC, seeds, EM, the files    (no Beam)
    outputs/     atomic files, shard encodings, the report              (no Beam)
    commands/    `clozeforge tokenize` and `clozeforge inspect`         (no Beam)
    errors.py    PrepError: a user's mistake, printed as one line
"""

import logging


class _QuietBeamImport(logging.Filter):
    # NOTE: apache_beam logs this warning on import whenever the optional GCP client libraries are absent,
    # which is every local run; it says nothing about the user's job.
    def filter(self, record: logging.LogRecord) -> bool:
        return "apitools not found" not in record.getMessage()


logging.getLogger().addFilter(_QuietBeamImport())
