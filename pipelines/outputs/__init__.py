"""What prep writes, with no Beam import: atomic files, shard encodings, the run report.

    atomic.py     files that appear whole or not at all (temporary name, then rename), hashed as written
    attempts.py   each attempt's own files, and the final step's commit of the committed attempt's
    ownership.py  one run per --output: the lock, the run file (its settings, its remote job), leftovers, the sweep
    shards.py     shard names and counts; pair shards (Arrow IPC) and clean shards (Parquet), written and read
    report.py     report.json: every input record accounted for
    vocabulary.py  a vocabulary directory of any tokenizer kind, written whole (vocab.txt, vocab_config.json)
"""
