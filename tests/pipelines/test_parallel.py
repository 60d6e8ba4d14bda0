"""Parallel text (issue 44): gettext catalogs read as English → language pairs, checked against GNU gettext's own
msgunfmt on this machine's catalogs; TSV and line-aligned pairs; each pair's drop reasons; bad input in one line."""

from __future__ import annotations

import glob
import gzip
import os
import struct
import subprocess
from collections import Counter

import pytest

from pipelines.documents.catalogs import decode_po, read_mo, read_po
from pipelines.documents.normalize import NormalizeConfig
from pipelines.documents.parallel import (
    Pair,
    aligned_pairs,
    catalog_pairs,
    clean_pair,
    has_placeholder,
    pair_key,
    parse_spec,
    tsv_pairs,
)
from pipelines.documents.records import Drop
from pipelines.errors import PrepError

LOCALE = "/usr/share/locale"
# UTF-8 catalogs with plural forms and contexts, one in ISO-8859-1 (net-tools), revisions 0.0, 0.1 and 1.1
CATALOGS = [f"{LOCALE}/{lang}/LC_MESSAGES/{name}.mo" for lang, name in
            (("fr", "coreutils"), ("fr", "apt"), ("fr", "net-tools"), ("ja", "bash"), ("hi", "Linux-PAM"), ("th", "apt"),
                                 ("ar", "gdk-pixbuf"))]  # gdk-pixbuf's: revision 1.1


def _mo_entries(path: str) -> int:
    """A .mo file's string count, less its header entry, read from its bytes (GNU's layout: N at offset 8)."""
    with open(path, "rb") as f:
        data = f.read()
    order = "<" if data[:4] == b"\xde\x12\x04\x95" else ">"
    count, originals = struct.unpack(f"{order}I", data[8:12])[0], struct.unpack(f"{order}I", data[12:16])[0]
    first_length = struct.unpack(f"{order}I", data[originals:originals + 4])[0]  # originals are sorted: "" first
    system_dependent = struct.unpack(f"{order}I", data[36:40])[0] if struct.unpack(f"{order}I", data[4:8])[0] else 0
    return count - (first_length == 0) + system_dependent


@pytest.mark.parametrize("path", CATALOGS)
def test_the_mo_reader_agrees_with_gnu_msgunfmt(path, tmp_path):
    with open(path, "rb") as f:
        catalog = read_mo(f.read(), path)
    po = tmp_path / path.split("/")[4] / "LC_MESSAGES" / "c.po"  # where a catalog without a Language: header says it
    po.parent.mkdir(parents=True)
    subprocess.run(["msgunfmt", path, "-o", str(po)], check=True)
    from_po = read_po(decode_po(po.read_bytes(), str(po)), str(po))
    # msgunfmt also writes the system-dependent strings (`%<PRIdMAX>`, `%Id`), which the reader counts without reading
    ours, theirs = [(e.msgid, e.msgstr) for e in catalog.entries], [(e.msgid, e.msgstr) for e in from_po.entries]
    system_dependent = Counter(theirs) - Counter(ours)
    assert not Counter(ours) - Counter(theirs) and ours == [t for t in theirs if t not in system_dependent]
    assert sum(system_dependent.values()) == catalog.system_dependent
    assert all(has_placeholder(a) and has_placeholder(b) for a, b in system_dependent)
    assert len(catalog.entries) + catalog.system_dependent == _mo_entries(path) > 0
    assert catalog.language == from_po.language and catalog.language.split("_")[0] == path.split("/")[4]


def test_a_po_entrys_fields_fuzzy_and_escapes():
    text = "\n".join([
        'msgid ""', 'msgstr ""', '"Language: fr\\n"', '"Content-Type: text/plain; charset=UTF-8\\n"', "",
        "#, fuzzy", 'msgid "Cancel"', 'msgstr "Annuler"', "",
        'msgctxt "menu"', 'msgid "Open"', 'msgstr ""', '"Ouv"', '"rir\\t!"', "",
        'msgid "one file"', 'msgid_plural "%d files"', 'msgstr[0] "un fichier"', 'msgstr[1] "%d fichiers"', "",
        '#~ msgid "Gone"', '#~ msgstr "Parti"',
    ])
    catalog = read_po(text, "x.po")
    assert catalog.language == "fr"
    assert [(e.line, e.msgid, e.msgstr, e.fuzzy) for e in catalog.entries] == [
        (7, "Cancel", "Annuler", True), (11, "Open", "Ouvrir\t!", False), (16, "one file", "un fichier", False)]
    records = list(catalog_pairs(text.encode(), "x.po"))  # as prep reads it: the fuzzy entry is a drop
    assert [(r.reason, r.line, r.language) for r in records if isinstance(r, Drop)] == [("fuzzy_translation", 7, "en-fr")]
    assert [(r.source, r.target, r.languages) for r in records if isinstance(r, Pair)] == [
        ("Open", "Ouvrir\t!", "en-fr"), ("one file", "un fichier", "en-fr")]
    with pytest.raises(PrepError, match=r"^y.po:2: not a \.po line \('msgstring \"x\"'\)$"):
        read_po('msgid "a"\nmsgstring "x"\n', "y.po")


