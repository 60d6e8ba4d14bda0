"""Commands that use prep's outputs, apart from the pipeline itself (no Beam import):

    tokenize.py  `clozeforge tokenize`: text → the ids the pipeline would write, with a prep vocabulary
    inspect.py   `clozeforge inspect`: a pairs/ directory's manifest, statistics and checksums
"""
