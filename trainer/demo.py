"""`clozeforge demo`: the whole flow on a built-in corpus, with no download and no flags.

In:  nothing (optional: --workdir, --corpus GLOB to use your own text, --steps, --nproc).
Out: WORKDIR/corpus (docstrings of the installed Python modules, read with `ast`), WORKDIR/prep (clean/,
     vocab/, pairs/, report.json), WORKDIR/run (checkpoints, metrics.jsonl, curves.png), WORKDIR/hf (a
     HuggingFace directory), and a fill-mask example on stdout.

Each stage runs as its own process, exactly the command a user would type, so prep never shares an
interpreter with torch and train never with Beam. The defaults (3 MB of text, an 8k vocabulary, the
`tiny` model, 2 ranks over gloo) finish in about 5 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time

EXAMPLES = [
    "Return a new [MASK] with the same elements.",
    "Raise a [MASK] if the file does not exist.",
]


def _run(title: str, command: list[str]) -> None:
    print(f"\n== {title}\n$ {' '.join(command)}", flush=True)
    started = time.time()
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(command, env=env)
    if result.returncode != 0:
        raise SystemExit(f"clozeforge demo: {title} failed with exit status {result.returncode}")
    print(f"-- {title}: {time.time() - started:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clozeforge demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="clozeforge-demo", help="where everything goes (default: %(default)s)")
    ap.add_argument("--corpus", default=None, help="your own files (URL glob) instead of the built-in corpus")
    ap.add_argument("--corpus-mb", type=float, default=3.0, help="size of the built-in corpus (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=600, help="training steps (default: %(default)s)")
    ap.add_argument("--nproc", type=int, default=min(2, os.cpu_count() or 1), help="training ranks (default: %(default)s)")
    args = ap.parse_args(argv)
    work = os.path.abspath(args.workdir)
    py = sys.executable
    started = time.time()
    corpus = args.corpus
    if corpus is None:
        from pipelines.builtin_corpus import write_builtin_corpus

        print(f"== corpus: docstrings of this environment's Python modules ({args.corpus_mb:g} MB)", flush=True)
        files = write_builtin_corpus(os.path.join(work, "corpus"), int(args.corpus_mb * 1e6))
        corpus = os.path.join(work, "corpus", "*.jsonl")
        print(f"   {len(files)} files under {os.path.dirname(files[0])}")
    prep, run, hf = (os.path.join(work, name) for name in ("prep", "run", "hf"))
    _run("prep", [py, "-m", "pipelines.prep", "--input", f"docstrings={corpus}", "--output", prep,
                  "--vocab-size", "8192", "--validation-fraction", "0.05", "--rows-per-shard", "20000"])
    _run("train", [py, "-m", "trainer.launch", f"--nproc-per-node={args.nproc}", "--data", os.path.join(prep, "pairs"),
                   "--output", run, "--model", "tiny", "--max-steps", str(args.steps), "--batch-size", "32",
                   "--lr", "1e-3", "--warmup-steps", str(max(1, args.steps // 10)), "--log-every", "50",
                   "--eval-every", str(max(1, args.steps // 3)), "--save-every", str(args.steps)])
    # --verify reloads the export with transformers, which the `demo` extra installs and `train` does not
    verify = ["--verify"] if importlib.util.find_spec("transformers") else []
    if not verify:
        print("\n(transformers is not installed: the export is not reloaded to compare logits; pip install transformers)")
    _run("export", [py, "-m", "clozeforge", "export", run, "--output", hf, *verify])
    _run("fill-mask", [py, "-m", "clozeforge", "fill-mask", hf, *EXAMPLES])
    print(f"\n== done in {time.time() - started:.0f} s")
    for label, path in (("corpus", corpus), ("report", os.path.join(prep, "report.json")), ("vocabulary", os.path.join(prep, "vocab")),
                        ("pair shards", os.path.join(prep, "pairs")), ("checkpoints", os.path.join(run, "checkpoints")),
                        ("metrics", os.path.join(run, "metrics.jsonl")), ("loss curves", os.path.join(run, "curves.png")),
                        ("HF model", hf)):
        print(f"   {label:<12} {path}")
    print(f"\nLoad it with transformers:  AutoModelForMaskedLM.from_pretrained({hf!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
