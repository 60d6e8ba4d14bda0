"""pack() records where each later document of a row starts (pair format 4's `doc_starts`): just after the separator,
in both of its separator cases (a document that starts a row has none), and never in DOC-SENTENCES rows."""

from __future__ import annotations

from collections import Counter

from pipelines.documents.packing import pack

SEP = 99


def test_a_row_records_the_start_of_each_document_after_its_first():
    documents = [[[1, 2, 3]], [[4, 5], [6]], [[7, 8, 9, 10]], [[11]]]
    rows = list(pack(documents, budget=8, separator=SEP, stats=Counter()))
    assert [(r.tokens, r.doc_starts) for r in rows] == [
        ([1, 2, 3, SEP, 4, 5, 6], [4]),  # document 1 starts after the separator
        ([7, 8, 9, 10, SEP, 11], [5]),  # document 2 starts the row: no boundary recorded for it
    ]
    assert all(r.doc_starts == [] for r in pack(documents, budget=8, separator=None, stats=Counter()))
