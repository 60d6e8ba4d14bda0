"""An export's directory: the files it holds, how clozeforge knows one it wrote, and its staged writes.

In:  a destination directory. Out: `foreign_contents` (why a directory is not an export of ours, or None), and
     `check_destination` / `staged_directory` / `replace_directory`: process/outputs.py's, with that test, so an
     earlier export is replaced freely and anything else needs --overwrite.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import AbstractContextManager

from process import outputs
from schemas.vocab import TOKENIZER_CONFIG_FILE, TOKENIZER_FILE, VOCAB_FILE

EXPORT_FILES = frozenset({"config.json", "model.safetensors", VOCAB_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE,
                          "special_tokens_map.json", "README.md"})
"""Every file a BERT export holds."""
ANY_EXPORT_FILES = EXPORT_FILES | {"vocab.json", "merges.txt"}
"""Every file an export of any family holds (RoBERTa's byte-level BPE adds vocab.json and merges.txt; a RoBERTa or
XLM-R export has no vocab.txt): a directory of these and our model card is an earlier export, replaced freely."""
CARD_TAGS = "tags: [{family}, fill-mask, clozeforge]"
"""The model card's tags line (the family filled in); `foreign_contents` recognises our cards by it."""
_OUR_CARD = re.compile(r"^tags: \[[a-z-]+, fill-mask, clozeforge\]$", re.M)


def foreign_contents(directory: str) -> str | None:
    """Why `directory` is not ours to replace without --overwrite (files of another model, no clozeforge model
    card), or None: empty, or an earlier export."""
    names = sorted(os.listdir(directory))
    if not names:
        return None
    others = [n for n in names if n not in ANY_EXPORT_FILES]
    if others:
        return f"holds files that are not a clozeforge export ({', '.join(others[:3])}{' ...' if len(others) > 3 else ''})"
    try:
        with open(os.path.join(directory, "README.md"), encoding="utf-8") as f:
            ours = _OUR_CARD.search(f.read(4096)) is not None
    except (OSError, UnicodeDecodeError):
        ours = False
    return None if ours else "holds a model that clozeforge export did not write (no clozeforge model card)"


def check_destination(output_dir: str, *, overwrite: bool = False) -> None:
    outputs.check_destination(output_dir, foreign=foreign_contents, overwrite=overwrite)


def staged_directory(output_dir: str, *, overwrite: bool = False) -> AbstractContextManager[str]:
    return outputs.staged_directory(output_dir, foreign=foreign_contents, overwrite=overwrite)


def replace_directory(output_dir: str, write: Callable[[str], None], *, overwrite: bool = False) -> None:
    outputs.replace_directory(output_dir, write, foreign=foreign_contents, overwrite=overwrite)
