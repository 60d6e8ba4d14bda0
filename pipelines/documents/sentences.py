"""Rule-based sentence splitter for pre-training text (no model, no heavy dependency).

In:  a document's text, normalized or not (`pipelines.documents.normalize` output is the usual input).
Out: `split_sentences(text) -> list[str]`: the sentences in order, stripped and non-empty. A line break
     inside a sentence (a hard-wrapped line) becomes one space; no other character is added, removed or
     reordered, so the non-whitespace characters of the output, concatenated, equal those of the input.

How it decides, in three layers:
  1. Paragraphs (a blank line) always end a sentence.
  2. Inside a paragraph, a single line break ends a sentence when the layout says so: the next line starts
     a list item (`- `, `* `, `• `, `1. `, `a) `, `iv. `, `>>> `), the line ends with `:`, the line is a
     rule (`-----`), the next line is indented deeper (a definition list), or the line is short compared
     with the paragraph's longest line and the next line does not start in lower case (a heading, an
     address line). Other line breaks are wrapped prose and are read like a space.
  3. Inside that, each run of terminal punctuation (`. ! ? … ‽ । ॥ ؟ ۔ ። ፧ ։ ။`, CJK `。！？｡`),
     with the closing quotes and brackets after it, is a candidate; a candidate not followed by white space (3.14,
     example.com, foo.py, v1.2.3, john@x.org) is never one. A candidate ends a sentence unless the next
     word starts in lower case, or the word before a period is an abbreviation (Mr., e.g., Fig. 3, U.S. +
     a non-sentence-starter), an initial (J. R. R. Tolkien) or a list number at the line start. After a
     line break the lower-case test is dropped, since a wrapped docstring's next item often starts lower
     case (`a: the first.` / `b: the second.`). CJK full stops need no space after them.

Its accuracy on the hand-written cases of tests/assets/sentences_golden.jsonl and its speed, against pysbd
and spaCy's sentencizer, come from `python bench/run.py clean` (bench/README.md).
"""

from __future__ import annotations

import re

# Never the end of a sentence, whatever follows (titles before a name, Latin connectives).
_NEVER_END = frozenset(
    "Mr Mrs Ms Messrs Mme Mlle Dr Prof Rev Hon St Mt Ft Gen Col Capt Lt Sgt Cpl Maj Adm Gov Sen Rep Pres Supt"
    " vs v cf viz al approx Approx ca resp incl esp e.g i.e E.g I.e eg ie".split()
)
# Not the end when a number follows ("Fig. 3", "No. 5", "pp. 45", "Jan. 5"); the end otherwise.
_BEFORE_NUMBER = frozenset(
    "No Nos no nos Fig Figs fig figs Eq Eqs eq eqs Vol Vols vol vols p pp Ch ch Sec sec Art art Ref Refs ref"
    " Tab tab Nr nr Op op Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec".split()
)
# Abbreviations that may end a sentence: the end only before a capital, or after a line break if not these.
_MAY_END = frozenset("etc Inc Ltd Co Corp Jr Sr Esq Bros Ph.D M.Sc B.Sc M.A B.A".split())
# After a dotted abbreviation (U.S., a.m.), a new sentence is assumed only before one of these words:
# "the U.S. Army" goes on, "the U.S. He ..." ends. A word list, because capitalization cannot tell.
_STARTERS = frozenset(
    "The A An He She It They We I You This That These Those There Then But And However In On At If When"
    " After Before Our His Her Its Their My Your So As For Some Many Most All Each Every What Why How Who"
    " Where Today Yesterday Tomorrow Now Also Yet Still Thus Hence Therefore".split()
)

# Words a line cannot end on when it is a heading or a finished sentence: the next line continues it.
_CONTINUES = frozenset("a an the of to in on at by for with from into and or but nor as than that which".split())

