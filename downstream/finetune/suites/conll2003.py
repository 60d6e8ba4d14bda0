"""CoNLL-2003 (English NER) as distributed: column files eng.train, eng.testa, eng.testb (or train.txt,
valid.txt, test.txt as many mirrors name them).

In:  the directory. Out: one SuiteTask "conll2003", tag rows {tokens, tags, line} (line: the sentence's first
     line), train / validation (testa) / test (testb), the scheme of its tags (IOB1 as distributed: an entity
     opens with I-, B- only parts two adjacent entities of a type; BIO/IOB2 or BIOES in converted copies)
     detected from the training tags; entity F1 rewrites both sides to BIO and scores as seqeval does.

One token per line, the word first and the NER tag last (`EU NNP B-NP I-ORG`), sentences separated by blank
lines, each document opened by a `-DOCSTART-` line, which is not a sentence and is skipped. A line with one
column is an error naming file and line.
"""

from __future__ import annotations

from downstream.finetune import metrics
from downstream.finetune.suites.base import (
    Suite,
    SuiteError,
    SuiteOptions,
    SuiteTask,
    exists,
    join,
    read_text,
)

_NAMES = ({"train": "eng.train", "validation": "eng.testa", "test": "eng.testb"},
          {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"})


def read_conll_file(url: str) -> tuple[list[dict], dict[str, int], str]:
    """(sentences as tag rows, drops per reason, sha256) of one column file."""
    read = read_text(url)
    rows, tokens, tags, first = [], [], [], 0

    def close():
        if tokens:
            rows.append({"tokens": list(tokens), "tags": list(tags), "line": first})
            tokens.clear()
            tags.clear()

    for number, line in enumerate(read.text.split("\n"), 1):
        fields = line.split()
        if not fields:
            close()
            continue
        if fields[0] == "-DOCSTART-":
            close()
            continue
        if len(fields) < 2:
            raise SuiteError(f"{url}:{number}: one column ({line.strip()!r}): expected the word first, the NER tag last")
        if not tokens:
            first = number
        tokens.append(fields[0])
        tags.append(fields[-1])
    close()
    return rows, {}, read.sha256  # every line is a token, a break or a -DOCSTART-: nothing to drop


class Conll2003(Suite):
    name = "conll2003"
    description = "CoNLL-2003 English NER: train, testa (validation), testb (test); entity F1"

    def load(self, root: str, options: SuiteOptions) -> list[SuiteTask]:
        names = next((n for n in _NAMES if exists(join(root, n["train"]))), None)
        if names is None:
            raise SuiteError(f"{root}: no CoNLL-2003 files (eng.train, eng.testa, eng.testb; or train.txt, valid.txt, "
                             "test.txt)")
        splits, files, dropped = {}, {}, {}
        for split, name in names.items():
            url = join(root, name)
            rows, dropped[split], sha256 = read_conll_file(url)
            if not rows:
                raise SuiteError(f"{url}: no sentences")
            splits[split], files[split] = rows, {"url": url, "sha256": sha256}
        try:
            scheme = metrics.tag_scheme([r["tags"] for r in splits["train"]])
        except ValueError as e:
            raise SuiteError(f"{files['train']['url']}: {e}") from None
        # No MosaicBERT anchor: five seeds, as for GLUE's small tasks.
        return [SuiteTask(suite=self.name, name=self.name, kind="tag", splits=splits, files=files, dropped=dropped,
                          metrics=("entity_f1",), selection="entity_f1", seeds=5, tag_scheme=scheme)]
