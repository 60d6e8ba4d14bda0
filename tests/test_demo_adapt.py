"""`clozeforge demo --adapt`: its refusal without a finished demo, and the man-page corpus it continues on."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

from downstream.finetune.builtin.man_sections import write_pages

ROFF = """.TH LS 1
.SH NAME
ls \\- list directory contents
.SH DESCRIPTION
List information about the FILEs (the current directory by default) in a long and careful way.
.PP
Sort entries alphabetically if none of the sorting options is given at all.
"""


def _page(root, section: str, name: str, text: str = ROFF) -> None:
    os.makedirs(root / f"man{section}", exist_ok=True)
    with gzip.open(root / f"man{section}" / f"{name}.{section}.gz", "wt", encoding="utf-8") as f:
        f.write(text)


def test_the_man_page_corpus_is_prose_pages_without_aliases_in_a_fixed_order(tmp_path):
    root = tmp_path / "man"
    for section, name in (("1", "ls"), ("1", "cp"), ("5", "passwd"), ("8", "mount")):
        _page(root, section, name)
    _page(root, "1", "dir", ".so man1/ls.1\n")  # an alias: no page of its own
    out = tmp_path / "man.jsonl"
    size = write_pages(str(out), 10_000, root=str(root))
    docs = [json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert size == out.stat().st_size and len(docs) == 4
    assert all(d.startswith("List information about the FILEs") and "ls - list" not in d and "\\" not in d for d in docs)
    again = tmp_path / "again.jsonl"
    write_pages(str(again), 10_000, root=str(root))
    assert again.read_bytes() == out.read_bytes()
    assert write_pages(str(tmp_path / "cut.jsonl"), 1, root=str(root)) < size  # stops once past max_bytes


def test_adapt_without_a_finished_demo_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "clozeforge", "demo", "--adapt", "--workdir", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--adapt continues a finished demo's export" in lines[0] and "Traceback" not in done.stderr
