"""manifest.json: the table of contents of a pairs/ directory.

Prep writes it last (after every shard is renamed into place), so a directory with a manifest is complete.
The trainer reads nothing else to find its data: shard names, row counts, byte sizes, sha256 checksums,
the vocabulary's fingerprint and the special-token ids all come from here.

Format version 2 fields
  format_version   int, 2
  tokenizer        "wordpiece", "bpe" or "unigram" (schemas/tokenizer_formats.py): the kind of the vocabulary
  vocab            {"file": "vocab.txt" (relative to the manifest), "sha256", "size", "lowercase"}
  special_tokens   that tokenizer's special tokens and their ids: {"[PAD]": 0, "[UNK]": .., "[CLS]": .., "[SEP]": ..,
                   "[MASK]": ..} for wordpiece, {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": ..} for bpe
                   and unigram; `Manifest.special_id("mask_token")` asks by transformers' role, whatever the kind
  max_seq_len      int, the longest row incl. its special tokens ([CLS] A [SEP] B [SEP] in a pair, <s> ... </s> or
                   [CLS] ... [SEP] in a packed row)
  shards           [{"path", "split", "rows", "bytes", "sha256", "source_rows": {name: rows}}]
  splits           {"train": rows, "validation": rows}
  sources          {name: rows}, over all splits
  packing          {"mode": "nsp" | "full-sentences" | "doc-sentences" | "tlm", "row_format": the shards' kind,
                   "format_version": theirs (schemas/pairs.py), "separator": {"token", "id"} of the document separator
                   inside a full-sentences row (absent for the others, whose rows hold one document each),
                   "languages": the sorted language codes of a tlm run's rows (tlm only)}
  seed, config     what produced the data (free-form, for the record)

A manifest read from disk is checked field by field before use (schemas/manifest_checks.py `check_body`: types,
ranges, one line naming the field), and the paths in it must stay where the run lives: a shard inside the manifest's
directory, the vocabulary files inside the prep output around it (pairs/../vocab/); no absolute path, no
URL, no `..` beyond that. `missing_shards` checks that the shards are there with their sizes (one listing
of the directory, also on gs:// and s3://); `mixing_conflict` says whether two manifests' rows can go into one
training run.

Change log
  1  the fields above but `tokenizer` and `packing`; special_tokens always BERT's five. Still read: as tokenizer
     "wordpiece", packing nsp (the only rows version 1 knew).
  2  `tokenizer` (byte-level BPE and Unigram vocabularies beside WordPiece) and `packing` (RoBERTa's packed rows
     beside NSP pairs), both of issue 43.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
from typing import Any

from schemas import vocab as vocab_files
from schemas.errors import ContractError
from schemas.jsonl import file_object
from schemas.manifest_checks import check_body
from schemas.pairs import PACKED_ROWS, PACKINGS, ROW_FORMATS, TLM_PAIRS, RowFormat
from schemas.tokenizer_formats import TOKENIZER_FORMATS, format_named

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Versions this clozeforge reads (change log in the module docstring); it writes MANIFEST_FORMAT_VERSION."""
NSP_PACKING = {"mode": "nsp", "row_format": PACKINGS["nsp"].row_format.kind, "format_version": PACKINGS["nsp"].row_format.version}
"""The packing of a manifest that records none (version 1)."""


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    path: str
    """File name relative to the manifest's directory."""
    split: str
    """'train' or 'validation'."""
    rows: int
    bytes: int
    sha256: str
    source_rows: dict[str, int] = dataclasses.field(default_factory=dict)
    """Rows per named input, so the trainer can weight sources without opening the shard."""


