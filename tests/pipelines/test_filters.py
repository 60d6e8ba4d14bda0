"""Each drop reason, tripped by a text built to break that one rule (and kept once the rule is off)."""

import dataclasses

import pytest

from pipelines.filters import DROP_REASONS, PRESETS, FilterConfig, filter_document

# Eight distinct lines of plain prose: passes every rule of every preset.
BASE_LINES = [
    "The river town grew slowly during the first century of its history.",
    "Farmers brought grain to the market every week and traded it for tools.",
    "A small school opened near the church, and children learned to read there.",
    "Merchants from the coast arrived with salt, cloth and news of distant wars.",
    "When the railway came, the population doubled within a single decade.",
    "Today the old mill houses a museum that tells the story of those years.",
    "Visitors can walk along the canal and see the restored lock gates.",
    "Most of them stay for lunch at one of the cafes beside the water.",
]
BASE = "\n".join(BASE_LINES)

C4 = FilterConfig.preset("c4")
GOPHER = FilterConfig.preset("gopher")
BERT = FilterConfig.preset("bert")


def drops_only_for(text: str, config: FilterConfig, reason: str, **rule_off) -> None:
    """`text` is dropped for `reason`, and kept once the rule(s) in `rule_off` are turned off."""
    assert filter_document(text, config) == (None, reason)
    kept, why = filter_document(text, dataclasses.replace(config, **rule_off))
    assert why is None and kept is not None, f"with {rule_off}, still dropped for {why}"


def prose(words: list[str], per_sentence: int = 10) -> str:
    """Words grouped into capitalized sentences of `per_sentence` words, one per line."""
    lines = []
    for i in range(0, len(words), per_sentence):
        chunk = words[i : i + per_sentence]
        lines.append(" ".join([chunk[0].capitalize(), *chunk[1:]]) + ".")
    return "\n".join(lines)


def test_base_text_passes_every_preset():
    for name in PRESETS:
        assert filter_document(BASE, FilterConfig.preset(name)) == (BASE, None)


def test_presets_and_unknown_preset():
    assert FilterConfig.preset("bert") == FilterConfig()
    assert FilterConfig.preset("none").min_chars is None
    assert FilterConfig.preset("c4").c4_min_sentences == 5
    assert FilterConfig.preset("gopher").gopher_min_words == 50
    with pytest.raises(ValueError, match="none, bert, c4, gopher"):
        FilterConfig.preset("fineweb")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_chars": -1},
        {"min_chars": 10, "max_chars": 5},
        {"gopher_min_alpha_fraction": 1.5},
        {"language": "xx"},
        {"gopher_dup_ngram_char_fractions": ((0, 0.1),)},
    ],
)
def test_invalid_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        FilterConfig(**kwargs)


def test_empty_is_dropped_even_by_none():
    assert filter_document(" \n\t ", FilterConfig.preset("none")) == (None, "empty")
    assert filter_document("ok", FilterConfig.preset("none")) == ("ok", None)


def test_length_and_word_bounds():
    drops_only_for("Hi there you all", BERT, "too_short", min_chars=None)
    drops_only_for(BASE, dataclasses.replace(BERT, max_chars=len(BASE) - 1), "too_long", max_chars=None)
    drops_only_for("Supercalifragilistic antidisestablishment", BERT, "too_few_words", min_words=None)


def test_language_stop_word_score():
    english = dataclasses.replace(BERT, language="en")
    german = "Der Hund läuft schnell über die Wiese und das Kind spielt mit dem Ball im Garten."
    drops_only_for(german, english, "language", language=None)
    chinese = "这是一个没有英文单词的中文句子。我们用它来检查语言过滤器是否有效。"
    drops_only_for(chinese, english, "language", language=None)
    assert filter_document(chinese, BERT) == (chinese, None)  # CJK characters count as words
    assert filter_document(german, dataclasses.replace(BERT, language="de")) == (german, None)
    drops_only_for(BASE, dataclasses.replace(BERT, language="de"), "language", language=None)


