"""downstream.finetune.metrics against values computed by hand from the metrics' definitions."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("scipy")

from downstream.finetune import metrics, protocol  # noqa: E402


def test_accuracy_macro_f1_and_mcc():
    # per class (tp, fp, fn): 0 -> (1, 1, 1) F1 1/2; 1 -> (2, 1, 0) F1 4/5; 2 -> (1, 0, 1) F1 2/3
    m = metrics.classification([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0])
    assert m["accuracy"] == pytest.approx(4 / 6) and m["score"] == m["accuracy"]
    assert m["macro_f1"] == pytest.approx((1 / 2 + 4 / 5 + 2 / 3) / 3)
    # binary: TP 1, TN 2, FP 0, FN 1 -> (1*2 - 0*1) / sqrt(1 * 2 * 2 * 3)
    assert metrics.classification([1, 1, 0, 0], [1, 0, 0, 0])["mcc"] == pytest.approx(2 / math.sqrt(12))


def test_pearson_and_spearman():
    # deviations (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5): covariance sum 4, variance sums 5 and 5
    m = metrics.regression([1, 2, 3, 4], [1, 3, 2, 4])
    assert m["pearson"] == pytest.approx(0.8) and m["spearman"] == pytest.approx(0.8)
    m = metrics.regression([1, 2, 3, 4], [1, 2, 3, 40])
    assert m["spearman"] == pytest.approx(1.0) and m["pearson"] < 0.9
    assert metrics.regression([1, 2, 3], [5, 5, 5])["pearson"] == 0.0  # a constant prediction correlates with nothing


def test_bio_entities_are_read_as_conlleval_reads_them():
    assert metrics.bio_entities(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 1), ("LOC", 3, 3)}
    assert metrics.bio_entities(["I-LOC", "I-LOC", "B-LOC"]) == {("LOC", 0, 1), ("LOC", 2, 2)}  # I- opens one
    assert metrics.bio_entities(["B-PER", "I-LOC"]) == {("PER", 0, 0), ("LOC", 1, 1)}  # type change ends it


def test_entity_f1_counts_whole_entities():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    # sentence 1: PER right, LOC typed ORG; sentence 2: ORG right, plus a spurious PER
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-PER"]]
    m = metrics.entity_f1(gold, predicted)
    assert m["precision"] == pytest.approx(2 / 4) and m["recall"] == pytest.approx(2 / 3)
    assert m["entity_f1"] == pytest.approx(2 * (1 / 2) * (2 / 3) / (1 / 2 + 2 / 3))
    # a partly found entity counts for nothing
    assert metrics.entity_f1([["B-PER", "I-PER"]], [["B-PER", "O"]])["entity_f1"] == 0.0


def test_squad_exact_match_and_f1_use_squads_normalisation():
    assert metrics.normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert metrics.normalize_answer("an apple, a pear") == "apple pear"
    # question 1: exact after normalisation; question 2: tokens paris france vs paris: P 1/2, R 1 -> F1 2/3
    m = metrics.squad([["Eiffel Tower", "tower"], ["Paris"]], ["the Eiffel tower.", "Paris France"])
    assert m["exact_match"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx((1 + 2 / 3) / 2)
    # the best of several gold answers counts
    assert metrics.squad([["blue", "dark blue sky"]], ["dark blue"])["f1"] == pytest.approx(2 * 1 * (2 / 3) / (1 + 2 / 3))


def test_mean_and_standard_error():
    mean, se = protocol.mean_and_se([1.0, 2.0, 3.0])
    assert mean == 2.0 and se == pytest.approx(1.0 / math.sqrt(3))
    assert protocol.mean_and_se([5.0]) == (5.0, 0.0)


# ---- reference implementations: seqeval, scikit-learn, scipy, on generated cases ----------------------------

def _random_tags(rng, n: int, scheme: str) -> list[str]:
    """A tag sequence of `scheme`; well formed for BIOES (seqeval's strict IOBES reads only those), any mix of
    O/B-/I- for BIO and IOB1 (ill-formed sequences are what a model predicts)."""
    types = ("PER", "LOC", "ORG")
    if scheme != "BIOES":
        prefixes = ("O", "B", "I") if scheme == "BIO" else ("O", "I", "I", "B")
        return [p if p == "O" else f"{p}-{rng.choice(types)}" for p in rng.choice(prefixes, size=n)]
    out: list[str] = []
    while len(out) < n:
        kind, length = rng.choice(types), min(int(rng.integers(0, 4)), n - len(out))
        out += ["O"] if length == 0 else [f"S-{kind}"] if length == 1 else \
            [f"B-{kind}", *[f"I-{kind}"] * (length - 2), f"E-{kind}"]
    return out


@pytest.mark.parametrize("scheme", ["BIO", "IOB1", "BIOES"])
def test_entity_f1_matches_seqeval(scheme):
    seqeval_metrics = pytest.importorskip("seqeval.metrics")
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng({"BIO": 0, "IOB1": 1, "BIOES": 2}[scheme])
    for case in range(40):
        lengths = rng.integers(1, 12, size=int(rng.integers(1, 6)))
        gold = [_random_tags(rng, int(n), scheme) for n in lengths]
        predicted = [_random_tags(rng, int(n), scheme) if rng.random() < 0.7 else list(g) for g, n in zip(gold, lengths)]
        m = metrics.entity_f1(gold, predicted, scheme=scheme)
        if scheme == "BIOES":  # seqeval's strict mode is the one that knows IOBES
            from seqeval.scheme import IOBES

            kw = {"mode": "strict", "scheme": IOBES}
        else:  # the default mode reads IOB1 and BIO alike, as conlleval does
            kw = {}
        for name, reference in (("entity_f1", seqeval_metrics.f1_score), ("precision", seqeval_metrics.precision_score),
                                ("recall", seqeval_metrics.recall_score)):
            expected = reference(gold, predicted, zero_division=0, **kw)
            assert m[name] == pytest.approx(expected), (case, name, gold, predicted)


def test_tag_schemes_are_detected_converted_or_refused():
    assert metrics.tag_scheme([["B-PER", "I-PER", "O", "B-LOC"]]) == "BIO"
    assert metrics.tag_scheme([["I-PER", "I-PER", "O"], ["B-LOC", "I-LOC"]]) == "IOB1"  # an I- opens an entity
    assert metrics.tag_scheme([["S-PER", "O", "B-LOC", "E-LOC"]]) == "BIOES"
    assert metrics.tag_scheme([["O", "O"]]) == "BIO"
    # IOB1's B- parts two adjacent entities of a type; BIOES's S- is a one-word entity, E- its last word
    assert metrics.to_bio(["I-PER", "I-PER", "B-PER", "O", "I-LOC"], "IOB1") == ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]
    assert metrics.to_bio(["S-PER", "B-LOC", "I-LOC", "E-LOC"], "BIOES") == ["B-PER", "B-LOC", "I-LOC", "I-LOC"]
    for bad in (["B-PER", "L-PER"], ["PER", "O"], ["U-LOC"]):
        with pytest.raises(ValueError, match="not IOB1, BIO or BIOES") as e:
            metrics.tag_scheme([bad])
        assert "\n" not in str(e.value) and repr(next(t for t in bad if t not in ("B-PER", "O"))) in str(e.value)
    # IOB1 gold: the I-tagged entity is found, not read as O
    assert metrics.entity_f1([["I-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]])["entity_f1"] == 1.0
    assert metrics.entity_f1([["S-PER", "O"]], [["S-PER", "O"]])["entity_f1"] == 1.0


def test_binary_f1_and_mcc_match_scikit_learn_and_hand_counts():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(3)
    for _ in range(20):
        gold, predicted = rng.integers(0, 2, size=30), rng.integers(0, 2, size=30)
        m = metrics.classification(gold, predicted, positive=1)
        assert m["f1"] == pytest.approx(sklearn_metrics.f1_score(gold, predicted))
        assert m["mcc"] == pytest.approx(sklearn_metrics.matthews_corrcoef(gold, predicted))
    # positive class 1: TP 2, FP 1, FN 1 -> F1 2/3; the positive class is an id, not always 1
    assert metrics.classification([1, 1, 1, 0, 0], [1, 1, 0, 1, 0], positive=1)["f1"] == pytest.approx(2 / 3)
    assert metrics.classification([1, 1, 1, 0, 0], [1, 1, 0, 1, 0], positive=0)["f1"] == pytest.approx(1 / 2)
    assert "f1" not in metrics.classification([0, 1], [0, 1])


def test_pearson_and_spearman_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(4)
    gold = rng.uniform(0, 5, size=50)
    predicted = gold + rng.normal(0, 1.5, size=50)
    m = metrics.regression(gold, predicted)
    assert m["pearson"] == pytest.approx(stats.pearsonr(gold, predicted)[0])
    assert m["spearman"] == pytest.approx(stats.spearmanr(gold, predicted)[0])


# ---- SQuAD: hand cases derived from the official v1.1 and v2.0 evaluation logic -----------------------------

def test_squad_v1_scores_an_answer_that_normalises_to_nothing_as_the_official_script():
    # v1.1's F1 counts common tokens: none when the gold normalises to "" (an article), even for an empty prediction;
    # its exact match compares normalised strings, "" == ""
    m = metrics.squad([["The"]], [""])
    assert m["exact_match"] == 1.0 and m["f1"] == 0.0
    with pytest.raises(ValueError, match="squad_v2"):
        metrics.squad([[]], ["x"])


def test_squad_v2_scores_no_answer_questions():
    gold = [["Denver Broncos", "Broncos"], [], ["an"], ["Paris"]]
    predicted = ["Broncos", "", "", "Lyon"]
    m = metrics.squad_v2(gold, predicted)
    # q1: EM 1 F1 1; q2 (no answer, empty prediction): 1, 1; q3 has an answer that normalises to nothing, so its gold
    # is "" and the empty prediction matches it, yet it counts as HasAns (its answer list is not empty); q4: 0, 0
    assert m["exact_match"] == pytest.approx(3 / 4) and m["f1"] == pytest.approx(3 / 4) and m["score"] == m["f1"]
    assert m["HasAns_total"] == 3 and m["HasAns_exact_match"] == pytest.approx(2 / 3)
    assert m["NoAns_total"] == 1 and m["NoAns_f1"] == 1.0
    # a non-empty prediction on a no-answer question scores 0; an empty one on an answerable question 0 too
    assert metrics.squad_v2([[]], ["something"])["f1"] == 0.0
    assert metrics.squad_v2([["Paris"]], [""])["f1"] == 0.0
    assert "NoAns_total" not in metrics.squad_v2([["a b"]], ["a b"])


def test_squad_v2_threshold_turns_answers_into_no_answers():
    gold, predicted = [["Paris"], [], ["blue sky"]], ["Paris", "Rome", "blue"]
    na = [0.1, 0.9, 0.5]
    # threshold 0.6: q2 (0.9 > 0.6) becomes no-answer: right; q1, q3 keep their answers: F1 1 and 2/3
    m = metrics.squad_v2(gold, predicted, na_scores=na, threshold=0.6)
    assert m["f1"] == pytest.approx((1 + 1 + 2 / 3) / 3) and m["exact_match"] == pytest.approx(2 / 3)
    assert m["null_threshold"] == 0.6
    # threshold 0.3: q3 too becomes no-answer, wrong since it has one
    assert metrics.squad_v2(gold, predicted, na_scores=na, threshold=0.3)["f1"] == pytest.approx(2 / 3)


def test_best_null_threshold_follows_the_official_search():
    gold, predicted = [["Paris"], [], ["blue sky"], []], ["Paris", "Rome", "blue", ""]
    na = [0.1, 0.9, 0.5, 0.2]
    # start: all predicted no-answer -> 2 (the two NoAns). In increasing na: q1 (0.1) +1 -> 3, best, thresh 0.1;
    # q4 (0.2) empty prediction on NoAns +0 -> 3; q3 (0.5) +2/3 -> 3.67, best, thresh 0.5; q2 (0.9) non-empty on NoAns -1
    score, threshold = metrics.best_null_threshold(gold, predicted, na)
    assert threshold == 0.5 and score == pytest.approx((3 + 2 / 3) / 4)
    # by exact match q3 adds 0: the best stays at q1's 0.1
    assert metrics.best_null_threshold(gold, predicted, na, metric="exact_match") == (pytest.approx(3 / 4), 0.1)
    # when answering nothing is best, the threshold is 0.0 as in the official script
    assert metrics.best_null_threshold([[], []], ["a", "b"], [0.3, 0.4]) == (1.0, 0.0)
    # chosen on validation, applied to test: the applied score equals the search's score on the same data
    applied = metrics.squad_v2(gold, predicted, na_scores=na, threshold=threshold)
    assert applied["f1"] == pytest.approx(score)
