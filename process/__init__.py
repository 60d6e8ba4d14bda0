"""How a clozeforge process runs, whatever its job: the plumbing pretraining and fine-tuning share, below both
(and below prep, which takes its locks and exits from here). Standard library only on import; torch where a module
says so (stopping.py, and precision.py's probes).

    cpu_sharing.py  threading defaults (OpenMP wait policy) set when this package is imported, before torch
                    loads; the threads a rank takes; malloc keeping freed blocks
    precision.py    --precision resolved for the device, and its DeepSpeed sections
    launch.py       `--nproc-per-node N`: start N ranks on this machine (`python -P -m MODULE`) and supervise them
    stopping.py     SIGTERM / SIGINT -> every rank stops at one agreed step; a dead launcher ends its ranks
    lock.py         one writer per directory: an exclusive lock file with a heartbeat, stale ones taken over
    outputs.py      an output directory written whole (staged, swapped in) and refused when it is not ours
    exits.py        how every command ends: its status whatever signal arrives, an error in one line
    ports.py        a free loopback port for the ranks' rendezvous
    logs.py         third-party start-up noise kept out of the terminal
"""

from process import cpu_sharing

# Before any module of a job imports torch (and so loads its OpenMP runtime): see process/cpu_sharing.py.
cpu_sharing.apply()
