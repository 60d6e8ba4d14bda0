"""What prep writes, with no Beam import: atomic files, shard encodings, the run report.

    atomic.py  files that appear whole or not at all (temporary name, then rename), hashed as written
    shards.py  shard names and counts; pair shards (Arrow IPC) and clean shards (Parquet), written and read
    report.py  report.json: every input record accounted for
    vocabulary.py  a vocabulary directory of any tokenizer kind, written whole (vocab.txt, vocab_config.json)
"""
