"""gettext catalogs as translation pairs: .mo (compiled) and .po (source) files, read as data (no Beam import).

In:  a catalog's bytes and its path. Out: `Catalog(language, entries)`, each entry (line, msgid, msgstr, fuzzy): the
     English message and its translation (the first plural form for a plural entry, the context dropped), in the
     file's order; the header entry (msgid "") is metadata, not an entry.

Every Debian system installs thousands of catalogs (/usr/share/locale/<lang>/LC_MESSAGES/*.mo): real English-to-N
translations of short interface strings. A .mo file is read with its own struct reader (GNU gettext's layout: magic
0x950412de in either byte order, revision 0.0, 0.1 or 1.1, N strings, the offsets of the original and translated string
tables; 0.1's and 1.1's system-dependent strings, printf formats with `<PRIdMAX>` macros or the `%I` flag, are
counted, not read; strings in the header's charset), never through `gettext.GNUTranslations`, whose plural-forms
header is compiled into Python code (checked against GNU msgunfmt on this machine's catalogs:
tests/pipelines/test_parallel.py). A .po file is read line by line (msgctxt, msgid, msgid_plural, msgstr, msgstr[n], continued "..." lines, C escapes; `#, fuzzy`
marks a translation its translator did not confirm). The language is the header's `Language:` field, else the
catalog's directory (`<lang>/LC_MESSAGES/`); a catalog with neither is a PrepError naming it.
"""

from __future__ import annotations

import codecs
import dataclasses
import re
import struct

from pipelines.errors import PrepError

MO_MAGIC = 0x950412DE
_CONTEXT, _PLURAL = "\x04", "\x00"
_LOCALE_DIR_RE = re.compile(r"/([^/]+)/LC_MESSAGES/[^/]+$")


@dataclasses.dataclass(frozen=True)
class Entry:
    line: int
    """The entry's number in a .mo file (1-based), its msgid's line in a .po file."""
    msgid: str
    msgstr: str
    fuzzy: bool = False


@dataclasses.dataclass(frozen=True)
class Catalog:
    language: str
    entries: tuple[Entry, ...]
    system_dependent: int = 0
    """Messages of a .mo's system-dependent table (`%<PRIdMAX>`, `%Id`: printf formats all), counted, not read."""


def is_mo(head: bytes) -> bool:
    """Whether the first 4 bytes are a .mo file's magic number (either byte order)."""
    return len(head) >= 4 and MO_MAGIC in (struct.unpack("<I", head[:4])[0], struct.unpack(">I", head[:4])[0])


_CHARSET_RE = re.compile(rb"charset=([A-Za-z0-9_.:-]+)")


def _charset(header: bytes, path: str) -> str:
    """The header's `Content-Type: ...; charset=X` (UTF-8 without one; old catalogs use ISO-8859-1, EUC-JP, ...), a
    PrepError when Python knows no such codec."""
    match = _CHARSET_RE.search(header)
    if not match or match.group(1).upper() == b"CHARSET":  # "CHARSET": the template's placeholder
        return "utf-8"
    name = match.group(1).decode("ascii")
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise PrepError(f"{path}: the catalog's charset {name!r} is not one Python decodes") from None


def _language(header: str, path: str) -> str:
    for line in header.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "language" and value.strip():
            return value.strip()
    match = _LOCALE_DIR_RE.search(path)
    if match:
        return match.group(1)
    raise PrepError(f"{path}: the catalog names no language (no Language: header, not under <lang>/LC_MESSAGES/)")


def _message(raw: str) -> str:
    """A msgid's or msgstr's text: the context dropped, the first plural form kept."""
    return raw.rpartition(_CONTEXT)[2].split(_PLURAL)[0]


