"""SQuAD v1.1 and v2.0 as distributed: train-v1.1.json / dev-v1.1.json, train-v2.0.json / dev-v2.0.json.

In:  the directory holding a version's two files. Out: one SuiteTask ("squad" or "squad_v2"), span rows
     {id, title, question, context, answers: {text, answer_start}, line} where `line` is the question's index
     in its file; validation is the dev file and there is no test split (SQuAD's test set is hidden: the
     anchors, NVIDIA's BERT runs among them, report dev, v2.0 with the null threshold best on dev); with
     --suite-holdout, validation is a share of train's articles and dev is the test split, scored with the
     threshold validation chose.

The files are {"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers":
[{"text", "answer_start"}], "is_impossible" (v2.0)}]}]}]}. In v2.0 an unanswerable question has is_impossible
true and no answers (its "plausible_answers" are not gold and are not read); its row has empty answer lists and
is kept in every split, so that v2.0 is scored with its no-answer questions (EM and F1 count an empty
prediction right), the null threshold chosen on validation. A v1.1 question without answers is a counted drop
(`no_answer`); a file that is not SQuAD's JSON is an error naming it.
Dev questions carry up to five answers (those of the annotators), scored as the maximum over them.
"""

from __future__ import annotations

import json

from downstream.finetune.suites.base import (
    Suite,
    SuiteError,
    SuiteOptions,
    SuiteTask,
    drops,
    hold_out,
    join,
    read_text,
)

# The official evaluation scripts report F1 and exact match; F1 is the one the anchors select and compare by.
_METRICS = ("f1", "exact_match")


def read_squad_file(url: str, *, v2: bool) -> tuple[list[dict], dict[str, int], str]:
    """(rows, drops per reason, sha256) of one SQuAD JSON file."""
    read = read_text(url)
    try:
        body = json.loads(read.text)
        articles = body["data"]
    except json.JSONDecodeError as e:
        raise SuiteError(f"{url}:{e.lineno}: not JSON ({e.msg})") from None
    except (KeyError, TypeError):
        raise SuiteError(f"{url}: no \"data\" list: not a SQuAD file") from None
    rows, dropped, index = [], drops(), 0
    try:
        for article in articles:
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    index += 1
                    answers = [] if v2 and qa.get("is_impossible", False) else qa["answers"]
                    if not answers and not v2:
                        dropped["no_answer"] += 1
                        continue
                    rows.append({"id": qa["id"], "title": article.get("title", ""), "question": qa["question"],
                                 "context": context,
                                 "answers": {"text": [a["text"] for a in answers],
                                             "answer_start": [int(a["answer_start"]) for a in answers]},
                                 "line": index})
    except (KeyError, TypeError, ValueError) as e:
        raise SuiteError(f"{url}: question {index}: not in SQuAD's layout ({type(e).__name__}: {e})") from None
    return rows, dict(dropped), read.sha256


class Squad(Suite):
    name = "squad"
    description = "SQuAD v1.1: train, dev; exact match and F1"
    version = "v1.1"
    v2 = False

    def load(self, root: str, options: SuiteOptions) -> list[SuiteTask]:
        splits, files, dropped = {}, {}, {}
        for split, prefix in (("train", "train"), ("validation", "dev")):
            url = join(root, f"{prefix}-{self.version}.json")
            rows, dropped[split], sha256 = read_squad_file(url, v2=self.v2)
            if not rows:
                raise SuiteError(f"{url}: no questions")
            splits[split], files[split] = rows, {"url": url, "sha256": sha256}
        splits, files, dropped = hold_out(splits, files, dropped, options.suite_holdout, lambda r: r["title"])
        # No MosaicBERT anchor here; three seeds give a standard error, as finetune's default does.
        return [SuiteTask(suite=self.name, name=self.name, kind="span", splits=splits, files=files, dropped=dropped,
                          metrics=_METRICS, selection="f1", seeds=3, no_answer=self.v2)]


class SquadV2(Squad):
    name = "squad_v2"
    description = "SQuAD v2.0: train, dev with unanswerable questions; exact match and F1, HasAns/NoAns"
    version = "v2.0"
    v2 = True
