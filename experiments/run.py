"""Run one study: `python experiments/run.py NAME [--corpus GLOB] [--quick]`.

Each study runnable this way is experiments/NAME.py with `main(corpus: str | None, quick: bool) -> dict`; its figures
are printed as one JSON object on the last line. A study measures what a choice buys (accuracy, a gain over scratch,
retrieval), not speed: bench/run.py times us against peers. The studies with a command line of their own (adapt.py,
recipe_trial.py, race.py, tlm.py) say how to run them at the top of their file.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[0] = os.path.dirname(HERE)  # the repository root, not experiments/: `experiments.*` and the product import

from process import cpu_sharing  # noqa: E402 (needs the path above)

cpu_sharing.apply()  # the OpenMP defaults clozeforge's own processes run with, set before a study imports torch


def available() -> list[str]:
    """The studies with a `main(corpus, quick)`, read from their source (nothing is imported to list them)."""
    found = []
    for name in sorted(os.listdir(HERE)):
        if name.endswith(".py") and name != "run.py" and not name.startswith("_"):
            with open(os.path.join(HERE, name), encoding="utf-8") as f:
                if "\ndef main(corpus: str | None" in f.read():
                    found.append(name[:-3])
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help=f"one of: {', '.join(available())}")
    ap.add_argument("--corpus", default=None, help="input files (URL glob), where the study reads a corpus")
    ap.add_argument("--quick", action="store_true", help="a small run, a check that the study runs: its figures mean nothing")
    args = ap.parse_args(argv)
    if args.name not in available():
        print(f"experiments: unknown study {args.name!r}; available: {', '.join(available())}", file=sys.stderr)
        return 2
    started = time.time()
    figures = importlib.import_module(f"experiments.{args.name}").main(args.corpus, args.quick)
    print(json.dumps({"study": args.name, "quick": args.quick, **figures, "wall_s": round(time.time() - started, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
