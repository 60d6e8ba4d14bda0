"""What third-party libraries print at start-up that a user did not ask for.

In:  --verbose. Out: `quiet_startup` filters DeepSpeed's accelerator detection out of its logger (the trainer and
     `clozeforge export` call it before DeepSpeed loads).
"""

from __future__ import annotations

import logging
import os


def quiet_startup(verbose: bool = False) -> None:
    """Keep DeepSpeed's accelerator detection ("Setting accelerator to CPU ...", a warning on every import on a
    machine without a GPU, before any line of ours) out of the terminal unless --verbose. A filter on its
    logger: set before the import, which configures the same logger object and keeps the filter."""
    if not verbose:
        logging.getLogger("DeepSpeed").addFilter(_not_accelerator_detection)


def _not_accelerator_detection(record: logging.LogRecord) -> bool:
    return os.path.basename(record.pathname) != "real_accelerator.py"
