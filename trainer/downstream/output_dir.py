"""A directory output written whole: filled as a hidden sibling, then swapped in, so nothing of an earlier
output (or of another model) survives beside the new files, and a failure leaves the old directory as it was.

In:  the destination, a function that fills a staging directory, and whether a foreign directory may go.
Out: the destination replaced (modes from the user's umask), or OutputDirError naming why not, before any
     work is lost: a directory that is not an earlier export (other files, no clozeforge model card) is only
     replaced with --overwrite. Used by `clozeforge export`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable


class OutputDirError(ValueError):
    """The destination cannot be replaced without the user's say (the message names it and the flag)."""


EXPORT_FILES = frozenset({"config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json", "README.md"})
"""Every file an export holds: a directory of these and our model card is an earlier export, replaced freely."""
CARD_TAGS = "tags: [bert, fill-mask, clozeforge]"


def foreign_contents(directory: str) -> str | None:
    """Why `directory` is not ours to replace without --overwrite (files of another model, no clozeforge model
    card), or None: empty, or an earlier export."""
    names = sorted(os.listdir(directory))
    if not names:
        return None
    others = [n for n in names if n not in EXPORT_FILES]
    if others:
        return f"holds files that are not a clozeforge export ({', '.join(others[:3])}{' ...' if len(others) > 3 else ''})"
    try:
        with open(os.path.join(directory, "README.md"), encoding="utf-8") as f:
            ours = CARD_TAGS in f.read(4096)
    except (OSError, UnicodeDecodeError):
        ours = False
    return None if ours else "holds a model that clozeforge export did not write (no clozeforge model card)"


def _user_mode(directory: str) -> None:
    """mkdtemp makes a 0700 directory and some writers 0600 files; an export gets the modes of the user's umask."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for name in os.listdir(directory):
        os.chmod(os.path.join(directory, name), 0o666 & ~umask)


def check_destination(output_dir: str, *, overwrite: bool = False) -> None:
    """OutputDirError when `output_dir` is a file, or a directory that is not ours and `overwrite` is not given;
    call it before the work too, so a refusal costs nothing."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputDirError(f"--output {output_dir}: exists and is not a directory")
    foreign = foreign_contents(output_dir) if os.path.isdir(output_dir) else None
    if foreign and not overwrite:
        raise OutputDirError(f"--output {output_dir}: {foreign}; pass --overwrite to replace the whole directory")


def replace_directory(output_dir: str, write: Callable[[str], None], *, overwrite: bool = False) -> None:
    """Have `write(staging)` fill a new sibling directory, then swap it in for `output_dir`: a reader sees the
    old directory or the new one, never a mix, and a failure leaves the old one as it was. A directory that is
    not an earlier export is refused (OutputDirError) unless `overwrite`."""
    output_dir = os.path.abspath(output_dir)
    check_destination(output_dir, overwrite=overwrite)
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(output_dir)}.tmp-", dir=parent)
    try:
        write(staging)
        _user_mode(staging)
        if not os.path.isdir(output_dir):
            os.rename(staging, output_dir)
            return
        old = staging + "-replaced"
        os.rename(output_dir, old)
        try:
            os.rename(staging, output_dir)
        except OSError:
            os.rename(old, output_dir)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
