"""MakePackedRows: TokenizedDoc → packed single-segment rows (--packing full-sentences | doc-sentences).

Documents are split as MakeNspPairs splits them (the same seeded per-document coin, so a corpus holds out the
same documents whatever its packing) and put in a seeded, global random order: the order of their 64-bit key
keys.key64(seed, "bucket", doc_id), doc_id breaking a tie. A split's ceil(docs / --bucket-docs) buckets are
consecutive ranges of that order (GroupIntoRanges, through run files: nothing waits in memory for the count),
and a bucket, the unit of memory, is packed in that order by pipelines/documents/packing.py, one --input
source at a time, so a row never mixes two sources (the manifest counts rows per source, and the trainer
weights sources by them). A FULL-SENTENCES row may still cross into the next document of its source and bucket;
each bucket's and source's last row may be short, as every DOC-SENTENCES row at a document's end may be.

The document separator. Where two documents meet inside a FULL-SENTENCES row, the row holds the vocabulary's
separator id: the token tokenizer_config.json names `sep_token` ([SEP] for a WordPiece vocabulary, </s> for
RoBERTa's and XLM-R's), its id from tokenizer.json (`document_separator`: never a hard-coded id). The manifest
records it (`packing.separator`). NOTE: stored in the row, rather than as document offsets for the trainer to
fill in, because then a row *is* the ids the model reads between its two special tokens, as RoBERTa's rows are
(fairseq's: `</s>` between documents; transformers' RoBERTa pair: `<s> A </s></s> B </s>`): the collator adds
two tokens and pads, with no per-row list to expand, and any reader (inspect, a user's script) sees the text
as trained. The price: a reader that wants document boundaries looks for the separator id, and the trainer
must keep that id out of masking as it keeps its own [CLS]/[SEP] (Manifest.separator_id names it). Since pair format 4
each row also records where its later documents start (`doc_starts`, the offsets just after each separator), so the
trainer attends within documents (trainer/data/collate.py) without trusting that no text tokenizes to the separator.

In:  TokenizedDoc (Tokenize's), the vocabulary summary (a side input: its size fixes the id type, its directory
     holds the separator) and the corpus' document count (for the validation share).
Out: rows placed for WriteShards' global shuffle, (split, shuffle_key, row, ids) with `row` in the
     packed_rows schema's column order (schemas/pairs.py; ids as packed bytes of the id type) and `ids` its
     stored ids, and ((split, stat), count) sums on `stats`: docs, sentences, rows, row_tokens (Σ num_tokens,
     the two special tokens included), document_separators, long_sentences, long_sentence_pieces.
"""

from __future__ import annotations

import json
import math
import posixpath
from array import array
from collections import Counter
from itertools import groupby

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.documents import keys
from pipelines.documents.packing import pack
from pipelines.errors import PrepError
from pipelines.outputs.shards import ids_dtype
from pipelines.shuffle import GroupIntoRanges, Scratch
from pipelines.stages.accounting import NAMESPACE, SumPerKey
from pipelines.stages.make_nsp_pairs import _typecode, split_of, validation_share
from schemas.pairs import PACKED_ROWS, PACKINGS, TLM_PAIRS, Packing
from schemas.vocab import TOKENIZER_CONFIG_FILE, TOKENIZER_FILE


def document_separator(directory: str) -> dict:
    """{"token", "id"} of the vocabulary's separator: tokenizer_config.json's `sep_token` (a string, or an
    AddedToken's {"content": ...} as older transformers wrote it), its id from tokenizer.json's added tokens
    (else its model's vocabulary); a PrepError naming the file when either says nothing of it."""
    import fsspec

    def read(name: str) -> dict:
        url = posixpath.join(directory.rstrip("/"), name)
        try:
            with fsspec.open(url, "rb") as f:
                return json.loads(f.read())
        except (OSError, ValueError) as e:
            raise PrepError(f"{url}: cannot read the vocabulary's separator token ({type(e).__name__}: {e})") from None

    config_url = posixpath.join(directory.rstrip("/"), TOKENIZER_CONFIG_FILE)
    token = read(TOKENIZER_CONFIG_FILE).get("sep_token")
    token = token.get("content") if isinstance(token, dict) else token
    if not isinstance(token, str) or not token:
        raise PrepError(f"{config_url}: names no sep_token, which --packing full-sentences puts between documents")
    body = read(TOKENIZER_FILE)
    ids = [t.get("id") for t in body.get("added_tokens") or [] if t.get("content") == token]
    vocab = (body.get("model") or {}).get("vocab")
    if not ids and isinstance(vocab, dict):
        ids = [vocab.get(token)]
    elif not ids and isinstance(vocab, list):  # Unigram: [[piece, score], ...], id = index
        ids = [i for i, entry in enumerate(vocab) if entry and entry[0] == token]
    if not ids or not isinstance(ids[0], int):
        raise PrepError(f"{posixpath.join(directory.rstrip('/'), TOKENIZER_FILE)}: no id for the separator {token!r}")
    return {"token": token, "id": ids[0]}


