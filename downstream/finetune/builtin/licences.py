"""Which licence family a paragraph of licence text belongs to (classification of legal prose: GPL, LGPL, BSD).

In:  the Debian copyright files, /usr/share/doc/*/copyright, in their machine-readable form: each
     "License: NAME" stanza's text, cut into paragraphs at its " ." lines.
Out: rows {"text": a paragraph, "label": family}; one copyright file is one group. A paragraph is kept once (the
     same boilerplate sits in many packages' files) and only under a licence name of a single family ("GPL-2+
     or Artistic" is neither).

The families share much of their wording (the LGPL is written from the GPL, the BSD clauses are a few sentences
reworded in every copy), which is what makes this more than a keyword match. The demo's pretraining corpus
(demo/corpus.py) reads no copyright file.
"""

from __future__ import annotations

import glob
import os
import random
import re

from downstream.finetune.builtin.common import BuiltinTask, Grouped

FAMILIES = (("LGPL", "LGPL"), ("GPL", "GPL"), ("BSD", "BSD"))
"""(a substring of the licence name, its family), the first match wins (LGPL names hold "GPL")."""
_STANZA = re.compile(r"License:[ \t]*(\S[^\n]*)\n(.*)", re.S)


def grouped(task: BuiltinTask, rng: random.Random) -> Grouped:
    out: Grouped = {}
    seen: set[str] = set()
    for path in sorted(glob.glob(os.path.join(task.root, "*", "copyright"))):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        package = os.path.basename(os.path.dirname(path))
        for stanza in re.split(r"\n[ \t]*\n", text):
            found = _STANZA.match(stanza)
            if not found or re.search(r"\b(or|and)\b|,", found.group(1)):
                continue
            family = next((f for key, f in FAMILIES if key in found.group(1)), None)
            if family is None:
                continue
            for paragraph in re.split(r"\n[ \t]+\.[ \t]*\n", found.group(2)):
                paragraph = " ".join(paragraph.split())
                if len(paragraph.split()) < task.min_words or paragraph in seen:
                    continue
                seen.add(paragraph)
                out.setdefault(family, []).append((package, {"text": paragraph, "label": family}))
    return out
