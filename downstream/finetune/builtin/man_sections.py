"""Which manual section a paragraph of a man page comes from (topic classification over six sections).

In:  the English man pages under /usr/share/man/man{1,2,3,5,7,8} (roff, gzipped), a seeded sample of pages per
     section; nothing is run (the roff is read as text: requests dropped, font and character escapes removed).
Out: rows {"text": a paragraph, "label": "1 commands" ...}; a page is one group (its paragraphs stay in one split).

Sections: 1 user commands, 2 system calls, 3 library functions, 5 file formats, 7 overviews, 8 administration.
The NAME and SYNOPSIS paragraphs are left out (they name the page), and so are paragraphs that keep an escape the
cleaning does not know; a paragraph is kept once (the first page that has it). None of this text is in the demo's pretraining corpus (Python docstrings).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import re

from downstream.finetune.builtin.common import BuiltinTask, Grouped

SECTIONS = {"1": "commands", "2": "system calls", "3": "library functions", "5": "file formats", "7": "overviews",
            "8": "administration"}
_ESCAPES = [(re.compile(p), r) for p, r in (
    (r"\\f(\(..|\[[^\]]*\]|.)", ""),  # font changes
    (r"\\\((em|en)", " - "), (r"\\\(..", ""), (r"\\\[[^\]]*\]", ""),  # named characters
    (r"\\[-e]", "-"), (r"\\[&|^%:]", ""), (r"\\s[-+]?\d", ""), (r"\\\*(\(..|\[[^\]]*\]|.)", ""), (r"\\ ", " "),
)]
_BREAKS = {"PP", "P", "LP", "TP", "IP", "HP", "sp", "br", "RS", "RE", "nf", "fi", "EX", "EE", "TH", "in", "SH", "SS"}
_INLINE = {"B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB"}
_SKIP_SECTIONS = {"NAME", "SYNOPSIS"}


def _clean(line: str) -> str:
    for pattern, replacement in _ESCAPES:
        line = pattern.sub(replacement, line)
    return line


def paragraphs(roff: str, min_words: int) -> list[str]:
    """The prose paragraphs of one man page outside NAME and SYNOPSIS."""
    out, current, section = [], [], ""

    def close() -> None:
        text = " ".join(" ".join(current).split())
        if section not in _SKIP_SECTIONS and len(text.split()) >= min_words and "\\" not in text:
            out.append(text)
        current.clear()

    for line in roff.splitlines():
        if line.startswith((".", "'")):
            request, _, rest = line[1:].strip().partition(" ")
            if request in _BREAKS:
                close()
                if request in ("SH", "SS"):
                    section = _clean(rest).strip().strip('"').upper()
            elif request in _INLINE and rest:
                current.append(_clean(rest).replace('"', ""))
        elif line.strip():
            current.append(_clean(line))
        else:
            close()
    close()
    return out


def read_page(path: str) -> str | None:
    """The roff of one gzipped man page, or None for a link, an alias (`.so`), or a file that does not read."""
    if os.path.islink(path) or not path.endswith(".gz"):
        return None
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            roff = f.read()
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    return None if roff.lstrip().startswith(".so") else roff


ROOT = "/usr/share/man"
PAGES_PER_SECTION = 240
"""Pages read per section: a seeded sample by name, enough to fill the splits two paragraphs a page."""


def grouped(task: BuiltinTask, rng: random.Random) -> Grouped:
    out: Grouped = {}
    seen: set[str] = set()  # boilerplate shared by pages (and by a page's aliases) is kept once
    for number, title in SECTIONS.items():
        directory = os.path.join(task.root, f"man{number}")
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        # a sample that does not move when a package adds a page elsewhere in the alphabet
        names.sort(key=lambda n: hashlib.sha256(n.encode()).hexdigest())
        label, read = f"{number} {title}", 0
        for name in names:
            if read >= PAGES_PER_SECTION:
                break
            roff = read_page(os.path.join(directory, name))
            if roff is None:
                continue
            found = [text for text in paragraphs(roff, task.min_words) if text not in seen]
            seen.update(found)
            read += bool(found)
            out.setdefault(label, []).extend((name, {"text": text, "label": label}) for text in found)
    return out


def write_pages(path: str, max_bytes: int, root: str = ROOT) -> int:
    """A pretraining corpus of man pages (`clozeforge demo --adapt`): one JSON line {"text": ...} per page of the
    six sections (their prose paragraphs), pages in a fixed hashed order that mixes the sections, up to
    `max_bytes`. The pages the man-sections task scores on are not left out here: prep's --decontaminate drops
    them (and counts them)."""
    import json

    pages = []
    for number in SECTIONS:
        directory = os.path.join(root, f"man{number}")
        try:
            pages += [os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".gz")]
        except OSError:
            continue
    pages.sort(key=lambda p: hashlib.sha256(p.encode()).hexdigest())
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for page in pages:
            if written >= max_bytes:
                break
            roff = read_page(page)
            text = "\n".join(paragraphs(roff, min_words=6)) if roff is not None else ""
            if text:
                line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
                out.write(line)
                written += len(line.encode())
    return written
