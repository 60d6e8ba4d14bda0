"""Zero-shot cross-lingual transfer on a built-in task: train and select on its English text, test on another
language's (`clozeforge finetune --builtin-task man-sections --test-language de`).

In:  a task row with translations (common.BuiltinTask.translations; man-sections: /usr/share/man/LANG/manN), a
     language code, a seed.
Out: train.jsonl and validation.jsonl in English and test.jsonl in the other language under a directory, one label
     set in all three; and the record results.json keeps as `builtin`: the languages, the classes, rows and pages
     per split, each language's pages read, kept and dropped per reason, the English pages left out.

Which pages. The test split is drawn from all the test language's pages, as the English task draws its own test
split (a seeded order of pages, at most `per_group` paragraphs a page, `sizes.test` a class). Train and validation
are drawn from the English pages that no page of the test language translates: a translation keeps its original's
file name (man1/ls.1.gz and de/man1/ls.1.gz), so pages are grouped by name across languages, and every name the
test language has rows from is left out of the English reading (`left_out`), whether or not the test split draws
that page. A test page
is then never the translation of a training or validation page; an English paragraph that is also a test
paragraph word for word (untranslated boilerplate) is dropped as well (`in_the_test_split`).

Which labels. The English task's labels (man-sections: the section number and its title); the classes are the
sections the test language has the pages to fill (de and fr: 1, 5 and 8; no translated man2 or man3 exists here),
and the English splits take those same classes: chance is one over their number. Fewer than two such sections is
a LookupError naming the language and what each section holds. Standard library only, as the tasks are.
"""

from __future__ import annotations

import dataclasses
import random

from downstream.finetune.builtin.common import (
    SPLITS,
    BuiltinTask,
    Grouped,
    Tally,
    split_by_group,
    write_splits,
)


def write_transfer(task: BuiltinTask, directory: str, language: str, seed: int = 0) -> dict:
    """Write the transfer's splits under `directory` (see the module docstring); return its record."""
    foreign = task.in_language(language)  # LookupError: no such language here
    rng = random.Random(f"{task.name}:{language}:{seed}")
    sizes = task.sizes
    tested = Tally()
    test_grouped = foreign.grouped(foreign, rng, tested)
    test = split_by_group(test_grouped, dataclasses.replace(sizes, train=0, validation=0), rng)
    classes = sorted(label for label, splits in test.items() if len(splits["test"]) == sizes.test)
    if len(classes) < 2:
        held = "; ".join(f"{label}: {_capacity(test_grouped[label], sizes.per_group)}" for label in sorted(test_grouped))
        raise LookupError(f"--test-language {language}: {foreign.text_root} has too few pages for {task.name} in two "
                          f"classes ({sizes.test} test paragraphs a class, at most {sizes.per_group} a page; "
                          f"it has {held or 'no page that reads'})")
    test_texts = {row["text"] for label in classes for row in test[label]["test"]}
    translated = frozenset(group for rows in test_grouped.values() for group, _ in rows)
    english = dataclasses.replace(task, exclude=task.exclude | translated)
    trained = Tally()
    english_grouped: Grouped = {}
    for label, rows in english.grouped(english, rng, trained).items():
        if label in classes:
            english_grouped[label] = [(group, row) for group, row in rows if row["text"] not in test_texts]
            trained.rows_dropped["in_the_test_split"] += len(rows) - len(english_grouped[label])
    train = split_by_group(english_grouped, dataclasses.replace(sizes, test=0), rng)
    short = [label for label in classes if label not in train
             or (len(train[label]["train"]), len(train[label]["validation"])) != (sizes.train, sizes.validation)]
    if short:
        raise LookupError(f"--test-language {language}: the English pages of {', '.join(short)} that {language} does "
                          f"not translate are too few for {sizes.train} training and {sizes.validation} validation rows")
    splits = {"train": [row for c in classes for row in train[c]["train"]],
              "validation": [row for c in classes for row in train[c]["validation"]],
              "test": [row for c in classes for row in test[c]["test"]]}
    write_splits(directory, splits, rng)
    groups = {"train": english_grouped, "validation": english_grouped, "test": test_grouped}
    return {"task": task.name, "train_language": "en", "test_language": language, "zero_shot": True,
            "classes": classes, "rows": {s: len(splits[s]) for s in SPLITS},
            "pages": {s: len(_groups_of(splits[s], groups[s])) for s in SPLITS},
            "text": {"en": task.text_root, language: foreign.text_root},
            "read": {"en": trained.record(), language: tested.record()},
            "seed": seed}


def _capacity(rows: list[tuple[str, dict]], per_group: int) -> str:
    pages: dict[str, int] = {}
    for group, _ in rows:
        pages[group] = pages.get(group, 0) + 1
    return f"{sum(min(per_group, n) for n in pages.values())} from {len(pages)} pages"


def _groups_of(rows: list[dict], grouped: Grouped) -> set[str]:
    """The groups (pages) that `rows` came from."""
    texts = {row["text"] for row in rows}
    return {group for pairs in grouped.values() for group, row in pairs if row["text"] in texts}