def test_c4_page_rules():
    drops_only_for(BASE + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.", C4, "c4_lorem_ipsum",
                   c4_lorem_ipsum=False)
    drops_only_for(BASE + "\nThe config uses {braces} in this line.", C4, "c4_curly_bracket", c4_curly_bracket=False)
    # A "{" on a line the line rules remove does not drop the page (TFDS order).
    assert filter_document(BASE + "\nvar x = {", C4) == (BASE, None)
    three = "One short sentence is here.\nAnother one follows it now.\nA third line is here."
    drops_only_for(three, C4, "c4_too_few_sentences", c4_min_sentences=None)
    assert filter_document("no punctuation here at all\nnor on this line", C4) == (None, "c4_no_lines_left")


def test_c4_line_rules_remove_exactly_the_bad_lines():
    text = "\n".join(
        [
            BASE_LINES[0],
            "Please enable JavaScript to view this page.",  # javascript
            "Click here",  # no terminal punctuation
            "Read our privacy policy for the details.",  # policy
            "Short one.",  # fewer than 3 words
            "A cited fact is here[1] and there [citation needed].",  # citations removed, line kept
            "This " + "x" * 1001 + " is too long.",  # a word over 1000 characters
            *BASE_LINES[1:],
            "",
            "A new paragraph keeps its break.",
        ]
    )
    kept, reason = filter_document(text, C4)
    assert reason is None
    assert kept == "\n".join(
        [BASE_LINES[0], "A cited fact is here and there .", *BASE_LINES[1:], "", "A new paragraph keeps its break."]
    )


def test_gopher_word_count():
    short = prose(" ".join(BASE_LINES).replace(".", "").replace(",", "").split()[:45])
    drops_only_for(short, GOPHER, "gopher_word_count", gopher_min_words=None)
    drops_only_for(BASE, dataclasses.replace(GOPHER, gopher_max_words=50), "gopher_word_count", gopher_max_words=None)


def test_gopher_mean_word_length():
    letters = "abcdefghijklmnopqrstuvwxyz"
    long_words = ["the", "and"] + [f"transformational{letters[i % 26]}{letters[i // 26]}" for i in range(60)]
    drops_only_for(prose(long_words), GOPHER, "gopher_mean_word_length", gopher_max_mean_word_length=None)
    short_words = ["the", "and"] + [a + b for a in "bcdfg" for b in "aeiou"] + [a + b for a in "aeiou" for b in "klmnp"]
    drops_only_for(prose(short_words), GOPHER, "gopher_mean_word_length", gopher_min_mean_word_length=None)


def test_gopher_symbol_ratio():
    names = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
    tags = " ".join("#" + w for w in names)
    drops_only_for(BASE + "\nTags: " + tags + ".", GOPHER, "gopher_symbol_ratio", gopher_max_symbol_ratio=None)
    trailing = BASE.replace(" the ", " the... ", 14)
    assert trailing.count("...") >= 12
    drops_only_for(trailing, GOPHER, "gopher_symbol_ratio", gopher_max_symbol_ratio=None)


def test_gopher_bullet_and_ellipsis_lines():
    bullets = "\n".join("- " + line for line in BASE_LINES)
    drops_only_for(bullets, GOPHER, "gopher_bullet_lines", gopher_max_bullet_lines=None)
    ellipses = "\n".join(line[:-1] + "..." if i % 2 else line for i, line in enumerate(BASE_LINES))
    drops_only_for(ellipses, GOPHER, "gopher_ellipsis_lines", gopher_max_ellipsis_lines=None)


def test_gopher_alpha_fraction():
    numbers = " ".join(str(1000 + 7 * i) for i in range(40))
    drops_only_for(BASE + "\nCodes " + numbers + ".", GOPHER, "gopher_alpha_fraction", gopher_min_alpha_fraction=None)


def test_gopher_stop_words():
    no_stop = (
        "Bright lanterns illuminate narrow streets tonight. Children chase pigeons across cobbled squares. "
        "Vendors sell roasted chestnuts from wooden carts. Musicians play old songs near fountains. "
        "Tourists photograph ancient bridges at sunset. Bakers open early for hungry workers. "
        "Dogs sleep under benches in warm sunshine. Trams rattle past colourful market stalls. "
        "Artists sketch quiet corners beside canals. Evening brings cooler air across rooftops."
    )
    drops_only_for(no_stop, GOPHER, "gopher_stop_words", gopher_min_stop_words=None)


