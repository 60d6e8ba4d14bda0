"""Which manual section a paragraph of a man page comes from (topic classification over six sections).

In:  the English man pages under /usr/share/man/man{1,2,3,5,7,8} (roff, gzipped), a seeded sample of pages per
     section; nothing is run (the roff is read as text: requests dropped, font and character escapes removed,
     groff's accented-letter names such as \\(:a or \\('e made letters). Read in another language (`in_language`),
     the translated pages under /usr/share/man/LANG/manN, UTF-8 read strictly.
Out: rows {"text": a paragraph, "label": "1 commands" ...}; a page is one group (its paragraphs stay in one split).

Sections: 1 user commands, 2 system calls, 3 library functions, 5 file formats, 7 overviews, 8 administration.
The NAME and SYNOPSIS paragraphs are left out (they name the page), and so are paragraphs that keep an escape the
cleaning does not know; a paragraph is kept once (the first page that has it). The demo pretrains on man pages
(demo/corpus.py) less every page that shares a 13-word n-gram with this task's validation or test split.

NOTE: a translation names its sections in its language (BEZEICHNUNG, ÜBERSICHT; NOM; 名前, 書式; НАЗВАНИЕ). man(7) puts
NAME first and SYNOPSIS, when a page has one, second, and a translation keeps its original's order; so a translated
heading is NAME's or SYNOPSIS's when, set beside its English original's headings in order, it stands where NAME or
SYNOPSIS stands more often than anything else (`translated_headings`): learned from the pages, no list per
language; a page without SYNOPSIS keeps its second section (DESCRIPTION's translation), and a translation of an
older page that lacks a section its original has is outvoted by the pages that line up. A translated paragraph that is word
for word a paragraph of its English original was left untranslated: it is dropped and counted.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import os
import random
import re
import unicodedata

from downstream.finetune.builtin.common import BuiltinTask, Grouped, Tally

SECTIONS = {"1": "commands", "2": "system calls", "3": "library functions", "5": "file formats", "7": "overviews",
            "8": "administration"}
_ACCENTS = {":": "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", ",": "\u0327"}
_LETTERS = {"ss": "ß", "ae": "æ", "AE": "Æ", "oe": "œ", "OE": "Œ", "/o": "ø", "/O": "Ø", "/l": "ł", "/L": "Ł", "oa": "å",
            "oA": "Å", "-D": "Ð", "Sd": "ð", "TP": "Þ", "Tp": "þ", "vs": "š", "vS": "Š", "vz": "ž", "vZ": "Ž", ".i": "ı"}
"""groff_char(7)'s letters that are not an accent over an ASCII letter (those are composed: `_named`)."""


def _named(match: re.Match) -> str:
    """A named character: an accented letter as the letter (\\(:a, \\['e], \\[u00E4], \\[u0065_0301]), else nothing."""
    name = match.group(1) or match.group(2)
    if name in _LETTERS:
        return _LETTERS[name]
    if len(name) == 2 and name[0] in _ACCENTS and name[1].isascii() and name[1].isalpha():
        letter = unicodedata.normalize("NFC", name[1] + _ACCENTS[name[0]])
        return letter if len(letter) == 1 else ""
    if re.fullmatch(r"u[0-9A-F]{4,5}(_[0-9A-F]{4,5})*", name):
        text = unicodedata.normalize("NFC", "".join(chr(int(c, 16)) for c in name[1:].split("_")))
        return text if all(unicodedata.category(c)[0] == "L" for c in text) else ""
    return ""


_ESCAPES = [(re.compile(p), r) for p, r in (
    (r"\\f(\(..|\[[^\]]*\]|.)", ""),  # font changes
    (r"\\\((em|en)", " - "), (r"\\\((..)|\\\[([^\]]*)\]", _named),  # named characters
    (r"\\[-e]", "-"), (r"\\[&|^%:]", ""), (r"\\s[-+]?\d", ""), (r"\\\*(\(..|\[[^\]]*\]|.)", ""), (r"\\ ", " "),
)]
_BREAKS = {"PP", "P", "LP", "TP", "IP", "HP", "sp", "br", "RS", "RE", "nf", "fi", "EX", "EE", "TH", "in", "SH", "SS"}
_INLINE = {"B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB"}
_SKIP_SECTIONS = frozenset({"NAME", "SYNOPSIS"})


_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
"""Kana, CJK ideographs and Hangul syllables: written without spaces, each one word as BERT splits them."""


def words(text: str) -> int:
    """Words as BERT's basic tokenizer cuts them at spaces and around each CJK character (a Japanese or Chinese
    paragraph has few spaces, and counted by spaces alone would fall under any length threshold)."""
    return len(_UNSPACED.sub(" x ", text).split())


def _clean(line: str) -> str:
    for pattern, replacement in _ESCAPES:
        line = pattern.sub(replacement, line)
    return line


def _heading(rest: str) -> str:
    return _clean(rest).strip().strip('"').upper()


