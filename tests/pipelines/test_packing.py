"""RoBERTa's FULL-SENTENCES and DOC-SENTENCES packing (pure function): exact rows on a tiny example worked out by
hand, then the promises on 2,000 synthetic documents whose ids encode (document, sentence, position)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from pipelines.documents.packing import pack

SEP = 99
TINY = [
    [[1, 2, 3], [4, 5, 6]],
    [[7, 8]],  # fits after document 0's 6 ids without a separator, not with one: starts the next row
    [[9, 10, 11, 12, 13, 14, 15, 16, 17, 18]],  # 10 ids > budget 8: cut into 9..16 and 17, 18
    [[19], [20, 21, 22, 23, 24, 25]],
    [[26]],  # 6 + separator + 1 = 8: exactly the budget
]


def packed(documents, *, budget: int, separator: int | None) -> tuple[list[tuple[list[int], int]], Counter]:
    stats = Counter()
    rows = [(row.tokens, row.first_document) for row in pack(documents, budget=budget, separator=separator, stats=stats)]
    return rows, stats


def test_full_sentences_cross_documents_with_a_separator_between_them():
    rows, stats = packed(TINY, budget=8, separator=SEP)
    assert rows == [
        ([1, 2, 3, 4, 5, 6], 0),
        ([7, 8], 1),
        ([9, 10, 11, 12, 13, 14, 15, 16], 2),
        ([17, 18, SEP, 19], 2),
        ([20, 21, 22, 23, 24, 25, SEP, 26], 3),
    ]
    assert stats == {"rows": 5, "sentences": 7, "long_sentences": 1, "long_sentence_pieces": 2, "document_separators": 2}


def test_doc_sentences_end_a_row_with_its_document():
    rows, stats = packed(TINY, budget=8, separator=None)
    assert rows == [
        ([1, 2, 3, 4, 5, 6], 0),
        ([7, 8], 1),
        ([9, 10, 11, 12, 13, 14, 15, 16], 2),
        ([17, 18], 2),
        ([19, 20, 21, 22, 23, 24, 25], 3),
        ([26], 4),
    ]
    assert stats == {"rows": 6, "sentences": 7, "long_sentences": 1, "long_sentence_pieces": 2}


def test_a_budget_without_room_for_a_separator_and_a_token_is_refused():
    with pytest.raises(ValueError, match="budget must be >= 2"):
        list(pack(TINY, budget=1, separator=SEP, stats=Counter()))


BUDGET = 30
"""Sentences of 1-44 ids against rows of 30: about one sentence in three is cut."""


def synthetic_documents(n_docs: int = 2000, seed: int = 0) -> list[list[list[int]]]:
    """id = 1 + d * 10_000 + s * 100 + t (t < 44, so an id never equals SEP and reads back as (d, s, t))."""
    rng = np.random.default_rng(seed)
    return [[[1 + d * 10_000 + s * 100 + t for t in range(int(rng.integers(1, 45)))] for s in range(int(rng.integers(1, 12)))]
            for d in range(n_docs)]


def where(token: int) -> tuple[int, int, int]:
    return (token - 1) // 10_000, (token - 1) // 100 % 100, (token - 1) % 100


@pytest.fixture(scope="module", params=["full-sentences", "doc-sentences"])
def made(request):
    docs = synthetic_documents()
    separator = SEP if request.param == "full-sentences" else None
    rows, stats = packed(docs, budget=BUDGET, separator=separator)
    return docs, separator, rows, stats


def test_every_id_of_every_sentence_appears_once_in_order_and_no_row_is_over_the_budget(made):
    docs, _, rows, _ = made
    assert all(0 < len(row) <= BUDGET for row, _ in rows)
    assert [t for row, _ in rows for t in row if t != SEP] == [t for doc in docs for sentence in doc for t in sentence]


def test_separators_stand_exactly_where_two_documents_meet_inside_a_row(made):
    docs, separator, rows, _ = made
    seen = 0
    for row, first in rows:
        assert where(row[0])[0] == first and row[0] != SEP and row[-1] != SEP
        for before, after in zip(row, row[1:]):
            if SEP in (before, after):
                continue
            assert where(before)[0] == where(after)[0], row  # documents change only across a separator
        for i, token in enumerate(row):
            if token == SEP:
                seen += 1
                assert separator == SEP and where(row[i + 1])[0] == where(row[i - 1])[0] + 1 and where(row[i + 1])[1:] == (0, 0)
    # every boundary between two documents is a separator inside a row or a row's start, never both
    starts = sum(1 for row, _ in rows if where(row[0])[1:] == (0, 0) and where(row[0])[0] > 0)
    assert seen + starts == len(docs) - 1 and (seen > 0 if separator is not None else seen == 0)


def test_a_row_ends_only_where_the_next_piece_does_not_fit(made):
    """Greedy: the next row's first piece (a sentence, or the next budget-long part of a cut one), with a separator
    when it starts a document, would have made the row too long, unless (DOC-SENTENCES) its document ended."""
    docs, separator, rows, _ = made
    for (row, _), (following, _) in zip(rows, rows[1:]):
        d, s, t = where(following[0])
        new_document = where(row[-1])[0] != d
        if new_document and separator is None:
            continue
        piece = min(len(docs[d][s]) - t, BUDGET)
        assert len(row) + piece + new_document > BUDGET, (row, following)


def test_the_counts_say_what_happened(made):
    docs, _, rows, stats = made
    sentences = [s for doc in docs for s in doc]
    long = [s for s in sentences if len(s) > BUDGET]
    assert stats["rows"] == len(rows) and stats["sentences"] == len(sentences)
    assert stats["long_sentences"] == len(long) > 500
    assert stats["long_sentence_pieces"] == sum(math.ceil(len(s) / BUDGET) for s in long)
    assert stats["document_separators"] == sum(row.count(SEP) for row, _ in rows)