_PARAGRAPH_RE = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_LIST_ITEM_RE = re.compile(
    r"(?:[-*•‣◦●▪–+]|\d{1,3}[.)]|[A-Za-z][.)]|[ivxlcdm]{1,6}[.)]|\(\w{1,3}\)|>>>)(?:\s|$)"
)
_LETTER_DOT_RE = re.compile(r"[A-Za-z]\.\s")
_RULE_LINE_RE = re.compile(r"[-=~*_#+.]{3,}\s*$")
_LIST_MARK_WORD_RE = re.compile(r"\(?(?:\d{1,3}|[A-Za-z]|[ivxlcdm]{1,6})$")
_DOTTED_ABBREV_RE = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]$")
# A candidate: terminal punctuation, then closing quotes/brackets; group 1 is the punctuation run.
# Western marks need white space after them; CJK full stops (and a closer after them) do not.
_CLOSERS = "\"'”’»)\\]}›」』）】〕〉》"
# NOTE: the lookahead is only the two branches' first characters: with it the regex engine skips to the
# next mark with a character-set scan instead of trying both branches at every position (twice as fast).
_CANDIDATE_RE = re.compile(
    rf"(?=[.!?…‽।॥؟۔።፧։။。！？｡])(?:([.!?…‽।॥؟۔።፧։။]+)[{_CLOSERS}]*(\s+)|([。！？｡]+)[{_CLOSERS}]*\s*)"
)
_OPENERS = "\"'“‘«‹([{¿¡「『（【〔〈《*_`"
_LINE_END_PUNCT = tuple(".!?…。！？｡।॥؟۔።։")
_SHORT_LINE = 0.6
"""A line shorter than this fraction of its paragraph's longest line was ended on purpose, not wrapped."""


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences: stripped, non-empty, in order, with wrapped line breaks read as spaces."""
    sentences: list[str] = []
    for paragraph in _PARAGRAPH_RE.split(text):
        if "\n" in paragraph:
            for block in _layout_blocks(paragraph):
                _split_block(block, sentences)
        else:
            _split_block(paragraph, sentences)
    return sentences


def _layout_blocks(paragraph: str) -> list[str]:
    """Cut a paragraph at the line breaks its layout marks as ends; keep the others as '\\n' in a block."""
    raw_lines = [line.rstrip() for line in paragraph.split("\n")]
    raw_lines = [line for line in raw_lines if line]
    if not raw_lines:
        return []
    longest = max(len(line.strip()) for line in raw_lines)
    blocks: list[list[str]] = [[raw_lines[0].strip()]]
    in_list_item = bool(_LIST_ITEM_RE.match(blocks[0][0]))
    prev_raw = raw_lines[0]
    for raw in raw_lines[1:]:
        line = raw.strip()
        prev = blocks[-1][-1]
        if _is_hard_break(prev, prev_raw, line, raw, longest, in_list_item):
            blocks.append([line])
            in_list_item = bool(_LIST_ITEM_RE.match(line))
        else:
            blocks[-1].append(line)
        prev_raw = raw
    return ["\n".join(lines) for lines in blocks]


def _is_hard_break(prev: str, prev_raw: str, line: str, raw: str, longest: int, in_list_item: bool) -> bool:
    if _LIST_ITEM_RE.match(line):
        # "J. Smith wrote" at a line start is an initial, unless a list ("a. ...", "b. ...") is under way.
        if in_list_item or not _LETTER_DOT_RE.match(line):
            return True
    if prev.startswith(">>>"):
        return True
    if prev.endswith(":") or _RULE_LINE_RE.match(prev) or _RULE_LINE_RE.match(line):
        return True
    if prev.endswith(_LINE_END_PUNCT):
        return False  # the punctuation rules decide, with the line break as a hint
    starts_lower = line[0].islower()
    # NOTE: a deeper indent opens a nested block ("x : int\n    The value."), except in a wrapped list item.
    if not in_list_item and _indent(raw) > _indent(prev_raw):
        return True
    if prev.rsplit(" ", 1)[-1] in _CONTINUES:
        return False  # "written by\nJ. Smith": no heading or sentence ends on "by"
    return len(prev) < _SHORT_LINE * longest and not starts_lower


def _indent(raw: str) -> int:
    return len(raw) - len(raw.lstrip())


def _split_block(block: str, out: list[str]) -> None:
    """Append the sentences of one block (no blank line inside) to `out`."""
    start = 0
    for match in _CANDIDATE_RE.finditer(block):
        end = match.end()
        if end >= len(block):
            break  # the block's end is a boundary anyway
        if match.group(3) is not None:
            if not _cjk_ends(match, block, end):
                continue
        elif not _western_ends(match, block, start, end):
            continue
        _emit(block[start:end], out)
        start = end
    _emit(block[start:], out)


def _emit(piece: str, out: list[str]) -> None:
    piece = piece.strip()
    if piece:
        out.append(piece.replace("\n", " ") if "\n" in piece else piece)


def _cjk_ends(match: re.Match, block: str, end: int) -> bool:
    # 「行こう。」と言った: a closing quote followed by hiragana (a particle) continues the sentence.
    nxt = block[end]
    return not (match.end(3) < end and "\u3040" <= nxt <= "\u309f")


def _western_ends(match: re.Match, block: str, start: int, end: int) -> bool:
    punct = match.group(1)
    after_newline = "\n" in match.group(2)
    word = _next_word(block, end)
    first = word[:1]
    lower_next = first.islower() and not word[1:2].isupper()  # "iPhones" starts a sentence
    if punct[-1] != "." or punct.endswith(".."):
        # ! ? … and other scripts' full stops; "..." reads like "…".
        return not lower_next or after_newline
    previous = _previous_word(block, start, match.start(1))
    if not previous:
        return not lower_next
    if previous in _NEVER_END:
        return False
    if previous in _BEFORE_NUMBER and first.isdigit():
        return False
    if len(previous) == 1 and previous.isupper():
        return False  # an initial: "J. R. R. Tolkien", "John F. Kennedy"
    dotted = _DOTTED_ABBREV_RE.match(previous) is not None
    if dotted and previous not in _MAY_END:
        return word.rstrip(",;:") in _STARTERS
    if lower_next:
        return after_newline and not (previous in _MAY_END or previous in _BEFORE_NUMBER or len(previous) == 1)
    if _LIST_MARK_WORD_RE.match(previous) and block[start:match.start(1)].strip() == previous:
        return False  # "1. Install" / "iv. Methods" at a line start: the period is the list mark
    return True


def _previous_word(block: str, start: int, dot: int) -> str:
    """The word that the period ends, without its opening brackets or quotes ('(Acme Corp' -> 'Corp')."""
    space = max(block.rfind(" ", start, dot), block.rfind("\n", start, dot))
    return block[space + 1 : dot].lstrip(_OPENERS)


_NEXT_WORD_RE = re.compile(f"[{re.escape(_OPENERS)}]*(\\S*)")  # \S: what str.isspace() is not


def _next_word(block: str, end: int) -> str:
    """The next word, with its opening quotes and brackets skipped ('"Hello,' -> 'Hello,')."""
    return _NEXT_WORD_RE.match(block, end).group(1)
