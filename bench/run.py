"""Run one benchmark: `python bench/run.py NAME [--corpus GLOB] [--quick] [--scale]`.

Each benchmark is bench/NAME.py with `main(corpus: str | None, quick: bool) -> dict` (and a `scale` keyword
where it has a large case: `prep --scale`; `contended` for `train --contended` and `finetune_vs_trainer --contended`,
`loop` for `train --loop`, `shapes` for `finetune_vs_trainer --shapes`). Its figures are
printed as one JSON object on the last line, with a `ratio` wherever a peer library runs beside ours on the
same input in the same run. Benchmarks measure; tests (tests/) check correctness, never wall-clock time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Replace the script's own folder with the repository root: bench/tokenize.py would otherwise shadow the
# standard library's `tokenize` (which inspect, and so torch, import), and `bench.*`, `pipelines.*` must import.
sys.path[0] = os.path.dirname(HERE)

from process import cpu_sharing  # noqa: E402 (needs the path above)

cpu_sharing.apply()  # the OpenMP defaults clozeforge's own processes run with, set before a bench imports torch


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([HERE]) if m.name not in ("run", "__init__") and not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help=f"one of: {', '.join(available())}")
    ap.add_argument("--corpus", default=None, help="input files (URL glob); default: the built-in docstring corpus")
    ap.add_argument("--quick", action="store_true", help="a small run (seconds), for smoke tests")
    ap.add_argument("--scale", action="store_true", help="the benchmark's large case (prep: >= 1 GB, 2 workers; long)")
    ap.add_argument("--contended", action="store_true",
                    help="train: throughput beside a busy loop and beside another training run, as a fraction of alone")
    ap.add_argument("--shapes", default=None,
                    help="finetune_vs_trainer: model shapes LAYERSxHIDDEN, comma-separated (e.g. 2x128,4x256,6x384): each side in "
                         "its own process with its own defaults, paired in time (bench/_finetune_shapes.py)")
    ap.add_argument("--loop", action="store_true",
                    help="train: the trainer's own loop against a bare forward/backward/step loop (loop_ratio)")
    args = ap.parse_args(argv)
    if args.name not in available():
        print(f"bench: unknown benchmark {args.name!r}; available: {', '.join(available())}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{args.name}")
    started = time.time()
    options = {name: True for name in ("scale", "contended", "loop") if getattr(args, name)}
    if args.shapes:
        options["shapes"] = args.shapes
    import inspect  # here, not above: it imports `tokenize`, which bench/tokenize.py shadows until sys.path is fixed

    unknown = set(options) - set(inspect.signature(module.main).parameters)
    if unknown:
        print(f"bench: {args.name} has no --{' --'.join(sorted(unknown))} case", file=sys.stderr)
        return 2
    figures = module.main(args.corpus, args.quick, **options)
    figures = {"bench": args.name, "quick": args.quick, **figures, "wall_s": round(time.time() - started, 1)}
    print(json.dumps(figures, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
