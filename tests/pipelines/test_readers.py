"""Every bad-input kind becomes a counted drop with its own reason; --strict names file and line."""

import gzip
import json
import struct
import zlib
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines.documents.readers import Event, ReadConfig, read_file
from pipelines.documents.records import Drop, RawDoc
from pipelines.errors import PrepError

UGLY_JSONL = b"\n".join(
    [
        b'{"text": "A good document.", "id": 1}',
        b'{"text": "broken',  # bad_json
        b'["a", "list"]',  # not_an_object
        b'{"body": "no text field"}',  # missing_text
        b'{"text": null}',  # null_text
        b'{"text": 42}',  # non_string_text
        b'{"text": "   \\n\\t "}',  # empty_text
        b'{"text": "caf\xe9 latin-1 byte"}',  # invalid UTF-8
        b"",  # a blank line is not a record
        b'{"text": "Another good one."}',
    ]
)


def tally(items):
    docs = [i for i in items if isinstance(i, RawDoc)]
    drops = Counter(i.reason for i in items if isinstance(i, Drop))
    events = Counter(i.kind for i in items if isinstance(i, Event))
    return docs, drops, events


def write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_every_bad_jsonl_kind_is_counted(tmp_path):
    path = write(tmp_path, "ugly.jsonl", UGLY_JSONL)
    docs, drops, events = tally(list(read_file("web", path, ReadConfig(invalid_utf8="replace"))))
    assert [d.text for d in docs] == ["A good document.", "caf\ufffd latin-1 byte", "Another good one."]
    assert drops == {"bad_json": 1, "not_an_object": 1, "missing_text": 1, "null_text": 1, "non_string_text": 1, "empty_text": 1}
    assert events == {"invalid_utf8_replaced": 1}
    assert [d.line for d in docs] == [1, 8, 10]


def test_invalid_utf8_is_dropped_by_default(tmp_path):
    path = write(tmp_path, "ugly.jsonl", UGLY_JSONL)
    docs, drops, _ = tally(list(read_file("web", path, ReadConfig())))
    assert len(docs) == 2 and drops["invalid_utf8"] == 1


def test_latin1_text_is_decoded_by_the_stated_encoding_or_dropped_never_stripped(tmp_path):
    """Issue 26 row 9: a latin-1 .txt was kept with "Café" -> "Caf" (U+FFFD replaced, then removed by cleaning)."""
    path = write(tmp_path, "latin.txt", "Café au lait is naïve.\nA second line.".encode("latin-1"))
    docs, drops, events = tally(list(read_file("web", path, ReadConfig())))
    assert docs == [] and drops == {"invalid_utf8": 1} and not events
    sample = next(i for i in read_file("web", path, ReadConfig()) if isinstance(i, Drop)).sample
    assert "Caf\\xe9" in sample  # the offending byte shown, escaped, so its encoding can be told
    docs, drops, _ = tally(list(read_file("web", path, ReadConfig(encoding="latin-1"))))
    assert [d.text for d in docs] == ["Café au lait is naïve.\nA second line."] and not drops
    with pytest.raises(PrepError, match="--encoding utf-16: not an ASCII-compatible codec"):
        ReadConfig(encoding="utf-16")
    with pytest.raises(PrepError, match="--encoding nope: no such codec"):
        ReadConfig(encoding="nope")


