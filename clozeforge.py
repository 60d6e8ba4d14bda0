"""The `clozeforge` command: one entry point, one subcommand per stage, each importing only its own half.

    clozeforge prep      raw text → clean/, vocab/, pairs/, report.json   (Beam; never imports torch)
    clozeforge tokenize  text → word-piece ids with a prep vocabulary     (no Beam, no torch)
    clozeforge inspect   a pairs/ directory: manifest, statistics, checksums
    clozeforge train     pairs → DeepSpeed checkpoints                     (torch; never imports apache_beam)
    clozeforge export    a run's checkpoint → a HuggingFace directory
    clozeforge fill-mask / embed   use an exported model
    clozeforge demo      all of the above on a built-in corpus, no flags, no download

Imports are deferred to the chosen subcommand so that `prep` runs on a Dataflow worker with no torch and
`train` on a GPU node with no Beam. User errors print one line and exit with status 2.
"""

from __future__ import annotations

import os
import sys

USAGE = __doc__.split("\n\n")[1]

COMMANDS = {
    "prep": ("pipelines.prep", "main"),
    "tokenize": ("pipelines.encode_text", "main"),
    "inspect": ("pipelines.inspect_pairs", "main"),
    "train": ("trainer.launch", "main"),
    "export": ("trainer.commands", "export_main"),
    "fill-mask": ("trainer.commands", "fill_mask_main"),
    "embed": ("trainer.commands", "embed_main"),
    "demo": ("trainer.demo", "main"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print("usage: clozeforge COMMAND [flags]   (clozeforge COMMAND --help for its flags)\n")
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


if __name__ == "__main__":
    sys.exit(main())
