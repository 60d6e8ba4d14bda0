"""`clozeforge train`: run trainer.pretrain here, or start N ranks of it with torch's elastic launcher.

In:  trainer.pretrain's flags, plus --nproc-per-node N (default 1).
Out: with N = 1, or when already inside a launcher (RANK is set), the training runs in this process; with
     N > 1 this process becomes `python -m torch.distributed.run --nproc-per-node N -m trainer.pretrain ...`,
     the same as a user typing torchrun (the `deepspeed` launcher works too: see the README).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    nproc = 1
    for i, arg in enumerate(argv):
        if arg.startswith("--nproc-per-node"):
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            if not value.isdigit() or int(value) < 1:
                print(f"clozeforge train: error: --nproc-per-node must be a positive integer, got {value!r}", file=sys.stderr)
                return 2
            nproc = int(value)
            del argv[i : i + (1 if "=" in arg else 2)]
            break
    if nproc == 1 or "RANK" in os.environ:
        from trainer.pretrain import main as pretrain_main

        return pretrain_main(argv)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", "trainer.pretrain", *argv]
    sys.stdout.flush()
    os.execv(sys.executable, command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
