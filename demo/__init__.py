"""`clozeforge demo`: the whole flow on a built-in corpus, each stage as its own process, as a user would type it.

    command.py     the command: its flags, Ctrl-C and SIGTERM at any point, what a rerun continues
    flows.py       the flows: corpus → prep → train (and a 2-rank run) → export → fill-mask → fine-tuning on the
                   built-in tasks; `--adapt`, continued pretraining of the demo's export on man pages
    supervisor.py  one stage as a child process: signals passed on once, the child dies with the demo, what an
                   unfinished stage kept
    prep_cache.py  a finished prep reused when its corpus bytes, flags and code are unchanged

The demo sits above the three halves it runs (pipelines/, trainer/, downstream/) and imports from them only what
needs neither Beam nor torch: its own process stays light, and a stage never shares an interpreter with another.
"""
