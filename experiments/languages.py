"""Per-language figures of a shared vocabulary (issue 44): not a timing.

`python experiments/run.py languages [--quick]`: a multilingual corpus from this machine's own text, every translated man
page language under /usr/share/man/<lang>/ (their first PAGES pages of man1, one document a page's prose), plus
gettext catalogs for the scripts the man pages lack (Devanagari, Thai, Arabic and Hebrew, right to left: GROUP
translated messages a document); `clozeforge prep --identify-languages` on it, uncased (the default) and `--cased`.
Out: per identified language, documents read / kept / dropped, and on its held-out documents the vocabulary's pieces
per word and `[UNK]` rate, both ways; the scripts that uncased normalisation strips letters from, and the warning.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile

from downstream.finetune.builtin.man_sections import paragraphs
from pipelines.documents.catalogs import read_mo

CATALOG_LANGUAGES = ("hi", "th", "ar", "he")


def man_documents(language: str, pages: int) -> list[str]:
    docs = []
    for path in sorted(glob.glob(f"/usr/share/man/{language}/man1/*.gz"))[:pages]:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            text = "\n".join(paragraphs(f.read(), min_words=3))
        if text:
            docs.append(text)
    return docs


def catalog_documents(language: str, docs: int, group: int = 12) -> list[str]:
    messages = []
    for path in sorted(glob.glob(f"/usr/share/locale/{language}/LC_MESSAGES/*.mo")):
        with open(path, "rb") as f:
            messages += [e.msgstr for e in read_mo(f.read(), path).entries if len(e.msgstr.split()) >= 3 and "%" not in e.msgstr]
        if len(messages) >= docs * group:
            break
    return [" ".join(messages[i:i + group]) for i in range(0, min(len(messages), docs * group), group)]


def write_corpus(directory: str, pages: int) -> dict[str, int]:
    languages = sorted(d for d in os.listdir("/usr/share/man") if not d.startswith("man") and glob.glob(f"/usr/share/man/{d}/man1/*.gz"))
    counts = {}
    for language in [*languages, *CATALOG_LANGUAGES]:
        docs = man_documents(language, pages) if language in languages else catalog_documents(language, pages)
        with open(os.path.join(directory, f"{language}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs)
        counts[language] = len(docs)
    return counts


def prep(corpus: str, out: str, vocab_size: int, *extra: str) -> dict:
    subprocess.run([sys.executable, "-m", "clozeforge", "prep", "--input", f"{corpus}/*.jsonl", "--output", out,
                    "--identify-languages", "--vocab-size", str(vocab_size), "--packing", "doc-sentences",
                    "--validation-fraction", "0.2", "--progress", "never", *extra], check=True, capture_output=True)
    with open(os.path.join(out, "report.json")) as f:
        return json.load(f)


def main(corpus: str | None = None, quick: bool = False) -> dict:
    pages, vocab_size = (4, 2000) if quick else (40, 16000)
    with tempfile.TemporaryDirectory() as work:
        inputs = write_corpus(work, pages)
        uncased = prep(work, os.path.join(work, "uncased"), vocab_size)
        cased = prep(work, os.path.join(work, "cased"), vocab_size, "--cased")
    table = {}
    for code, entry in uncased["languages"].items():
        row = {"read": entry["read"], "kept": entry["kept"], "dropped": sum(entry["dropped"].values())}
        for name, report in (("uncased", uncased), ("cased", cased)):
            vocab = report["languages"].get(code, {}).get("vocab", {})
            if vocab:
                row[name] = {"held_out_docs": vocab["held_out_docs"], "pieces_per_word": vocab["pieces_per_word"],
                             "unknown_rate": vocab["unknown_rate"]}
        table[code] = row
    lost = {s: r["share_lost"] for s, r in uncased["scripts"].items() if r["marks_lost"]}
    return {"inputs": inputs, "pages_per_language": pages, "vocab_size": vocab_size, "languages": table,
            "scripts_losing_letters_uncased": lost,
            "warning_uncased": [w for w in uncased["warnings"] if w.startswith("uncased")],
            "warning_cased": [w for w in cased["warnings"] if w.startswith("uncased")],
            "unbalanced": uncased["unbalanced"] + cased["unbalanced"]}
