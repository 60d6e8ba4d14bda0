"""StopFlag: how SIGTERM and SIGINT end a run (a checkpoint at the end of the step, or at once if repeated).

In:  the process's signals. Out: `requested`, which the loop checks between steps.
"""

from __future__ import annotations

import signal

from trainer.runtime import Runtime


class StopFlag:
    """The first SIGTERM/SIGINT asks the loop to checkpoint and exit at the next step boundary; a second one
    (an impatient Ctrl-C) stops at once, leaving `latest` on the previous complete checkpoint."""

    def __init__(self, rt: Runtime):
        self.requested, self.rt = False, rt
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.rt.log(f"{signal.Signals(signum).name}: checkpointing at the end of this step (send it again to stop now)")