def paragraphs(roff: str, min_words: int, skip: frozenset[str] = _SKIP_SECTIONS) -> list[str]:
    """The prose paragraphs of one man page outside the sections named in `skip` (NAME and SYNOPSIS)."""
    out, current, section = [], [], ""

    def close() -> None:
        text = " ".join(" ".join(current).split())
        if section not in skip and words(text) >= min_words and "\\" not in text:
            out.append(text)
        current.clear()

    for line in roff.splitlines():
        if line.startswith((".", "'")):
            request, _, rest = line[1:].strip().partition(" ")
            if request in _BREAKS:
                close()
                if request in ("SH", "SS"):
                    section = _heading(rest)
            elif request in _INLINE and rest:
                current.append(_clean(rest).replace('"', ""))
        elif line.strip():
            current.append(_clean(line))
        else:
            close()
    close()
    return out


def headings(roff: str) -> list[str]:
    """The page's section headings (.SH), in order, cleaned as `paragraphs` matches them."""
    return [_heading(line[1:].strip().partition(" ")[2]) for line in roff.splitlines()
            if line.startswith((".", "'")) and line[1:].strip().partition(" ")[0] == "SH"]


def read_roff(path: str, follow: bool = False) -> tuple[str | None, str]:
    """(the roff of one gzipped man page, "") or (None, why not): a link (another page's alias: `follow` reads
    through it), an alias (`.so`), not gzipped, not UTF-8 (decoded strictly), unreadable."""
    if os.path.islink(path) and not follow:
        return None, "link"
    if not path.endswith(".gz"):
        return None, "not_gzip"
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            roff = f.read()
    except UnicodeDecodeError:
        return None, "not_utf8"
    except (OSError, EOFError):
        return None, "unreadable"
    return (None, "alias") if roff.lstrip().startswith(".so") else (roff, "")


def read_page(path: str) -> str | None:
    """The roff of one gzipped man page, or None for a link, an alias (`.so`), or a file that does not read."""
    return read_roff(path)[0]


ROOT = "/usr/share/man"
PAGES_PER_SECTION = 240
"""Pages read per section: a seeded sample by name, enough to fill the splits two paragraphs a page."""


def _names(directory: str, exclude: frozenset[str], tally: Tally | None = None) -> list[str]:
    """The page files of `directory` in a seeded order, less those `exclude` names (counted in `tally`)."""
    try:
        listed = os.listdir(directory)
    except OSError:
        return []
    names = sorted(n for n in listed if n not in exclude)
    if tally is not None:
        tally.left_out += len(listed) - len(names)
    # a sample that does not move when a package adds a page elsewhere in the alphabet
    return sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())


def _original(task: BuiltinTask, number: str, name: str) -> str | None:
    """The English page `name` of section `number` that a translated page translates (through its links)."""
    return read_roff(os.path.join(task.root, f"man{number}", name), follow=True)[0]


def translated_headings(task: BuiltinTask) -> frozenset[str]:
    """NAME, SYNOPSIS and the headings that stand for them in `task.language`'s pages (see the module's NOTE)."""
    beside: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for number in SECTIONS:
        directory = os.path.join(task.text_root, f"man{number}")
        for name in _names(directory, frozenset()):
            roff, original = read_roff(os.path.join(directory, name))[0], _original(task, number, name)
            if roff is not None and original is not None:
                for mine, english in zip(headings(roff), headings(original)):
                    beside[mine][english] += 1
    return _SKIP_SECTIONS | {h for h, counts in beside.items() if counts.most_common(1)[0][0] in _SKIP_SECTIONS}


def grouped(task: BuiltinTask, rng: random.Random, tally: Tally | None = None) -> Grouped:
    """{label: [(page file name, row)]} of `task.language`'s pages; `tally` counts the pages read, kept and dropped."""
    tally = Tally() if tally is None else tally
    translated = task.language != "en"
    skip = translated_headings(task) if translated else _SKIP_SECTIONS
    tally.notes["headings_left_out"] = sorted(skip)
    out: Grouped = {}
    seen: set[str] = set()  # boilerplate shared by pages (and by a page's aliases) is kept once
    for number, title in SECTIONS.items():
        directory = os.path.join(task.text_root, f"man{number}")
        label, read = f"{number} {title}", 0
        for name in _names(directory, task.exclude, tally):
            if read >= PAGES_PER_SECTION:
                break
            tally.read += 1
            roff, reason = read_roff(os.path.join(directory, name))
            if roff is None:
                tally.dropped[reason] += 1
                continue
            found = paragraphs(roff, task.min_words, skip)
            if translated and found:
                original = set(paragraphs(_original(task, number, name) or "", task.min_words))
                kept = [text for text in found if text not in original]
                tally.rows_dropped["untranslated"] += len(found) - len(kept)
                found = kept
                if not found:
                    tally.dropped["untranslated"] += 1
                    continue
            new = [text for text in found if text not in seen]
            tally.rows_dropped["seen_on_an_earlier_page"] += len(found) - len(new)
            if not new:
                tally.dropped["seen_on_an_earlier_page" if found else "no_prose"] += 1
                continue
            seen.update(new)
            read += 1
            tally.kept += 1
            out.setdefault(label, []).extend((name, {"text": text, "label": label}) for text in new)
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
                line = json.dumps({"id": os.path.relpath(page, root), "text": text}, ensure_ascii=False) + "\n"
                out.write(line)
                written += len(line.encode())
    return written
