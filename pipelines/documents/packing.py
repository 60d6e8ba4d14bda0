"""RoBERTa's packed inputs (Liu et al. 2019, §4.2), as a pure function over documents in their packing order.

In:  tokenized documents (sentences of ids) in the order they are packed, the length budget (max_seq_len minus
     the two special tokens the trainer adds around a row), and the document separator id, or None.
Out: PackedRow records (the row's ids, the index of the document it starts in, where each later document starts in
     it), in order, and the counts of what happened, added to the caller's Counter.

FULL-SENTENCES (a separator id): "each input is packed with full sentences sampled contiguously from one or more
documents, such that the total length is at most 512 tokens. Inputs may cross document boundaries. When we reach
the end of one document, we begin sampling sentences from the next document and add an extra separator token
between documents." A row is filled with whole sentences while the next one fits; at a document boundary inside a
row the separator comes first, and is counted in the budget (a sentence that fits only without it starts the next
row, which then starts with no separator: a separator is only ever *between* two documents' sentences).
DOC-SENTENCES (no separator): the same, but a row ends where its document ends, so a document's last row may be
short.

A sentence longer than the budget is cut into pieces of `budget` ids, in order (the last piece holds the rest),
and each piece is packed as a sentence would be: every id of every sentence appears exactly once, in order, and
no row is over the budget. Counted as `long_sentences` (sentences cut) and `long_sentence_pieces` (the pieces).
fairseq's TokenBlockDataset ('complete' mode) instead gives such a sentence a block of its own, longer than the
model takes, for the trainer to drop or truncate; here no id is lost and no row is too long.

Which documents come in which order, and that no row mixes two --input sources, is the caller's business
(pipelines/stages/make_packed_rows.py).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

Sentence = Sequence[int]


@dataclasses.dataclass(frozen=True)
class PackedRow:
    tokens: list[int]
    """The row's ids, separators included, without the two special tokens the trainer adds."""
    first_document: int
    """Index (in the input order) of the document the row starts in."""
    doc_starts: list[int] = dataclasses.field(default_factory=list)
    """Offsets in `tokens` of each later document's first token (just after its separator); empty for one document.
    What the trainer attends within (ModernBERT's per-document attention, schemas/pairs.py version 4)."""


def pieces(sentence: Sentence, budget: int, stats: Counter) -> Iterable[Sentence]:
    """`sentence` itself, or its consecutive `budget`-long pieces when it is longer than `budget` (counted)."""
    if len(sentence) <= budget:
        return (sentence,)
    stats["long_sentences"] += 1
    cut = [sentence[i : i + budget] for i in range(0, len(sentence), budget)]
    stats["long_sentence_pieces"] += len(cut)
    return cut


def pack(documents: Iterable[Sequence[Sentence]], *, budget: int, separator: int | None, stats: Counter) -> Iterator[PackedRow]:
    """Rows of at most `budget` ids from `documents`' sentences, in order: FULL-SENTENCES when `separator` is an id
    (rows cross document boundaries, the separator between two documents), DOC-SENTENCES when it is None (a row
    never crosses one). Counts `rows`, `sentences`, `document_separators` and the cuts into `stats`."""
    if budget < 2:
        raise ValueError(f"budget must be >= 2 ids, got {budget}")  # room for a separator and a token
    row: list[int] = []
    starts: list[int] = []
    first = 0
    for index, document in enumerate(documents):
        boundary = bool(row)  # a row is open as this document starts: its first sentence needs a separator
        for sentence in document:
            stats["sentences"] += 1
            for piece in pieces(sentence, budget, stats):
                need = len(piece) + boundary
                if row and len(row) + need > budget:
                    stats["rows"] += 1
                    yield PackedRow(row, first, starts)
                    row, starts, boundary = [], [], False
                if not row:
                    first = index
                elif boundary:
                    row.append(separator)
                    starts.append(len(row))
                    stats["document_separators"] += 1
                boundary = False
                row.extend(piece)
        if row and separator is None:  # DOC-SENTENCES: the document's last row ends with it
            stats["rows"] += 1
            yield PackedRow(row, first)
            row = []
    if row:
        stats["rows"] += 1
        yield PackedRow(row, first, starts)
