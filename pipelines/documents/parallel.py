"""Parallel text: translation pairs read from gettext catalogs, TSV files and line-aligned files, and the rules
that keep or drop each pair (no Beam import).

In:  a file's bytes (or two files' lines) and what the user said of its languages.
Out: `catalog_pairs`, `tsv_pairs`, `aligned_pairs` → `Pair`s (source language, target language, the two texts, file
     and line) or `Drop`s (their reason; `language` is the direction, `en-fr`); `clean_pair(pair, normalize)` → the pair normalised as documents are, or a Drop;
     `pair_key(pair)` the key exact deduplication groups pairs by.

Formats (`parse_spec` reads the flag: `[SRC-TGT=]GLOB`):
- gettext catalogs (`.mo`, `.po`, pipelines/documents/catalogs.py): English msgid → the catalog's language. A
  catalog whose language code is not one (pipelines/documents/languages.base_language) drops its entries as
  `unknown_language`; a translation its translator marked fuzzy is `fuzzy_translation`.
- a TSV file (`.tsv`, `SRC-TGT=` given): `source<TAB>target` per line; a line without exactly one tab is
  `missing_tab` (--strict: one line naming file and line).
- two line-aligned files (`SRC-TGT=A,B`): line i of A is the translation of line i of B; files of different line
  counts are a PrepError naming both and their counts (nothing in them can be trusted to align).

Why pairs are dropped (each a counted reason, as documents' are):
- `empty_pair`: either side empty after normalisation (an untranslated catalog entry has an empty msgstr);
- `identical_pair`: the translation is the source (untranslated, or a name: "GNOME", "%s");
- `format_string`: either side holds a printf conversion (`%s`, `%1$d`, `%(name)s`) or a brace field (`{0}`,
  `{name}`): placeholders are the program's, not language, and XLM's TLM would learn to copy them across;
- `duplicate_pair` (Deduplicate's): the same normalised pair again (catalogs repeat "Cancel" in every package).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

from pipelines.documents.catalogs import decode_po, is_mo, read_mo, read_po
from pipelines.documents.languages import base_language, check_code
from pipelines.documents.normalize import NormalizeConfig, normalize_text
from pipelines.documents.records import Drop, Pair
from pipelines.errors import PrepError

DROP_REASONS = ("missing_tab", "unknown_language", "fuzzy_translation", "empty_pair", "identical_pair", "format_string",
                "duplicate_pair")

CATALOG_SOURCE_LANGUAGE = "en"
"""The language of gettext msgids: GNU's convention, which Debian's packages follow."""

_PRINTF_RE = re.compile(r"%(?:\(\w+\)|\d+\$)?[-+#0'I]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:<PRI\w+>|(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcsSpn])")
"""A printf conversion (gettext's `%<PRIdMAX>` and glibc's `I` flag too), or Python's %(name)s. No space flag: "50% done" is
text, not `% d`."""
_BRACE_RE = re.compile(r"(?<!\{)\{(?:\d+|[A-Za-z_]\w*)?(?:![rsa])?(?::[^{}]*)?\}(?!\})")
"""A str.format / ICU field: {}, {0}, {name}, {0:>8}; doubled braces are literal."""

_SAMPLE_CHARS = 80


@dataclasses.dataclass(frozen=True)
class ParallelSpec:
    """One --parallel flag: a glob of catalogs, or with `SRC-TGT=`, TSV files or two line-aligned files."""

    glob: str
    languages: tuple[str, str] | None = None
    aligned: tuple[str, str] | None = None


def parse_spec(value: str) -> ParallelSpec:
    """`GLOB` (catalogs), `SRC-TGT=GLOB` (TSV) or `SRC-TGT=A,B` (line-aligned); a PrepError naming the flag."""
    head, sep, rest = value.partition("=")
    if not sep:
        return ParallelSpec(glob=value)
    source, dash, target = head.partition("-")
    if not dash or not source or not target:
        raise PrepError(f"--parallel {value}: expected SRC-TGT=FILES (en-fr=pairs.tsv, or en-fr=a.en,b.fr)")
    languages = (check_code(source, f"--parallel {value}"), check_code(target, f"--parallel {value}"))
    if "," in rest:
        first, second = rest.split(",", 1)
        return ParallelSpec(glob=rest, languages=languages, aligned=(first, second))
    return ParallelSpec(glob=rest, languages=languages)


def is_catalog(path: str, head: bytes) -> bool:
    return path.endswith((".mo", ".po")) or is_mo(head)


def catalog_pairs(data: bytes, path: str) -> Iterator[Pair | Drop]:
    """A .mo or .po catalog's entries as en → its language pairs (or Drops); a PrepError for a file that is no catalog."""
    if path.endswith(".po"):
        catalog = read_po(decode_po(data, path), path)
    else:
        catalog = read_mo(data, path)
    known = base_language(catalog.language) is not None
    direction = f"{CATALOG_SOURCE_LANGUAGE}-{catalog.language}"
    for number in range(catalog.system_dependent):  # each a printf format: a <PRI...> macro, the I flag (catalogs.py)
        yield Drop(path, "format_string" if known else "unknown_language", len(catalog.entries) + number + 1,
                   "a system-dependent string (%<PRI...>, %I)", direction)
    for entry in catalog.entries:
        if not known:
            yield Drop(path, "unknown_language", entry.line, catalog.language, direction)
        elif entry.fuzzy:
            yield Drop(path, "fuzzy_translation", entry.line, entry.msgid[:_SAMPLE_CHARS], direction)
        else:
            yield Pair(CATALOG_SOURCE_LANGUAGE, catalog.language, entry.msgid, entry.msgstr, path, entry.line)


