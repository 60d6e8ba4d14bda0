"""The processes of a job: starting them, their place in it, agreeing to stop, and one trainer per run directory.

    launch.py     `clozeforge train --nproc-per-node N`: start N ranks on this machine and look after them
    runtime.py    this process's rank, world size, device and precision; the process group
    stopping.py   SIGTERM / SIGINT → every rank checkpoints at one agreed step; a dead launcher ends the ranks
    lock.py       RUN/run.lock: one trainer per run directory
"""