def read_mo(data: bytes, path: str) -> Catalog:
    """A .mo file's entries; a PrepError naming `path` when it is no catalog (magic, revision, offsets)."""
    if not is_mo(data):
        raise PrepError(f"{path}: not a gettext .mo catalog (magic number {data[:4].hex() or 'missing'}, expected 950412de)")
    order = "<" if struct.unpack("<I", data[:4])[0] == MO_MAGIC else ">"
    try:
        revision, count, originals, translations = struct.unpack(f"{order}4I", data[4:20])
        if revision >> 16 > 1:  # major 1: GNU msgfmt's mark for system-dependent strings that need a newer reader
            raise PrepError(f"{path}: .mo revision {revision >> 16}.{revision & 0xFFFF}, this reader knows 0.x and 1.x")

        def raw(table: int, i: int) -> bytes:
            length, offset = struct.unpack(f"{order}2I", data[table + 8 * i: table + 8 * i + 8])
            if offset + length > len(data):
                raise PrepError(f"{path}: string {i} lies past the file's end (truncated .mo?)")
            return data[offset: offset + length]

        raw_pairs = [(raw(originals, i), raw(translations, i)) for i in range(count)]
    except struct.error:
        raise PrepError(f"{path}: a truncated .mo catalog (its tables lie past the file's end)") from None
    charset = next((_charset(msgstr, path) for msgid, msgstr in raw_pairs if msgid == b""), "utf-8")
    try:
        pairs = [(msgid.decode(charset), msgstr.decode(charset)) for msgid, msgstr in raw_pairs]
    except UnicodeDecodeError as e:
        raise PrepError(f"{path}: a .mo string is not {charset} ({e.reason} at byte {e.start})") from None
    header = next((msgstr for msgid, msgstr in pairs if msgid == ""), "")
    entries = tuple(Entry(i + 1, _message(msgid), _message(msgstr)) for i, (msgid, msgstr) in enumerate(pairs) if msgid)
    system_dependent = struct.unpack(f"{order}I", data[36:40])[0] if revision and len(data) >= 40 else 0
    return Catalog(_language(header, path), entries, system_dependent)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_ESCAPE_RE = re.compile(r'\\(.)')


def _unquote(text: str, path: str, line: int) -> str:
    text = text.strip()
    if len(text) < 2 or not (text.startswith('"') and text.endswith('"')):
        raise PrepError(f"{path}:{line}: expected a quoted string, found {text[:40]!r}")
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), text[1:-1])


def decode_po(data: bytes, path: str) -> str:
    """A .po file's text in the charset its header names (the header is ASCII in every charset gettext allows)."""
    charset = _charset(data[:4096], path)
    try:
        return data.decode(charset)
    except UnicodeDecodeError as e:
        raise PrepError(f"{path}: a .po catalog that is not {charset} ({e.reason} at byte {e.start})") from None


def read_po(text: str, path: str) -> Catalog:
    """A .po file's entries (obsolete `#~` entries left out); a PrepError naming file and line for a line it cannot read."""
    entries: list[Entry] = []
    header = ""
    current: dict = {}
    field = None

    def close() -> None:
        nonlocal header, current
        if "msgid" in current:
            msgstr = current.get("msgstr", current.get("msgstr[0]", ""))
            if current["msgid"] == "" and "msgctxt" not in current:
                header = msgstr
            else:
                entries.append(Entry(current["line"], current["msgid"], msgstr, current.get("fuzzy", False)))
        current = {}

    fuzzy = False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):  # comments open the next entry (obsolete `#~` entries are comments too)
            if (field or "").startswith("msgstr"):
                close()
                field = None
            if stripped.startswith("#,") and "fuzzy" in stripped:
                fuzzy = True
            continue
        keyword, _, rest = stripped.partition(" ")
        if stripped.startswith('"'):
            if field is None:
                raise PrepError(f"{path}:{number}: a continued string outside an entry")
            current[field] += _unquote(stripped, path, number)
            continue
        if keyword in ("msgctxt", "msgid") and (field or "").startswith("msgstr"):
            close()
        if keyword not in ("msgctxt", "msgid", "msgid_plural", "msgstr") and not re.fullmatch(r"msgstr\[\d+\]", keyword):
            raise PrepError(f"{path}:{number}: not a .po line ({stripped[:40]!r})")
        if keyword == "msgid":
            current["line"] = number
            current["fuzzy"], fuzzy = fuzzy, False
        current[keyword] = _unquote(rest, path, number)
        field = keyword
    close()
    return Catalog(_language(header, path), tuple(entries))
