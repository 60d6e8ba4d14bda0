"""XLM's translation pairs as rows (Lample & Conneau 2019, TLM): a translation pair's two tokenized sides → one
tlm_pairs row (schemas/pairs.py), truncated to fit, or the reason it makes none (no Beam import).

In:  a Pair (pipelines/documents/parallel.py: cleaned and deduplicated), its two sides' ids, the id budget
     (--max-seq-len less the three special tokens the trainer adds: [CLS] A [SEP] B [SEP]).
Out: `tlm_row` → a TlmRow (both sides' ids, their languages, the direction, where the pair was read, how many ids
     truncation cut) or a drop reason; `pair_unit` the string a pair's split and shuffle keys are drawn from.

Truncation is BERT's truncate_seq_pair (create_pretraining_data.py) made deterministic: while the pair is over
the budget, the longer side loses one id, the second side (B) when both are as long, and always from its end.
NOTE: BERT cuts the front or the back by a coin, so that the model sees both ends of long NSP segments; a
translation pair is one sentence a side, whose end is cut only when it is too long for the model at all, and a
row that depends on no coin is the same whatever reads the pair first.

Why a pair makes no row (each a counted reason, in report.json's `pairs` per split):
- `no_tokens`: a side encodes to no id at all: text the vocabulary's normalisation removes whole (control and
  format characters such as U+200B; an uncased vocabulary's accent stripping of a side made of combining marks).
  An [UNK] is an id, so a side in a script the vocabulary lacks still makes a row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pipelines.documents.parallel import pair_key
from pipelines.documents.records import Pair
from schemas.pairs import TLM_PAIRS

DROP_REASONS = ("no_tokens",)


@dataclasses.dataclass(frozen=True)
class TlmRow:
    tokens_a: list[int]
    tokens_b: list[int]
    language_a: str
    language_b: str
    source: str
    """The pair's direction, `en-de` (Pair.languages)."""
    doc_id: str
    """Where the pair was read: `path:line`."""
    cut: int
    """Ids truncation removed (0 for a pair that fits)."""

    @property
    def num_tokens(self) -> int:
        return len(self.tokens_a) + len(self.tokens_b) + TLM_PAIRS.special_tokens


def truncate_pair(a: Sequence[int], b: Sequence[int], budget: int) -> tuple[list[int], list[int]]:
    """`a` and `b` cut to at most `budget` ids together: the longer loses its last id until they fit (`b` on a tie).
    A side is never cut below one id when `budget` >= 2."""
    a, b = list(a), list(b)
    excess = len(a) + len(b) - budget
    if excess <= 0:
        return a, b
    # BERT's one-id-at-a-time loop in closed form: the longer side first comes down to the shorter's length, then
    # the two take turns, b first (a tie cuts b)
    longer_a = len(a) > len(b)
    long_, short = (a, b) if longer_a else (b, a)
    down = min(excess, len(long_) - len(short))
    del long_[len(long_) - down:]
    excess -= down
    if excess > 0:  # now as long as each other: b loses the odd id, then they lose one each
        b_cut, a_cut = (excess + 1) // 2, excess // 2
        del b[len(b) - b_cut:]
        del a[len(a) - a_cut:]
    return a, b


def pair_unit(pair: Pair) -> str:
    """What a pair's validation coin and shuffle key are drawn from: its direction and text (pair_key), so a pair's split
    and place do not depend on where its file lies, and a pair stays in its split when the corpus around it changes."""
    return pair_key(pair)


def tlm_row(pair: Pair, ids_a: Sequence[int], ids_b: Sequence[int], budget: int) -> TlmRow | str:
    """The pair's row, its sides truncated to `budget` ids together, or the reason it makes none."""
    if not ids_a or not ids_b:
        return "no_tokens"
    a, b = truncate_pair(ids_a, ids_b, budget)
    return TlmRow(a, b, pair.source_language, pair.target_language, pair.languages, f"{pair.path}:{pair.line}",
                  cut=len(ids_a) + len(ids_b) - len(a) - len(b))