def tsv_pairs(text: str, path: str, languages: tuple[str, str], *, strict: bool) -> Iterator[Pair | Drop]:
    """`source<TAB>target` lines; a line without exactly one tab is `missing_tab` (a PrepError under `strict`)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            if strict:
                raise PrepError(f"{path}:{number}: expected source<TAB>target, found {len(parts) - 1} tabs")
            yield Drop(path, "missing_tab", number, line[:_SAMPLE_CHARS], "-".join(languages))
            continue
        yield Pair(languages[0], languages[1], parts[0], parts[1], path, number)


def aligned_pairs(source_lines: list[str], target_lines: list[str], paths: tuple[str, str],
                  languages: tuple[str, str]) -> Iterator[Pair]:
    """Line i of the first file with line i of the second; a PrepError when their line counts differ."""
    if len(source_lines) != len(target_lines):
        raise PrepError(f"--parallel: {paths[0]} has {len(source_lines)} lines but {paths[1]} has {len(target_lines)}: "
                        f"line-aligned files must have as many lines")
    for number, (source, target) in enumerate(zip(source_lines, target_lines), start=1):
        yield Pair(languages[0], languages[1], source, target, paths[0], number)


def has_placeholder(text: str) -> bool:
    return bool(_PRINTF_RE.search(text) or _BRACE_RE.search(text))


def clean_pair(pair: Pair, normalize: NormalizeConfig) -> Pair | Drop:
    """The pair with both sides normalised as documents are (one line each), or a Drop with its reason."""
    source = " ".join(normalize_text(pair.source, normalize).split())
    target = " ".join(normalize_text(pair.target, normalize).split())
    sample = f"{source[:_SAMPLE_CHARS // 2]} | {target[:_SAMPLE_CHARS // 2]}"
    if not source or not target:
        reason = "empty_pair"
    elif source == target:
        reason = "identical_pair"
    elif has_placeholder(source) or has_placeholder(target):
        reason = "format_string"
    else:
        return dataclasses.replace(pair, source=source, target=target)
    return Drop(pair.path, reason, pair.line, sample, pair.languages)


def pair_key(pair: Pair) -> str:
    """Exact deduplication's key: the direction and both normalised sides."""
    return "\x00".join((pair.source_language, pair.target_language, pair.source, pair.target))