def test_catalog_pairs_account_for_every_entry_of_this_machines_catalogs():
    normalize = NormalizeConfig()
    for language in ("hi", "mo"):  # mo: Moldavian's withdrawn ISO 639-1 code, which gettext still installs
        files = sorted(glob.glob(f"{LOCALE}/{language}/LC_MESSAGES/*.mo"))
        reasons = Counter()
        for path in files:
            with open(path, "rb") as f:
                records = list(catalog_pairs(f.read(), path))
            assert len(records) == _mo_entries(path), path
            for record in records:
                record = clean_pair(record, normalize) if isinstance(record, Pair) else record
                reasons[record.reason if isinstance(record, Drop) else "kept"] += 1
                if isinstance(record, Pair):
                    assert record.languages == f"en-{language}" and record.source != record.target
                    assert not has_placeholder(record.source) and not has_placeholder(record.target)
        assert sum(reasons.values()) == sum(_mo_entries(p) for p in files)
        if language == "mo":
            assert set(reasons) == {"unknown_language"}
        else:
            assert set(reasons) == {"kept", "format_string", "identical_pair", "empty_pair"} and reasons["kept"] > 1000


def test_the_drop_reasons_of_real_catalog_messages():
    normalize = NormalizeConfig()

    def reason(source, target):
        record = clean_pair(Pair("en", "hi", source, target, "p", 1), normalize)
        return record.reason if isinstance(record, Drop) else (record.source, record.target)

    # Linux-PAM's and PackageKit's messages, as hi's and th's catalogs hold them
    assert reason("from %.*s", "%.*s से") == "format_string"
    assert reason("Please enter a number from 1 to %i: ", "กรุณาป้อนตัวเลขจาก 1 ถึง %i:") == "format_string"
    assert reason("Installing {0}", "{0} स्थापित") == "format_string"
    assert reason("%(name)s failed", "x") == "format_string"
    assert reason("%<PRIdMAX> bytes", "%<PRIdMAX> octets") == "format_string" == reason("depth: %d", "عمق: %Id")
    assert reason("Bugzilla", "Bugzilla") == "identical_pair"
    assert reason("  ", "") == "empty_pair"
    assert reason("50% done", "50% पूर्ण") == ("50% done", "50% पूर्ण")  # a percent sign is text
    assert reason("...Sorry, your  time is up!\n", "...क्षमा करें, आपका समय समाप्त हो गया!") == (
        "...Sorry, your time is up!", "...क्षमा करें, आपका समय समाप्त हो गया!")
    assert reason("{{literal}}", "{{शाब्दिक}}") == ("{{literal}}", "{{शाब्दिक}}")
    a, b = Pair("en", "fr", "Cancel", "Annuler", "a.mo", 3), Pair("en", "fr", "Cancel", "Annuler", "b.mo", 9)
    assert pair_key(a) == pair_key(b) != pair_key(Pair("en", "de", "Cancel", "Annuler", "a.mo", 3))


def _real_pairs(n: int) -> list[tuple[str, str]]:
    with open(f"{LOCALE}/fr/LC_MESSAGES/coreutils.mo", "rb") as f:
        entries = read_mo(f.read(), "coreutils.mo").entries
    return [(e.msgid, e.msgstr) for e in entries if "\n" not in e.msgid + e.msgstr and "\t" not in e.msgid + e.msgstr][:n]


