"""The sentence splitter against the hand-written golden set, plus invariants that hold for any text."""

import collections
import json
import pathlib

import pytest

from pipelines.documents.builtin_corpus import iter_documents
from pipelines.documents.sentences import split_sentences

GOLDEN = pathlib.Path(__file__).parents[1] / "assets" / "sentences_golden.jsonl"
MIN_ACCURACY = 0.95
"""Share of golden cases split exactly right. Rule-based splitters score 95-99% on golden sets of this
kind (pysbd reports 97.9% on its English Golden Rules); at 137 cases, 95% allows 6 misses, room for the
known one (a German ordinal, "am 3. Oktober") and a few more, not for a broken rule family."""
MIN_CATEGORY_ACCURACY = 0.8
"""Per category (5 to 34 cases each): a small category cannot fail wholesale inside the global margin."""


def load_golden() -> list[dict]:
    with GOLDEN.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_golden_set_is_well_formed():
    cases = load_golden()
    assert len(cases) >= 80
    categories = collections.Counter(c["category"] for c in cases)
    expected = {"plain", "abbreviation", "number", "initials", "quote_bracket", "ellipsis", "list",
                "url_file_version", "non_english", "layout"}
    assert set(categories) == expected
    assert min(categories.values()) >= 5
    for case in cases:
        assert all(s == s.strip() and s for s in case["sentences"]), case


def test_golden_accuracy():
    cases = load_golden()
    failures = []
    per_category = collections.defaultdict(lambda: [0, 0])
    for case in cases:
        got = split_sentences(case["text"])
        ok = got == case["sentences"]
        per_category[case["category"]][0] += ok
        per_category[case["category"]][1] += 1
        if not ok:
            failures.append(f"[{case['category']}] {case['text']!r}\n  want {case['sentences']}\n  got  {got}")
    accuracy = 1 - len(failures) / len(cases)
    print(f"\nsentence splitter: {len(cases) - len(failures)}/{len(cases)} golden cases exact ({accuracy:.1%})")
    for category, (right, total) in sorted(per_category.items()):
        print(f"  {category:18s} {right}/{total}")
    print("\n".join(failures))
    assert accuracy >= MIN_ACCURACY, "\n".join(failures)
    for category, (right, total) in per_category.items():
        assert right / total >= MIN_CATEGORY_ACCURACY, f"{category}: {right}/{total}"


def _non_space(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("source", ["golden", "docstrings"])
def test_no_character_is_lost_added_or_moved(source):
    if source == "golden":
        texts = [c["text"] for c in load_golden()]
    else:
        texts = [d["text"] for d in iter_documents(300_000)]
    assert texts
    for text in texts:
        sentences = split_sentences(text)
        assert all(s and s == s.strip() and "\n" not in s for s in sentences)
        assert _non_space("".join(sentences)) == _non_space(text)


def test_edge_inputs():
    assert split_sentences("") == []
    assert split_sentences("\n\n \n") == []
    assert split_sentences("No terminal punctuation") == ["No terminal punctuation"]
    assert split_sentences("Trailing dot.") == ["Trailing dot."]
    assert split_sentences("...") == ["..."]
    assert split_sentences("A. B. C.") == ["A. B. C."]  # initials all the way
    assert split_sentences("End.\r\n\r\nStart again.") == ["End.", "Start again."]
