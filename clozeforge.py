"""The `clozeforge` command: one entry point, one subcommand per stage, each importing only its own half.

    clozeforge prep      raw text → clean/, vocab/, pairs/, report.json   (Beam; never imports torch)
    clozeforge tokenize  text → word-piece ids with a prep vocabulary     (no Beam, no torch)
    clozeforge inspect   a pairs/ directory: manifest, statistics, checksums
    clozeforge train     pairs → DeepSpeed checkpoints                     (torch; never imports apache_beam)
    clozeforge export    a run's checkpoint → a HuggingFace directory
    clozeforge fill-mask / embed   use an exported model (embed --pooling words: a vector per whole word)
    clozeforge score     held-out masked-LM accuracy and pseudo-perplexity of a model on a file of lines
    clozeforge senses    word sense disambiguation by the nearest sense embedding: fit, predict, evaluate
    clozeforge similarity  word similarity against human scores, and the anisotropy of the vectors, per layer
    clozeforge retrieve  translation retrieval (Tatoeba-style): held-out pairs found across languages, per pair
    clozeforge finetune  fine-tune an export (or a run's checkpoints) on labelled data, beside a scratch baseline
    clozeforge demo      all of the above on a built-in corpus, no flags, no download

Each command lives in the package of its stage (pipelines/, trainer/, downstream/; the demo, which runs all the
others as a user would, in demo/); this module is the table that names them.

Imports are deferred to the chosen subcommand so that `prep` runs on a Dataflow worker with no torch and
`train` on a GPU node with no Beam. User errors print one line and exit with status 2.
"""

from __future__ import annotations

import os
import sys

USAGE = __doc__.split("\n\n")[1]

COMMANDS = {
    "prep": ("pipelines.prep", "main"),
    "tokenize": ("pipelines.commands.tokenize", "main"),
    "inspect": ("pipelines.commands.inspect", "main"),
    "train": ("trainer.pretrain", "main"),
    "export": ("downstream.export", "export_main"),
    "fill-mask": ("downstream.fill_mask", "fill_mask_main"),
    "embed": ("downstream.embed", "embed_main"),
    "score": ("downstream.score", "score_main"),
    "finetune": ("downstream.finetune.command", "finetune_main"),
    "senses": ("downstream.contextual.senses_command", "senses_main"),
    "similarity": ("downstream.contextual.similarity", "similarity_main"),
    "retrieve": ("downstream.contextual.retrieve_command", "retrieve_main"),
    "demo": ("demo.command", "demo"),
}


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("clozeforge")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the OpenMP defaults of every torch process this command is or starts (the demo's stages), before torch loads
    from process import cpu_sharing

    cpu_sharing.apply()
    if argv and argv[0] in ("-V", "--version"):
        print(f"clozeforge {version()}")
        return 0
    if not argv or argv[0] in ("-h", "--help", "help"):
        print("usage: clozeforge COMMAND [flags]   (clozeforge COMMAND --help for its flags; clozeforge --version)\n")
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"clozeforge: unknown command {command!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module_name, function = COMMANDS[command]
    try:
        module = __import__(module_name, fromlist=[function])
    except ImportError as e:
        extra = "prep" if module_name.startswith("pipelines") else "train"
        print(f"clozeforge {command}: missing dependency ({e.name}); install it with: pip install 'clozeforge[{extra}]'", file=sys.stderr)
        return 2
    try:
        return getattr(module, function)(rest) or 0
    except BrokenPipeError:  # `clozeforge inspect ... | head`: the reader left; stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def cli() -> None:
    """The console script (and `python -m clozeforge`): main(), then exit with its status, which a signal that
    arrives while the process exits does not change (see process/exits.py)."""
    from process.exits import exit_with  # the standard library only: prep on a worker without torch uses it too

    exit_with(main())


if __name__ == "__main__":
    cli()