@dataclasses.dataclass(frozen=True)
class Manifest:
    vocab: dict[str, Any]
    special_tokens: dict[str, int]
    max_seq_len: int
    shards: tuple[ShardInfo, ...]
    seed: int = 0
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    packing: dict[str, Any] = dataclasses.field(default_factory=lambda: dict(NSP_PACKING))
    """How the rows were made (the module docstring); `row_format` and `separator_id` read it."""
    tokenizer: str = "wordpiece"
    """The vocabulary's kind (schemas/tokenizer_formats.py): which special tokens and word marks it has."""
    format_version: int = MANIFEST_FORMAT_VERSION
    url: str = dataclasses.field(default="", compare=False)
    """Where this manifest was read from (empty when built in memory)."""

    def __post_init__(self) -> None:
        missing = [t for t in format_named(self.tokenizer, f"{self.url or 'manifest'}: tokenizer").special_tokens
                   if t not in self.special_tokens]
        if missing:
            raise ContractError(f"{self.url or 'manifest'}: special_tokens lacks {missing}")
        for key in ("file", "sha256", "size", "lowercase"):
            if key not in self.vocab:
                raise ContractError(f"{self.url or 'manifest'}: vocab lacks {key!r}")

    # -- derived views -------------------------------------------------------------------------
    def special_id(self, role: str) -> int:
        """The id of the special token transformers calls `role` ("pad_token", "mask_token", "cls_token", ...)."""
        roles = TOKENIZER_FORMATS[self.tokenizer].roles
        if role not in roles:
            raise ContractError(f"{self.url or 'manifest'}: a {self.tokenizer} vocabulary has no {role} (it has {', '.join(roles)})")
        return self.special_tokens[roles[role]]

    def split_shards(self, split: str) -> tuple[ShardInfo, ...]:
        return tuple(s for s in self.shards if s.split == split)

    @property
    def splits(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.shards:
            out[s.split] = out.get(s.split, 0) + s.rows
        return out

    @property
    def sources(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.shards:
            for name, rows in s.source_rows.items():
                out[name] = out.get(name, 0) + rows
        return dict(sorted(out.items()))

    @property
    def row_format(self) -> RowFormat:
        """The format of this manifest's shards (validate_pairs_schema(schema, where, manifest.row_format.kind))."""
        return ROW_FORMATS[self.packing["row_format"]]

    @property
    def separator_id(self) -> int | None:
        """The id that separates two documents inside a packed row (None for NSP pairs)."""
        separator = self.packing.get("separator")
        return separator["id"] if separator else None

    @property
    def directory(self) -> str:
        return posixpath.dirname(self.url) if self.url else ""

    def resolve(self, relative: str) -> str:
        """URL of a file named relative to the manifest (a shard or the vocabulary)."""
        if not self.directory:
            return relative
        protocol, sep, path = self.directory.rpartition("://")
        joined = posixpath.normpath(posixpath.join(path, relative))  # "pairs/../vocab" -> "vocab", for object stores too
        return f"{protocol}{sep}{joined}"

    @property
    def vocab_directory(self) -> str:
        """URL of the vocabulary directory the manifest names (schemas/vocab.py)."""
        return posixpath.dirname(self.resolve(self.vocab["file"]))

    def read_vocab_tokens(self) -> list[str]:
        """The vocabulary's tokens, checked against the manifest's sha256 and size."""
        return vocab_files.read_tokens(self.vocab_directory, sha256=self.vocab["sha256"], size=self.vocab["size"])

    def read_word_boundary(self):
        """How the vocabulary's tokens mark words (schemas/tokenizer_formats.py's WordBoundary: '##' continues a word,
        'Ġ' and '▁' start one), from its vocab_config.json, else the tokenizer kind's; whole-word masking reads it."""
        from schemas.tokenizer_formats import word_boundary

        return word_boundary(self.vocab_directory)

    def read_token_counts(self) -> list[int]:
        """How often each id occurs in the encoded corpus (for unigram sampling of random tokens)."""
        name = self.vocab.get("token_counts")
        if not name:
            raise ContractError(f"{self.url}: no token_counts file recorded; use --random-token-dist uniform")
        return vocab_files.read_token_counts(self.resolve(name), self.vocab["size"])

    @property
    def fingerprint(self) -> str:
        """sha256 over the shard checksums and vocabulary: identifies the data a run was trained on."""
        h = hashlib.sha256(self.vocab["sha256"].encode())
        for s in self.shards:
            h.update(f"{s.path}:{s.sha256}".encode())
        return h.hexdigest()

    # -- (de)serialisation ---------------------------------------------------------------------
    def to_json(self) -> str:
        body = {
            "format_version": self.format_version,
            "tokenizer": self.tokenizer,
            "vocab": self.vocab,
            "special_tokens": self.special_tokens,
            "max_seq_len": self.max_seq_len,
            "splits": self.splits,
            "sources": self.sources,
            "shards": [dataclasses.asdict(s) for s in self.shards],
            "seed": self.seed,
            "config": self.config,
            "packing": self.packing,
        }
        return json.dumps(body, indent=2, sort_keys=True) + "\n"

    def write(self, directory: str) -> str:
        """Write manifest.json into `directory` atomically (temp name, then rename). Returns its URL."""
        import fsspec  # NOTE: imported where I/O happens, so importing schemas needs only pyarrow + stdlib

        url = posixpath.join(directory, MANIFEST_NAME)
        fs, path = fsspec.core.url_to_fs(url)
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with fs.open(tmp, "w") as f:
            f.write(self.to_json())
        fs.mv(tmp, path)
        return url

    @classmethod
    def read(cls, url: str) -> Manifest:
        """Read and validate a manifest. `url` is the file or the directory holding it."""
        import fsspec

        if not url.endswith(".json"):
            url = posixpath.join(url.rstrip("/"), MANIFEST_NAME)
        try:
            with fsspec.open(url, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise ContractError(f"{url}: no manifest here (is this the pairs/ directory of a finished prep run?)") from None
        return cls.from_dict(file_object(raw, url, ContractError), url)

    @classmethod
    def from_dict(cls, body: dict[str, Any], url: str = "") -> Manifest:
        where = url or "manifest"
        version = body.get("format_version") if isinstance(body, dict) else None
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise ContractError(f"{where}: manifest format_version {version!r}, this clozeforge reads "
                                f"{', '.join(map(str, READABLE_VERSIONS))}")
        check_body(body, where)
        try:
            shards = tuple(ShardInfo(**s) for s in body["shards"])
            manifest = cls(
                vocab=body["vocab"],
                special_tokens=body["special_tokens"],
                max_seq_len=int(body["max_seq_len"]),
                shards=shards,
                seed=body.get("seed", 0),
                config=body.get("config", {}),
                packing=dict(body.get("packing", NSP_PACKING)),
                tokenizer=body.get("tokenizer", "wordpiece"),
                format_version=version,
                url=url,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ContractError(f"{where}: malformed manifest ({type(e).__name__}: {e})") from None
        for split, rows in body.get("splits", {}).items():
            if manifest.splits.get(split, 0) != rows:
                raise ContractError(f"{where}: split {split!r} says {rows} rows, its shards hold {manifest.splits.get(split, 0)}")
        return manifest


_KIND_WORDS = {"nsp_pairs": "NSP pairs", "packed_rows": "packed rows", "tlm_pairs": "translation pairs"}
_MIX_WITH = {TLM_PAIRS.kind: PACKED_ROWS.kind, PACKED_ROWS.kind: TLM_PAIRS.kind}
"""Row formats that mix although they differ: XLM trains translation pairs (TLM) beside monolingual packed rows (MLM),
one component a step (trainer/data/mixture.py); both batches have the same tensors."""


def _describe(manifest: Manifest) -> str:
    kind = _KIND_WORDS[manifest.row_format.kind]
    return f"{kind} (--packing {manifest.packing['mode']}, {manifest.row_format.kind} v{manifest.packing['format_version']})"


def mixing_conflict(first: Manifest, second: Manifest) -> str | None:
    """None when the rows of `first` and `second` can go into one training run; else why not, in one line.

    Rows mix when they have one row format (kind and version): NSP pairs (two segments and a label, for an NSP
    head) never mix with packed rows (one segment, no label). Translation pairs (TLM) mix with packed rows (XLM's
    MLM + TLM), one component a step. FULL-SENTENCES and DOC-SENTENCES rows mix (the same
    format; only where a row may end differs), as two FULL-SENTENCES runs do if they separate documents with the
    same token. That both use the
    same vocabulary is the caller's check (trainer/data/mixture.py makes it)."""
    a, b = first.packing, second.packing
    if _MIX_WITH.get(a["row_format"]) == b["row_format"]:
        return None
    if (a["row_format"], a["format_version"]) != (b["row_format"], b["format_version"]):
        return (f"{second.url or 'the second manifest'} holds {_describe(second)}, {first.url or 'the first'} holds "
                f"{_describe(first)}: one training run reads one row format")
    if a.get("separator") and b.get("separator") and a["separator"] != b["separator"]:
        return (f"{second.url or 'the second manifest'} separates documents with {b.get('separator')}, {first.url or 'the first'} "
                f"with {a.get('separator')}")
    return None


def missing_shards(manifest: Manifest, shards: tuple[ShardInfo, ...] | None = None) -> list[str]:
    """What is wrong with the files of `shards` (default: all), by one listing of the manifest's directory
    (a LIST request on an object store, not one request per shard): missing, or another size than listed."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(manifest.directory or ".")
    try:
        sizes = {posixpath.relpath(info["name"], fs._strip_protocol(root)): info.get("size")
                 for info in fs.find(root, detail=True).values()}
    except FileNotFoundError:
        sizes = {}
    problems = []
    for shard in manifest.shards if shards is None else shards:
        size = sizes.get(posixpath.normpath(shard.path))
        if size is None:
            problems.append(f"{shard.path} is missing")
        elif size != shard.bytes:
            problems.append(f"{shard.path} has {size} bytes, the manifest says {shard.bytes}")
    return problems


def file_sha256(url: str, chunk: int = 1 << 20) -> str:
    import fsspec

    h = hashlib.sha256()
    with fsspec.open(url, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