def test_tsv_and_line_aligned_pairs():
    pairs = _real_pairs(5)
    text = "\n".join(f"{a}\t{b}" for a, b in pairs[:3]) + f"\n{pairs[3][0]} {pairs[3][1]}\n\n{pairs[4][0]}\t{pairs[4][1]}\n"
    records = list(tsv_pairs(text, "p.tsv", ("en", "fr"), strict=False))
    assert [(r.source, r.target, r.line) for r in records if isinstance(r, Pair)] == [
        (*pairs[0], 1), (*pairs[1], 2), (*pairs[2], 3), (*pairs[4], 6)]
    assert [(r.reason, r.line, r.language) for r in records if isinstance(r, Drop)] == [("missing_tab", 4, "en-fr")]
    with pytest.raises(PrepError, match=r"^p\.tsv:4: expected source<TAB>target, found 0 tabs$"):
        list(tsv_pairs(text, "p.tsv", ("en", "fr"), strict=True))
    sources, targets = [a for a, _ in pairs], [b for _, b in pairs]
    assert [(p.source, p.target, p.line, p.path) for p in aligned_pairs(sources, targets, ("a.en", "b.fr"), ("en", "fr"))] == [
        (a, b, i, "a.en") for i, (a, b) in enumerate(pairs, start=1)]
    with pytest.raises(PrepError, match=r"^--parallel: a\.en has 5 lines but b\.fr has 4: line-aligned files must"):
        list(aligned_pairs(sources, targets[:4], ("a.en", "b.fr"), ("en", "fr")))


