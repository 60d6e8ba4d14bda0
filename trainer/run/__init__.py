"""The trainer's side of its processes (launching, stopping and precision are process/'s, shared with fine-tuning).

    runtime.py    this process's rank, world size, device and precision; the process group
    lock.py       RUN/run.lock: one trainer per run directory
"""