def test_gopher_repetition_rules():
    dup_lines = "\n".join(BASE_LINES + BASE_LINES[:4])  # 4 of 12 lines repeat: 0.33 > 0.30
    drops_only_for(dup_lines, GOPHER, "gopher_repetition", gopher_max_dup_line_fraction=None,
                   gopher_max_dup_line_char_fraction=None, gopher_dup_ngram_char_fractions=(),
                   gopher_top_ngram_char_fractions=())
    paragraphs = BASE_LINES[:3] + BASE_LINES[:2]  # 2 of 5 paragraphs repeat
    drops_only_for("\n\n".join(paragraphs), GOPHER, "gopher_repetition", gopher_max_dup_paragraph_fraction=None,
                   gopher_max_dup_paragraph_char_fraction=None, gopher_max_dup_line_fraction=None,
                   gopher_max_dup_line_char_fraction=None, gopher_dup_ngram_char_fractions=(),
                   gopher_top_ngram_char_fractions=())
    # The 2-gram "machine learning" in every line, each time in other words: only the top-2-gram rule trips.
    subjects = "Researchers Students Companies Doctors Farmers Banks Teachers Artists Lawyers Engineers".split()
    verbs = "study use fund question adopt regulate explain paint debate build".split()
    objects = "daily at home with care in public for profit under rules to pupils on canvas in court at scale".split()
    top = "\n".join(f"{s} {v} machine learning {o} and the results vary." for s, v, o in
                    zip(subjects, verbs, [" ".join(objects[2 * i : 2 * i + 2]) for i in range(10)]))
    drops_only_for(top, GOPHER, "gopher_repetition", gopher_top_ngram_char_fractions=())
    # A 6-word phrase in four different sentences: only the duplicated-n-gram rule trips.
    phrase = "according to the latest annual report"
    lines = [f"{what}, {phrase}." for what in ("Sales grew", "Costs fell", "Staff numbers rose", "Profits doubled")]
    dup = "\n".join(BASE_LINES[:4] + lines[:2] + BASE_LINES[4:] + lines[2:])
    drops_only_for(dup, GOPHER, "gopher_repetition", gopher_dup_ngram_char_fractions=())


def test_every_declared_reason_is_reachable():
    """One sample per reason in DROP_REASONS, so a new reason cannot ship without a way to reach it."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    samples = {
        "empty": (" ", BERT),
        "too_short": ("Hi there you all", BERT),
        "too_long": (BASE, dataclasses.replace(BERT, max_chars=100)),
        "too_few_words": ("Supercalifragilistic antidisestablishment", BERT),
        "language": ("Der Hund und die Katze sind im Haus.", dataclasses.replace(BERT, language="en")),
        "c4_lorem_ipsum": (BASE + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.", C4),
        "c4_curly_bracket": (BASE + "\nThe config uses {braces} in this line.", C4),
        "c4_too_few_sentences": ("One sentence is here.\nAnother is here.", C4),
        "c4_no_lines_left": ("no punctuation here\nnor here", C4),
        "gopher_word_count": (BASE_LINES[0], GOPHER),
        "gopher_mean_word_length": (prose(["the", "and"] + [f"transformational{c}" for c in letters * 2]), GOPHER),
        "gopher_symbol_ratio": (BASE.replace(" the ", " #the ", 14), GOPHER),
        "gopher_bullet_lines": ("\n".join("- " + line for line in BASE_LINES), GOPHER),
        "gopher_ellipsis_lines": ("\n".join(line[:-1] + "..." for line in BASE_LINES), GOPHER),
        "gopher_alpha_fraction": (BASE + "\n" + " ".join(str(i) for i in range(1000, 1040)) + ".", GOPHER),
        "gopher_stop_words": (prose([a + b + "x" for a in letters[:10] for b in letters[:6]]), GOPHER),
        "gopher_repetition": ("\n".join(BASE_LINES * 2), GOPHER),
    }
    assert set(samples) == set(DROP_REASONS)
    for reason, (text, config) in samples.items():
        assert filter_document(text, config) == (None, reason)
