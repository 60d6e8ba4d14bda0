"""experiments/race.py's arithmetic and its candidates: each row's flags are experiments/recipe_trial.py's, and the race's SE counts
the spread between pretraining seeds as well as the fine-tuning seeds'."""

from __future__ import annotations

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from experiments import race  # noqa: E402
from experiments import recipe_trial as recipe  # noqa: E402


def rows(*gains_and_ses):
    return [{"task": f"t{i}", "gain": g, "se": s} for i, (g, s) in enumerate(gains_and_ses)]


def test_the_se_is_the_pretraining_seeds_spread_when_it_is_the_larger():
    mean, se = race.combined([rows((4.0, 0.1), (6.0, 0.1)), rows((0.0, 0.1), (2.0, 0.1))])
    assert mean == pytest.approx(3.0)
    assert se == pytest.approx(math.sqrt(8.0) / math.sqrt(2))  # the seeds' means 5 and 1: sd 2.83 over sqrt(2)


def test_the_se_is_the_fine_tuning_seeds_when_the_pretraining_seeds_agree():
    mean, se = race.combined([rows((1.0, 3.0), (3.0, 4.0)), rows((2.0, 3.0), (2.0, 4.0))])
    assert mean == pytest.approx(2.0)
    assert se == pytest.approx(math.sqrt(9 + 16 + 9 + 16) / 4)


def test_every_candidate_is_a_recipe_and_the_names_are_distinct():
    assert len({c.name for c in race.CANDIDATES}) == len(race.CANDIDATES)
    assert any(c.recipe().objective == "electra" for c in race.CANDIDATES)  # ELECTRA runs whatever it scores
    for c in race.CANDIDATES:
        args = recipe.recipe_parser().parse_args([c.name, *c.flags])  # an unknown flag or value: SystemExit
        assert args.name == c.name


def test_an_unknown_candidate_is_one_line():
    with pytest.raises(SystemExit, match="unknown candidate nope; candidates: bert-nsp"):
        race.main(argv=["--only", "nope", "--work", os.devnull + "-race"])


@pytest.mark.parametrize("tokenizer, packing", [("wordpiece", "nsp"), ("bpe", "full-sentences")])
def test_a_corpus_kind_learns_its_own_vocabulary_and_docstrings_share_the_first(tmp_path, monkeypatch, tokenizer, packing):
    """recipe.prepared: docstrings of any size take the 6 MB prep's vocabulary; another corpus kind (its own text, as
    the demo would read it) learns its own at 64 tokens and shares it with its longer preps; none prepares forever."""
    preps = []

    def prep(*args, log):
        out = args[args.index("--output") + 1]
        preps.append((os.path.basename(out), args[args.index("--vocab") + 1] if "--vocab" in args else None))
        os.makedirs(os.path.join(out, "pairs"))
        open(os.path.join(out, "pairs", "manifest.json"), "w").close()
        return 0.0

    monkeypatch.setattr(recipe, "_cli", prep)
    monkeypatch.setattr(recipe.demo_corpus, "write", lambda directory, size, kind: os.makedirs(directory))
    monkeypatch.setattr(recipe, "written_tasks", lambda work, names: [])
    work, log = str(tmp_path), os.devnull
    kind = "" if tokenizer == "wordpiece" else f"-{tokenizer}-full-sentences"
    recipe.prepared(work, 128, 24, log, tokenizer, packing)
    recipe.prepared(work, 128, 15, log, tokenizer, packing, "documentation")
    first, own = f"prep-64{kind}", f"prep-64{kind}-15mb-documentation"
    assert preps == [(first, None), (f"prep-128{kind}-24mb", os.path.join(work, first, "vocab")),
                     (own, None), (f"prep-128{kind}-15mb-documentation", os.path.join(work, own, "vocab"))]