def packing_record(name: str, vocab_directory: str, languages: list[str] | None = None) -> dict:
    """The manifest's `packing` for --packing `name` (schemas/manifest.py): the mode, its row format and version,
    for a packing whose rows cross documents the separator between them, and for translation pairs (tlm) the
    sorted language codes of the rows (`languages`)."""
    packing = PACKINGS[name]
    record = {"mode": name, "row_format": packing.row_format.kind, "format_version": packing.row_format.version}
    if packing.crosses_documents:
        record["separator"] = document_separator(vocab_directory)
    if packing.row_format == TLM_PAIRS:
        record["languages"] = sorted(set(languages or ()))
    return record


class BucketRows:
    """GroupBuckets' consumer: (split, index, count) and the bucket's TokenizedDocs → placed rows (split,
    shuffle_key, row, ids), then the bucket's ((split, stat), count) sums, tagged `stats`."""

    def __init__(self, *, max_seq_len: int, packing: Packing, seed: int):
        self.budget = max_seq_len - PACKED_ROWS.special_tokens
        self.packing, self.seed = packing, seed
        self._separator: tuple[str, int | None] = ("", None)  # (vocabulary sha256, separator id)

    def separator(self, vocab: dict) -> int | None:
        if not self.packing.crosses_documents:
            return None
        if self._separator[0] != vocab["sha256"]:
            self._separator = (vocab["sha256"], document_separator(vocab["directory"])["id"])
        return self._separator[1]

    def __call__(self, work: tuple[str, int, int], docs, vocab: dict):
        split, seed = work[0], self.seed
        typecode = _typecode(ids_dtype(vocab["size"]))
        separator = self.separator(vocab)
        docs = sorted(docs, key=lambda d: (d.source, keys.key64(seed, "bucket", d.doc_id), d.doc_id))
        stats = Counter({"docs": len(docs)})
        for _, group in groupby(docs, key=lambda d: d.source):
            group = list(group)
            started: Counter = Counter()  # rows started per document, for a shuffle key unique to each row
            for row in pack((d.sentences for d in group), budget=self.budget, separator=separator, stats=stats):
                doc = group[row.first_document]
                num_tokens = len(row.tokens) + PACKED_ROWS.special_tokens
                stats["row_tokens"] += num_tokens
                key = keys.key64(seed, "shuffle", f"{doc.doc_id}:packed:{started[doc.doc_id]}")
                started[doc.doc_id] += 1
                packed = (array(typecode, row.tokens).tobytes(), num_tokens, row.doc_starts, doc.source, doc.doc_id)
                yield split, key, packed, len(row.tokens)
        for name, count in stats.items():
            if name != "docs":
                Metrics.counter(NAMESPACE, f"packed_{name}").inc(count)
            yield beam.pvalue.TaggedOutput("stats", ((split, name), count))


class MakePackedRows(beam.PTransform):
    """TokenizedDoc → placed packed rows (main; see the module docstring) and ((split, stat), count) sums (`stats`)."""

    def __init__(self, packing: Packing, *, max_seq_len: int, bucket_docs: int, validation_fraction: float, seed: int,
                 vocab, scratch: Scratch | None = None, validation_min_docs: int = 0, doc_count=None):
        super().__init__()
        if packing.row_format != PACKED_ROWS:
            raise ValueError(f"--packing {packing.name} does not write packed rows")
        self.packing, self.max_seq_len, self.seed = packing, max_seq_len, seed
        self.bucket_docs, self.validation_fraction, self.validation_min_docs = bucket_docs, validation_fraction, validation_min_docs
        self.vocab, self.scratch, self.doc_count = vocab, scratch, doc_count

    def expand(self, tokenized):
        seed, fraction, per_bucket, min_docs = self.seed, self.validation_fraction, self.bucket_docs, self.validation_min_docs
        p = tokenized.pipeline
        doc_count = self.doc_count if self.doc_count is not None else p | "NoDocCount" >> beam.Create([0])

        def assign(d, docs):
            share = validation_share(fraction, min_docs, docs)
            return split_of(d.doc_id, seed, share), keys.key64(seed, "bucket", d.doc_id), d, 1

        rows = BucketRows(max_seq_len=self.max_seq_len, packing=self.packing, seed=seed)
        made = (
            tokenized
            | "AssignSplit" >> beam.Map(assign, beam.pvalue.AsSingleton(doc_count))
            | "GroupBuckets" >> GroupIntoRanges(
                self.scratch, lambda split, docs, _, __: max(1, math.ceil(docs / per_bucket)),
                beam.pvalue.AsSingleton(self.vocab), consume=rows, tags=("stats",))
        )
        stats = made["stats"] | "SumRowStats" >> SumPerKey(tuple[str, str])  # ((split, name), count)
        return {"pairs": made["main"], "stats": stats}