def test_strict_names_file_and_line(tmp_path):
    path = write(tmp_path, "ugly.jsonl", UGLY_JSONL)
    with pytest.raises(PrepError, match=r"ugly\.jsonl:2: bad json"):
        list(read_file("web", path, ReadConfig(strict=True)))


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_truncated_stream_keeps_complete_lines(tmp_path, suffix):
    lines = b"".join(json.dumps({"text": f"document number {i} " * 5}).encode() + b"\n" for i in range(5000))
    packed = gzip.compress(lines) if suffix.endswith(".gz") else zstandard.ZstdCompressor().compress(lines)
    whole = tally(list(read_file("s", write(tmp_path, "ok" + suffix, packed), ReadConfig())))
    assert len(whole[0]) == 5000 and not whole[1] and not whole[2]
    docs, drops, events = tally(list(read_file("s", write(tmp_path, "cut" + suffix, packed[: len(packed) // 2]), ReadConfig())))
    assert 0 < len(docs) < 5000
    assert events == {"truncated_stream": 1}
    assert drops == {"truncated_stream": 1}  # the partial last line
    assert [d.text for d in docs] == [f"document number {i} " * 5 for i in range(len(docs))]


def test_binary_and_unreadable_files(tmp_path):
    binary = write(tmp_path, "image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 50)
    assert tally(list(read_file("s", binary, ReadConfig())))[1] == {"binary_file": 1}
    not_gzip = write(tmp_path, "plain.jsonl.gz", b'{"text": "not compressed"}\n')
    assert tally(list(read_file("s", not_gzip, ReadConfig())))[1] == {"unreadable_file": 1}
    odd = write(tmp_path, "table.xlsx", b"PK")
    assert tally(list(read_file("s", odd, ReadConfig())))[1] == {"unsupported_format": 1}


def test_txt_modes(tmp_path):
    path = write(tmp_path, "book.txt", b"First para line one.\nline two.\n\n\nSecond para.\n\nThird.\n")
    assert len(tally(list(read_file("b", path, ReadConfig())))[0]) == 1
    paragraphs = tally(list(read_file("b", path, ReadConfig(txt_mode="paragraph"))))[0]
    assert [(d.line, d.text) for d in paragraphs] == [(1, "First para line one.\nline two."), (5, "Second para."), (7, "Third.")]
    assert len(tally(list(read_file("b", path, ReadConfig(txt_mode="line"))))[0]) == 4


def test_parquet_rows(tmp_path):
    path = str(tmp_path / "docs.parquet")
    pq.write_table(pa.table({"text": ["one doc", None, "  ", "two doc"], "id": ["a", "b", "c", "d"]}), path)
    docs, drops, _ = tally(list(read_file("p", path, ReadConfig())))
    assert [d.text for d in docs] == ["one doc", "two doc"]
    assert drops == {"null_text": 1, "empty_text": 1}


def test_doc_ids_are_stable_and_distinct(tmp_path):
    path = write(tmp_path, "ugly.jsonl", UGLY_JSONL)
    first = [d.doc_id for d in tally(list(read_file("web", path, ReadConfig())))[0]]
    again = [d.doc_id for d in tally(list(read_file("web", path, ReadConfig())))[0]]
    assert first == again and len(set(first)) == len(first)


@pytest.mark.parametrize("bad", [b"[" * 200_000 + b"]" * 200_000, b'{"text": "x", "n": ' + b"9" * 5000 + b"}"],
                         ids=["200k_deep", "5000_digit_int"])
def test_json_too_deep_or_too_large_drops_only_its_line(tmp_path, bad):
    # json.loads raises RecursionError and ValueError (int-string limit) for these, not JSONDecodeError.
    path = write(tmp_path, "odd.jsonl", b'{"text": "before"}\n' + bad + b'\n{"text": "after"}\n')
    items = list(read_file("s", path, ReadConfig()))
    docs, drops, events = tally(items)
    assert [d.text for d in docs] == ["before", "after"]
    assert drops == {"bad_json": 1} and not events
    assert [i.line for i in items if isinstance(i, Drop)] == [2]


def tiny_png() -> bytes:
    """A real 16x16 RGB PNG: its first "line" (up to the signature's \\n) holds no NUL, the IHDR chunk does."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    pixels = b"".join(b"\x00" + bytes(range(48)) for _ in range(16))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(pixels)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("name, packer", [("img.jsonl", bytes), ("img.txt", bytes), ("img.jsonl.gz", gzip.compress)])
def test_a_renamed_image_is_one_binary_file_drop(tmp_path, name, packer):
    path = write(tmp_path, name, packer(tiny_png()))
    for config in (ReadConfig(), ReadConfig(txt_mode="line")):
        docs, drops, events = tally(list(read_file("s", path, config)))
        assert not docs and drops == {"binary_file": 1} and not events
    with pytest.raises(PrepError, match=rf"{name.replace('.', '[.]')}: binary file"):
        list(read_file("s", path, ReadConfig(strict=True)))


def test_a_nul_past_the_binary_probe_is_the_records_problem(tmp_path):
    good = b'{"text": "a document that is long enough to matter"}\n'
    path = write(tmp_path, "late.jsonl", good * 200 + b'{"text": "a\x00b"}\n' + good)  # NUL at byte ~10,800
    docs, drops, _ = tally(list(read_file("s", path, ReadConfig())))
    assert len(docs) == 201 and drops == {"bad_json": 1}  # a raw control character is not valid JSON


def compress(suffix: str, data: bytes) -> bytes:
    return gzip.compress(data) if suffix.endswith(".gz") else zstandard.ZstdCompressor().compress(data)


def cut_after(suffix: str, data: bytes, k: int) -> bytes:
    """A compressed stream that decodes exactly data[:k] and then ends without its end marker."""
    if suffix.endswith(".gz"):
        c = zlib.compressobj(wbits=31)
        return c.compress(data[:k]) + c.flush(zlib.Z_SYNC_FLUSH)
    c = zstandard.ZstdCompressor().compressobj()
    return c.compress(data[:k]) + c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_a_cut_exactly_between_lines_stops_strict_mode(tmp_path, suffix):
    lines = b"".join(json.dumps({"text": f"document number {i}"}).encode() + b"\n" for i in range(3000))
    path = write(tmp_path, "cut" + suffix, cut_after(suffix, lines, len(lines)))
    docs, drops, events = tally(list(read_file("s", path, ReadConfig())))
    assert len(docs) == 3000 and not drops and events == {"truncated_stream": 1}
    with pytest.raises(PrepError, match=rf"cut{suffix.replace('.', '[.]')}:3001: truncated stream"):
        list(read_file("s", path, ReadConfig(strict=True)))


@pytest.mark.parametrize("suffix", [".txt.gz", ".txt.zst"])
@pytest.mark.parametrize("mode", ["document", "paragraph"])
def test_a_cut_txt_keeps_what_decoded(tmp_path, suffix, mode):
    paragraphs = [f"Παράγραφος {i}, πρώτη γραμμή.\nΔεύτερη γραμμή {i}." for i in range(400)]
    data = ("\n\n".join(paragraphs) + "\n").encode()
    k = len(data) // 2
    while data[k] & 0xC0 != 0x80:  # cut inside a two-byte Greek letter, not between characters
        k += 1
    path = write(tmp_path, "book" + suffix, cut_after(suffix, data, k))
    docs, drops, events = tally(list(read_file("s", path, ReadConfig(txt_mode=mode))))
    decoded = data[: k - 1].decode()  # the letter's first byte is all that came of it: left out, no U+FFFD
    expected = [decoded] if mode == "document" else decoded.split("\n\n")
    assert [d.text for d in docs] == expected and len(expected[-1]) > 0
    assert not drops and events == {"truncated_stream": 1}
    with pytest.raises(PrepError, match=r"truncated stream"):
        list(read_file("s", path, ReadConfig(txt_mode=mode, strict=True)))
