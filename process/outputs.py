"""A directory output written whole: filled as a hidden sibling, then swapped in, so nothing of an earlier
output (or of another model) survives beside the new files, and a failure leaves the old directory as it was.

In:  the destination, whether a foreign directory may go, and how to tell one (`foreign`: each command's own test;
     `written_by(owner, records)` for a command whose records name it, downstream/export_dir.py for an export).
Out: `staged_directory` yields a staging directory and swaps it in when the block ends without an error;
     `replace_directory` does the same around a function that fills it. Modes follow the user's umask; one
     writer at a time (process/lock.py, a lock file beside the destination); OutputDirError naming why not,
     before any work is lost: a directory that is not ours is only replaced with --overwrite. Used by
     `clozeforge export`, `finetune`, `senses` and `similarity`.

A run killed with -9 leaves its hidden staging directory (`.NAME.tmp-*`) beside the destination, and, killed
between the two renames of the swap, the old directory set aside (`.NAME.tmp-*-replaced`) with none in its
place. The next run, once it holds the lock (so no live run owns them), puts such an old directory back and
removes the rest, saying so in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

from process import lock


class OutputDirError(ValueError):
    """The destination cannot be replaced without the user's say (the message names it and the flag)."""


def written_by(owner: str, *records: str) -> Callable[[str], str | None]:
    """A `foreign` test for a command's own outputs: a directory is ours when one of its `records` (JSON files the
    command writes, e.g. results.json) says `"written_by": owner`; otherwise the reason it is not."""
    def foreign(path: str) -> str | None:
        for name in records:
            try:
                with open(os.path.join(path, name), encoding="utf-8") as f:
                    if json.load(f).get("written_by") == owner:
                        return None
            except (OSError, ValueError, AttributeError):  # missing, not JSON, not an object
                continue
        return f"not empty and not written by {owner}"

    return foreign


def _user_mode(directory: str) -> None:
    """mkdtemp makes a 0700 directory and some writers 0600 files; an export gets the modes of the user's umask."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for name in os.listdir(directory):
        os.chmod(os.path.join(directory, name), 0o666 & ~umask)


def remove_leftovers(output_dir: str) -> list[str]:
    """The staging directories dead runs left beside `output_dir` removed (call with its lock held); an old
    directory set aside by a swap that died half-way is put back first. Returns what was removed or restored."""
    parent, name = os.path.split(output_dir)
    prefix = f".{name}.tmp-"
    found = sorted(n for n in os.listdir(parent) if n.startswith(prefix))
    done = []
    for entry in found:
        if entry.endswith("-replaced") and not os.path.exists(output_dir):
            os.rename(os.path.join(parent, entry), output_dir)
            done.append(f"{entry} (put back as {name})")
    for entry in found:
        path = os.path.join(parent, entry)
        if os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
            done.append(entry)
    return done


def check_destination(output_dir: str, *, foreign: Callable[[str], str | None], overwrite: bool = False) -> None:
    """OutputDirError when `output_dir` is a file, or a directory that is not ours (`foreign` says why) and
    `overwrite` is not given; call it before the work too, so a refusal costs nothing."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputDirError(f"--output {output_dir}: exists and is not a directory")
    why = foreign(output_dir) if os.path.isdir(output_dir) and os.listdir(output_dir) else None
    if why and not overwrite:
        raise OutputDirError(f"--output {output_dir}: {why}; pass --overwrite to replace the whole directory")


@contextlib.contextmanager
def staged_directory(output_dir: str, *, foreign: Callable[[str], str | None], overwrite: bool = False) -> Iterator[str]:
    """A new sibling directory to fill in the block, then swapped in for `output_dir`: a reader sees the old
    directory or the new one, never a mix, and an error (Ctrl-C included) leaves the old one as it was."""
    output_dir = os.path.abspath(output_dir)
    check_destination(output_dir, overwrite=overwrite, foreign=foreign)
    parent, name = os.path.split(output_dir)
    os.makedirs(parent, exist_ok=True)
    with contextlib.ExitStack() as cleanup:
        try:
            cleanup.enter_context(lock.held(parent, f".{name}.lock", log=lambda line: print(line, flush=True)))
        except lock.Locked as e:
            raise OutputDirError(f"--output {output_dir}: being written by {lock.describe(e.owner)}") from None
        leftovers = remove_leftovers(output_dir)
        if leftovers:
            print(f"--output {output_dir}: removed the leftovers of an interrupted run: {', '.join(leftovers[:3])}"
                  f"{' ...' if len(leftovers) > 3 else ''}", flush=True)
        staging = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
        cleanup.callback(shutil.rmtree, staging, ignore_errors=True)
        check_destination(output_dir, overwrite=overwrite, foreign=foreign)  # again, now that it is ours alone
        yield staging
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


def replace_directory(output_dir: str, write: Callable[[str], None], *, foreign: Callable[[str], str | None],
                      overwrite: bool = False) -> None:
    """`write(staging)` fills a new directory that replaces `output_dir` whole (see staged_directory)."""
    with staged_directory(output_dir, foreign=foreign, overwrite=overwrite) as staging:
        write(staging)


def write_json(record: dict, path: str) -> None:
    """`record` as the JSON file `path` (a local path), written beside it and renamed into place: a failure leaves an
    earlier file whole, and a reader never sees half of one."""
    partial = f"{path}.tmp-{os.getpid()}"
    try:
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, ensure_ascii=False)
            f.write("\n")
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