def test_bad_parallel_input_is_one_line():
    assert parse_spec("/usr/share/locale/*/LC_MESSAGES/apt.mo").languages is None
    spec = parse_spec("en-pt_BR=a.en,b.pt")
    assert spec.languages == ("en", "pt_BR") and spec.aligned == ("a.en", "b.pt")
    assert parse_spec("en-fr=pairs/*.tsv").aligned is None
    with pytest.raises(PrepError, match=r"^--parallel en-xx=p\.tsv: unknown language code 'xx'"):
        parse_spec("en-xx=p.tsv")
    with pytest.raises(PrepError, match=r"^--parallel english=p\.tsv: expected SRC-TGT=FILES"):
        parse_spec("english=p.tsv")
    man = sorted(glob.glob("/usr/share/man/fr/man1/*.gz"))[0]
    with open(man, "rb") as f:
        data = f.read()
    with pytest.raises(PrepError, match=rf"^x\.mo: not a gettext \.mo catalog \(magic number {data[:4].hex()}, expected 950412de\)$"):
        list(catalog_pairs(data, "x.mo"))
    with pytest.raises(PrepError, match=r"^x\.po:1: not a \.po line"):
        list(catalog_pairs(gzip.decompress(data), "x.po"))
    with open(CATALOGS[0], "rb") as f:
        catalog = f.read()
    for cut in (12, len(catalog) // 2):
        with pytest.raises(PrepError, match=r"^cut\.mo: (a truncated \.mo catalog|string \d+ lies past the file's end)"):
            list(catalog_pairs(catalog[:cut], "cut.mo"))


def _expected(files, tsv, aligned):
    """What prep --parallel should keep and drop, by the record logic run directly: {(file|direction, key): n},
    and the kept pairs (the first read of each duplicate group)."""
    normalize, records = NormalizeConfig(), []
    for path in files:
        with open(path, "rb") as f:
            records += catalog_pairs(f.read(), path)
    records += tsv_pairs(open(tsv, encoding="utf-8").read(), tsv, ("en", "fr"), strict=False)
    records += aligned_pairs(*(open(p, encoding="utf-8").read().splitlines() for p in aligned), aligned, ("en", "fr"))
    counts, kept = Counter(), {}
    for record in records:
        direction = record.languages if isinstance(record, Pair) else record.language
        counts["file", record.path, "read"] += 1
        counts["direction", direction, "read"] += 1
        record = clean_pair(record, normalize) if isinstance(record, Pair) else record
        if isinstance(record, Pair):
            first = kept.setdefault(pair_key(record), record)
            if min(first, record, key=lambda p: (p.path, p.line)) is not first:
                kept[pair_key(record)], record = record, first
            if record is kept[pair_key(record)]:
                continue
            record = Drop(record.path, "duplicate_pair", record.line, "", record.languages)
        counts["file", record.path, f"dropped:{record.reason}"] += 1
        counts["direction", record.language, f"dropped:{record.reason}"] += 1
    for pair in kept.values():
        counts["file", pair.path, "kept"] += 1
        counts["direction", pair.languages, "kept"] += 1
    return counts, kept


@pytest.mark.integration
def test_prep_parallel_reads_catalogs_tsv_and_aligned_files_and_counts_every_pair(tmp_path):
    import json

    import pyarrow.parquet as pq

    from tests.helpers import run_cli
    from tests.pipelines.multilingual import documents

    corpus = tmp_path / "fr.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in documents("fr")))
    pairs = _real_pairs(40)
    tsv = tmp_path / "pairs.tsv"  # a repeat of a catalog pair (duplicate_pair) and a line without its tab
    tsv.write_text("".join(f"{a}\t{b}\n" for a, b in pairs[:20]) + f"{pairs[0][0]}\t{pairs[0][1]}\n{pairs[20][0]} {pairs[20][1]}\n")
    (tmp_path / "a.en").write_text("".join(f"{a}\n" for a, _ in pairs[20:]))
    (tmp_path / "b.fr").write_text("".join(f"{b}\n" for _, b in pairs[20:]))
    catalogs = [f"{LOCALE}/hi/LC_MESSAGES/*.mo", f"{LOCALE}/mo/LC_MESSAGES/*.mo", f"{LOCALE}/fr/LC_MESSAGES/coreutils.mo"]
    out = tmp_path / "out"
    result = run_cli("prep", "--input", str(corpus), "--output", str(out), "--vocab-size", "500", "--progress", "never",
                     *(a for c in catalogs for a in ("--parallel", c)), "--parallel", f"en-fr={tsv}",
                     "--parallel", f"en-fr={tmp_path / 'a.en'},{tmp_path / 'b.fr'}", "--runner", "FnApiRunner")
    assert result.returncode == 0, result.stderr
    report = json.load(open(out / "report.json"))
    files = sorted(p for c in catalogs for p in glob.glob(c))
    counts, kept = _expected(files, str(tsv), (str(tmp_path / "a.en"), str(tmp_path / "b.fr")))
    parallel = report["parallel"]
    got = Counter()
    for scope, table in (("file", parallel["files"]), ("direction", parallel["directions"])):
        for name, entry in table.items():
            got[scope, name, "read"] += entry["read"]
            got[scope, name, "kept"] += entry["kept"]
            for reason, n in entry["dropped"].items():
                got[scope, name, f"dropped:{reason}"] += n
    assert +got == +counts
    assert parallel["unbalanced"] == [] and report["unbalanced"] == []
    assert parallel["directions"]["en-mo"]["dropped"] == {"unknown_language": parallel["directions"]["en-mo"]["read"]}
    assert parallel["directions"]["en-fr"]["dropped"]["duplicate_pair"] >= 1  # the TSV's repeat of coreutils' pair
    assert parallel["files"][str(tsv)]["dropped"]["missing_tab"] == 1
    # the shards hold exactly the kept pairs, each as its first reading
    rows = [row for name in sorted(os.listdir(out / "parallel")) for row in pq.read_table(out / "parallel" / name).to_pylist()]
    assert sorted((r["source_language"], r["target_language"], r["source"], r["target"], r["path"], r["line"]) for r in rows) == sorted(
        (p.source_language, p.target_language, p.source, p.target, p.path, p.line) for p in kept.values())
    assert f"parallel: {parallel['total']['kept']} of {parallel['total']['read']} translation pairs kept" in result.stdout
    # the same inputs on two worker processes: the same shard bytes
    again = run_cli("prep", "--input", str(corpus), "--output", str(tmp_path / "again"), "--vocab-size", "500", "--progress",
                    "never", *(a for c in catalogs for a in ("--parallel", c)), "--parallel", f"en-fr={tsv}",
                    "--parallel", f"en-fr={tmp_path / 'a.en'},{tmp_path / 'b.fr'}", "--direct_num_workers", "2",
                    "--direct_running_mode", "multi_processing")
    assert again.returncode == 0, again.stderr
    assert {n: (out / "parallel" / n).read_bytes() for n in os.listdir(out / "parallel")} == {
        n: (tmp_path / "again" / "parallel" / n).read_bytes() for n in os.listdir(tmp_path / "again" / "parallel")}


@pytest.mark.integration
def test_prep_refuses_bad_parallel_input_in_one_line(tmp_path):
    from tests.helpers import run_cli

    corpus = tmp_path / "c.txt"
    corpus.write_text("A line of text long enough to keep.\n")
    (tmp_path / "a.en").write_text("one\ntwo\n")
    (tmp_path / "b.fr").write_text("un\n")
    man = sorted(glob.glob("/usr/share/man/fr/man1/*.gz"))[0]
    for spec, message in ((f"en-fr={tmp_path / 'a.en'},{tmp_path / 'b.fr'}", f"--parallel: {tmp_path / 'a.en'} has 2 lines but "
                           f"{tmp_path / 'b.fr'} has 1"), (man, f"{man}: not a gettext .mo catalog"),
                          (f"en-zz={tmp_path / 'a.en'}", f"--parallel en-zz={tmp_path / 'a.en'}: unknown language code 'zz'")):
        result = run_cli("prep", "--input", str(corpus), "--output", str(tmp_path / "out"), "--parallel", spec, "--progress", "never")
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert result.stderr.startswith(f"clozeforge prep: error: {message}"), result.stderr
