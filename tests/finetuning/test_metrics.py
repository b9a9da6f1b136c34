"""Tests of keras_tupe.metrics: hand-computed values, scipy/sklearn, and the SQuAD v1.1 script.

scipy and scikit-learn are test dependencies: the comparisons import them inside the
test, so a missing package makes those tests fail (ImportError), never skip, while the
hand-computed tests still run.
"""

import collections
import copy
import math
import re
import string
import warnings

import numpy as np
import pytest

from keras_tupe import metrics

# ---------------------------------------------------------------------------
# Hand-computed GLUE metrics
# ---------------------------------------------------------------------------

# A 2x2 confusion matrix, positive class 1:
#   TP = 3 (indices 0-2), FN = 2 (3-4), FP = 1 (5), TN = 4 (6-9).
LABELS = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
PREDICTIONS = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]


def test_accuracy_by_hand():
    # (TP + TN) / n = (3 + 4) / 10.
    assert metrics.accuracy(PREDICTIONS, LABELS) == pytest.approx(0.7, abs=1e-15)
    assert metrics.accuracy([2, 0, 1], [2, 1, 1]) == pytest.approx(2 / 3, abs=1e-15)
    assert isinstance(metrics.accuracy(PREDICTIONS, LABELS), float)


def test_f1_by_hand():
    # Positive 1: precision = 3/4, recall = 3/5, F1 = 2·(3/4)(3/5)/(3/4 + 3/5) = 0.9/1.35 = 2/3
    # (= 2TP / (2TP + FP + FN) = 6/9).
    assert metrics.f1(PREDICTIONS, LABELS) == pytest.approx(2 / 3, abs=1e-15)
    # Positive 0: TP = 4, FP = 2 (label 1 predicted 0), FN = 1 (label 0 predicted 1):
    # 2·4 / (2·4 + 2 + 1) = 8/11.
    assert metrics.f1(PREDICTIONS, LABELS, positive=0) == pytest.approx(8 / 11, abs=1e-15)
    # TP = 1, FN = 1, FP = 0: precision 1, recall 1/2 -> 2·(1/2)/(3/2) = 2/3.
    assert metrics.f1([1, 0, 0, 0], [1, 1, 0, 0]) == pytest.approx(2 / 3, abs=1e-15)
    # Nothing predicted positive and nothing positive: undefined, 0.0 as sklearn.
    assert metrics.f1([0, 0, 0], [0, 0, 0]) == 0.0


def test_matthews_by_hand():
    # (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))
    #   = (3·4 − 1·2) / sqrt(4·5·5·6) = 10 / sqrt(600) = 1/sqrt(6) ≈ 0.4082.
    assert metrics.matthews_corrcoef(PREDICTIONS, LABELS) == pytest.approx(1 / math.sqrt(6), abs=1e-15)
    # Symmetric in the two arrays (FP and FN swap).
    assert metrics.matthews_corrcoef(LABELS, PREDICTIONS) == pytest.approx(1 / math.sqrt(6), abs=1e-15)
    # Perfect and inverted predictions.
    assert metrics.matthews_corrcoef(LABELS, LABELS) == pytest.approx(1.0, abs=1e-15)
    assert metrics.matthews_corrcoef([1 - y for y in LABELS], LABELS) == pytest.approx(-1.0, abs=1e-15)
    # A constant prediction makes TP+FP or TN+FN zero: 0.0, as sklearn.
    assert metrics.matthews_corrcoef([0] * 10, LABELS) == 0.0
    assert metrics.matthews_corrcoef(PREDICTIONS, [1] * 10) == 0.0
    # Class ids of any type: the same table with strings.
    names = {0: "unacceptable", 1: "acceptable"}
    assert metrics.matthews_corrcoef(
        [names[p] for p in PREDICTIONS], [names[y] for y in LABELS]
    ) == pytest.approx(1 / math.sqrt(6), abs=1e-15)


def test_pearson_by_hand():
    # x = [1, 2, 3, 4], mean 2.5, centred [-1.5, -0.5, 0.5, 1.5], Σx'² = 5
    # y = [2, 4, 5, 9], mean 5,   centred [-3, -1, 0, 4],         Σy'² = 26
    # Σx'y' = 4.5 + 0.5 + 0 + 6 = 11  ->  r = 11 / sqrt(5·26) = 11 / sqrt(130) ≈ 0.96476.
    assert metrics.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130), abs=1e-15)
    # Invariant to a positive affine map, sign flips with a negative one.
    assert metrics.pearson([10, 20, 30, 40], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130), abs=1e-15)
    assert metrics.pearson([1, 2, 3, 4], [-2, -4, -5, -9]) == pytest.approx(-11 / math.sqrt(130), abs=1e-15)


def test_spearman_with_ties_by_hand():
    # x = [10, 20, 20, 30]: the two 20s share ranks 2 and 3 -> average ranks [1, 2.5, 2.5, 4]
    # y = [1, 3, 2, 2]:     the two 2s share ranks 2 and 3  -> average ranks [1, 4, 2.5, 2.5]
    # Centred (mean 2.5): [-1.5, 0, 0, 1.5] and [-1.5, 1.5, 0, 0]
    # Σ = 2.25, Σx'² = Σy'² = 4.5  ->  rho = 2.25 / 4.5 = 0.5.
    # (Ordinal ranks [1, 2, 3, 4] and [1, 4, 2, 3] would give 2/5 = 0.4 instead.)
    assert metrics.spearman([10, 20, 20, 30], [1, 3, 2, 2]) == pytest.approx(0.5, abs=1e-15)
    # Any monotone map of the inputs gives the same value; a strictly monotone relation gives 1.
    assert metrics.spearman([1, 8, 8, 27], [1, 9, 4, 4]) == pytest.approx(0.5, abs=1e-15)
    assert metrics.spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0, abs=1e-15)


def test_average_ranks_by_hand():
    # [3, 1, 3, 2, 3]: 1 -> 1, 2 -> 2, the three 3s share ranks 3, 4, 5 -> 4.
    np.testing.assert_array_equal(
        metrics._average_ranks(np.array([3.0, 1.0, 3.0, 2.0, 3.0])), [4.0, 1.0, 4.0, 2.0, 4.0]
    )


# ---------------------------------------------------------------------------
# Against scipy and sklearn (these tests must fail, not skip, without them)
# ---------------------------------------------------------------------------

SEEDS = range(8)


def _random_classes(rng, num_classes):
    n = int(rng.integers(1, 80))
    labels = rng.integers(0, num_classes, n)
    # Predictions agree with the labels 60% of the time, so metrics are not all near 0.
    predictions = np.where(rng.random(n) < 0.6, labels, rng.integers(0, num_classes, n))
    return predictions, labels


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("num_classes", [2, 3, 5])
def test_classification_against_sklearn(seed, num_classes):
    import sklearn.metrics

    rng = np.random.default_rng(seed)
    for _ in range(20):
        predictions, labels = _random_classes(rng, num_classes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sklearn's UndefinedMetricWarning on tiny draws
            assert metrics.accuracy(predictions, labels) == pytest.approx(
                sklearn.metrics.accuracy_score(labels, predictions), abs=1e-10
            )
            assert metrics.matthews_corrcoef(predictions, labels) == pytest.approx(
                sklearn.metrics.matthews_corrcoef(labels, predictions), abs=1e-10
            )
            if num_classes == 2:
                for positive in (0, 1):
                    assert metrics.f1(predictions, labels, positive=positive) == pytest.approx(
                        sklearn.metrics.f1_score(labels, predictions, pos_label=positive), abs=1e-10
                    )


def _random_scores(rng):
    n = int(rng.integers(2, 200))
    kind = rng.integers(3)
    if kind == 0:  # continuous, almost surely no ties
        x = rng.normal(size=n)
        y = 0.5 * x + rng.normal(size=n)
    elif kind == 1:  # many ties: STS-B style scores on a 0-5 grid
        x = rng.integers(0, 6, n).astype(float)
        y = np.clip(x + rng.integers(-1, 2, n), 0, 5).astype(float)
    else:  # ties in one array only, other scale and offset
        x = np.round(rng.uniform(0, 5, n), 1)
        y = 1e3 + 50.0 * rng.normal(size=n)
    if np.all(x == x[0]) or np.all(y == y[0]):  # constant: undefined, tested separately
        x[0], y[-1] = x[0] + 1.0, y[-1] + 1.0
    return x, y


@pytest.mark.parametrize("seed", SEEDS)
def test_correlations_against_scipy(seed):
    import scipy.stats

    rng = np.random.default_rng(seed)
    for _ in range(25):
        x, y = _random_scores(rng)
        assert metrics.pearson(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-10)
        assert metrics.spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y)[0], abs=1e-10)
        np.testing.assert_allclose(
            metrics._average_ranks(x), scipy.stats.rankdata(x, method="average"), rtol=0, atol=0
        )


# ---------------------------------------------------------------------------
# Validation and degenerate cases
# ---------------------------------------------------------------------------

ALL_PAIR_FUNCTIONS = [
    metrics.accuracy,
    metrics.f1,
    metrics.matthews_corrcoef,
    metrics.pearson,
    metrics.spearman,
]


@pytest.mark.parametrize("function", ALL_PAIR_FUNCTIONS)
def test_mismatched_lengths(function):
    with pytest.raises(ValueError, match="same length. Received: 3 predictions and 2 labels"):
        function([0, 1, 1], [0, 1])


@pytest.mark.parametrize("function", ALL_PAIR_FUNCTIONS)
def test_empty_inputs(function):
    with pytest.raises(ValueError, match="empty"):
        function([], [])


@pytest.mark.parametrize("function", ALL_PAIR_FUNCTIONS)
def test_two_dimensional_inputs(function):
    with pytest.raises(ValueError, match=r"`predictions` must be 1-D \(logits\?.*shape \(3, 2\)"):
        function(np.zeros((3, 2)), [0, 1, 1])
    with pytest.raises(ValueError, match=r"`labels` must be 1-D. Received: shape \(\)"):
        function([0, 1, 1], 1)


@pytest.mark.parametrize("function", [metrics.accuracy, metrics.f1, metrics.matthews_corrcoef])
def test_probabilities_are_not_class_ids(function):
    with pytest.raises(ValueError, match="`predictions` must be class ids.*non-integer value 0.7"):
        function([0.0, 0.7, 1.0], [0, 1, 1])
    with pytest.raises(ValueError, match="`labels` must be class ids"):
        function([0, 1, 1], [0.0, float("nan"), 1.0])
    # Whole-number floats are class ids.
    assert function([0.0, 1.0, 1.0], [0, 1, 1]) == pytest.approx(1.0)


@pytest.mark.parametrize("function", [metrics.pearson, metrics.spearman])
def test_correlation_validation(function):
    with pytest.raises(ValueError, match="at least 2 examples. Received: 1"):
        function([1.0], [2.0])
    with pytest.raises(ValueError, match="`labels` must be finite"):
        function([1.0, 2.0, 3.0], [1.0, float("inf"), 2.0])
    with pytest.raises(ValueError, match="`predictions` must be numeric"):
        function(["a", "b"], [1.0, 2.0])
    # Constant input: undefined, NaN with a warning (scipy returns NaN too); a constant
    # vector of non-representable floats must not correlate its rounding noise.
    with pytest.warns(RuntimeWarning, match="constant"):
        assert math.isnan(function([0.1, 0.1, 0.1], [1.0, 2.0, 3.0]))
    with pytest.warns(RuntimeWarning, match="constant"):
        assert math.isnan(function([1.0, 2.0, 3.0], [5, 5, 5]))


def test_pearson_no_overflow():
    # Squares of 1e200 overflow float64; the result is still the correlation of [1, 2, 4].
    big = metrics.pearson([1e200, 2e200, 4e200], [1.0, 2.0, 3.0])
    assert big == pytest.approx(metrics.pearson([1, 2, 4], [1, 2, 3]), abs=1e-12)


# ---------------------------------------------------------------------------
# GLUE tasks
# ---------------------------------------------------------------------------


def test_glue_metrics_table():
    assert metrics.GLUE_METRICS == {
        "cola": ("matthews",),
        "sst2": ("accuracy",),
        "mrpc": ("accuracy", "f1"),
        "stsb": ("pearson", "spearman"),
        "qqp": ("accuracy", "f1"),
        "mnli": ("accuracy",),
        "qnli": ("accuracy",),
        "rte": ("accuracy",),
        "wnli": ("accuracy",),
    }


# For the classification tasks, the hand-computed table above: accuracy 0.7, F1 2/3,
# Matthews 1/sqrt(6). MNLI: 3 classes, 4 of 6 correct. STS-B: the Pearson example above
# (11/sqrt(130)); y increases with x, so Spearman is 1.
MNLI_PREDICTIONS, MNLI_LABELS = [0, 1, 2, 2, 1, 0], [0, 1, 2, 0, 2, 0]
STSB_PREDICTIONS, STSB_LABELS = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 5.0, 9.0]
EXPECTED_GLUE = {
    "cola": ({"matthews": 1 / math.sqrt(6)}, 1 / math.sqrt(6)),
    "sst2": ({"accuracy": 0.7}, 0.7),
    "mrpc": ({"accuracy": 0.7, "f1": 2 / 3}, 0.7),
    "stsb": ({"pearson": 11 / math.sqrt(130), "spearman": 1.0}, 11 / math.sqrt(130)),
    "qqp": ({"accuracy": 0.7, "f1": 2 / 3}, 0.7),
    "mnli": ({"accuracy": 4 / 6}, 4 / 6),
    "qnli": ({"accuracy": 0.7}, 0.7),
    "rte": ({"accuracy": 0.7}, 0.7),
    "wnli": ({"accuracy": 0.7}, 0.7),
}


def _glue_inputs(task):
    if task == "mnli":
        return MNLI_PREDICTIONS, MNLI_LABELS
    if task == "stsb":
        return STSB_PREDICTIONS, STSB_LABELS
    return PREDICTIONS, LABELS


@pytest.mark.parametrize("task", sorted(EXPECTED_GLUE))
def test_glue_metrics_and_score(task):
    expected_metrics, expected_score = EXPECTED_GLUE[task]
    result = metrics.glue_metrics(task, *_glue_inputs(task))
    assert list(result) == list(metrics.GLUE_METRICS[task])
    assert result == pytest.approx(expected_metrics, abs=1e-15)
    assert metrics.glue_score(task, result) == pytest.approx(expected_score, abs=1e-15)


def test_glue_covers_every_task():
    assert sorted(EXPECTED_GLUE) == sorted(metrics.GLUE_METRICS)


def test_glue_task_names_are_forgiving():
    assert metrics.glue_metrics("STS-B", STSB_PREDICTIONS, STSB_LABELS) == metrics.glue_metrics(
        "stsb", STSB_PREDICTIONS, STSB_LABELS
    )
    assert metrics.glue_metrics("SST-2", PREDICTIONS, LABELS) == {"accuracy": pytest.approx(0.7)}
    assert metrics.glue_score("CoLA", {"matthews": 0.5}) == 0.5


def test_glue_unknown_task():
    valid = "cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli"
    with pytest.raises(ValueError, match=f"Unknown GLUE task 'squad'. Valid names: {valid}"):
        metrics.glue_metrics("squad", PREDICTIONS, LABELS)
    with pytest.raises(ValueError, match=f"Valid names: {valid}"):
        metrics.glue_score("ax", {"accuracy": 1.0})


def test_glue_score_missing_metric():
    with pytest.raises(ValueError, match=r"GLUE score of stsb is its 'pearson' metric.*\['spearman'\]"):
        metrics.glue_score("stsb", {"spearman": 0.9})
    with pytest.raises(ValueError, match="'matthews'"):
        metrics.glue_score("cola", {"accuracy": 0.9})


def test_glue_classification_rejects_scores_but_stsb_accepts_them():
    with pytest.raises(ValueError, match="class ids"):
        metrics.glue_metrics("mrpc", [0.2, 0.9], [0, 1])
    assert metrics.glue_metrics("stsb", [0.2, 0.9, 0.4], [0.0, 1.0, 0.5])["spearman"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------
# SQuAD v1.1
# ---------------------------------------------------------------------------


# An independent copy of the official evaluate-v1.1.py (Rajpurkar et al.), kept as written
# there (bool exact match, int 0 for no overlap, max over ground truths, 100 * mean).
def _official_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def _official_f1_score(prediction, ground_truth):
    prediction_tokens = _official_normalize_answer(prediction).split()
    ground_truth_tokens = _official_normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def _official_exact_match_score(prediction, ground_truth):
    return _official_normalize_answer(prediction) == _official_normalize_answer(ground_truth)


def _official_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


def _official_evaluate(dataset, predictions):
    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue  # the official script prints "Unanswered question ... will receive score 0."
                ground_truths = list(map(lambda x: x["text"], qa["answers"]))
                prediction = predictions[qa["id"]]
                exact_match += _official_metric_max_over_ground_truths(
                    _official_exact_match_score, prediction, ground_truths
                )
                f1 += _official_metric_max_over_ground_truths(_official_f1_score, prediction, ground_truths)
    exact_match = 100.0 * exact_match / total
    f1 = 100.0 * f1 / total
    return {"exact_match": exact_match, "f1": f1}


def _qa(qid, *answers):
    return {
        "id": qid,
        "question": f"question {qid}?",
        "answers": [{"answer_start": 0, "text": text} for text in answers],
    }


SQUAD_DATA = [
    {
        "title": "Super_Bowl_50",
        "paragraphs": [
            {
                "context": "Super Bowl 50 was played at Levi's Stadium ...",
                "qas": [
                    _qa("q1", "Denver Broncos", "Denver Broncos", "the Denver Broncos"),
                    _qa(
                        "q2",
                        "Santa Clara, California",
                        "Levi's Stadium",
                        "Levi's Stadium in the San Francisco Bay Area at Santa Clara, California.",
                    ),
                ],
            },
            {
                "context": "The Theatre Royal ...",
                "qas": [_qa("q3", "The Theatre Royal, Anaheim"), _qa("q4", "Carolina Panthers")],
            },
        ],
    },
    {
        "title": "Misc",
        "paragraphs": [
            {
                "context": "Founded in 1879 ...",
                "qas": [
                    _qa("q5", "1879", "in 1879"),
                    _qa("q6", "a dog"),
                    _qa("q7", "red, white and blue", "red white blue"),
                    _qa("q8", "New York New York"),
                ],
            }
        ],
    },
]

SQUAD_PREDICTIONS = {
    # "the  denver broncos." -> "denver broncos": equals every ground truth. EM 1, F1 1.
    "q1": "The  Denver Broncos.",
    # "levis stadium in santa clara" (5 tokens; the apostrophe is punctuation):
    #   vs "santa clara california": 2 common, P 2/5, R 2/3 -> F1 1/2
    #   vs "levis stadium":          2 common, P 2/5, R 1   -> F1 4/7
    #   vs "levis stadium in san francisco bay area at santa clara california" (11 tokens,
    #      "the" removed): 5 common, P 1, R 5/11 -> F1 (10/11)/(16/11) = 5/8
    # EM 0, F1 max = 5/8.
    "q2": "Levi's Stadium in Santa Clara",
    # "theatre royal anaheim" on both sides ("the" goes, "theatre" and "anaheim" stay).
    # EM 1, F1 1.
    "q3": "theatre\troyal   anaheim!!",
    # q4: no prediction -> 0 and 0, still counted in the mean.
    # "1879." -> "1879". EM 1, F1 1.
    "q5": "1879.",
    # "cat" vs "dog": EM 0, F1 0.
    "q6": "the cat",
    # "red and blue" (3 tokens):
    #   vs "red white and blue" (4): 3 common, P 1, R 3/4 -> F1 (3/2)/(7/4) = 6/7
    #   vs "red white blue" (3):     2 common, P 2/3, R 2/3 -> F1 2/3
    # EM 0, F1 6/7.
    "q7": "Red and Blue",
    # [new, york] x3 (6 tokens) vs [new, york] x2 (4 tokens): Counter overlap counts
    # multiplicity: min(3, 2) + min(3, 2) = 4 -> P 4/6, R 4/4 -> F1 (4/3)/(5/3) = 4/5.
    # (A set overlap would give 2/5; counting every predicted token in the truth, P > 1.)
    # EM 0, F1 4/5.
    "q8": "New York New York New York",
    # Not in the dataset: ignored, as by the official script.
    "not-a-question": "anything",
}
# 8 questions. EM = (1 + 0 + 1 + 0 + 1 + 0 + 0 + 0) / 8 = 3/8 -> 37.5.
# F1 = (1 + 5/8 + 1 + 0 + 1 + 0 + 6/7 + 4/5) / 8 = (1479/280) / 8 = 1479/2240 -> 66.0267857...
SQUAD_EXPECTED = {"exact_match": 37.5, "f1": 100 * 1479 / 2240}


def test_normalize_answer_by_hand():
    # lower -> punctuation removed ("a-ha" -> "aha", so it is not the article "a") ->
    # whole-word articles removed ("theatre" and "anaheim" stay) -> whitespace collapsed.
    assert metrics.normalize_answer("The Theatre  of an Anaheim, a-ha!") == "theatre of anaheim aha"
    assert metrics.normalize_answer("  A\tcat\nand THE dog.  ") == "cat and dog"
    assert metrics.normalize_answer("Levi's") == "levis"
    assert metrics.normalize_answer("the a an") == ""


def test_exact_match_and_f1_by_hand():
    assert metrics.exact_match_score("The Denver Broncos!", "denver broncos") == 1.0
    assert metrics.exact_match_score("Denver", "Denver Broncos") == 0.0
    # "denver" vs "denver broncos": P 1, R 1/2 -> F1 2/3.
    assert metrics.f1_score("Denver", "Denver Broncos") == pytest.approx(2 / 3, abs=1e-15)
    assert metrics.f1_score("New York New York New York", "New York New York") == pytest.approx(0.8, abs=1e-15)
    # v1.1 semantics: two answers that normalize to "" match exactly but have F1 0.
    assert metrics.exact_match_score("The", "a.") == 1.0
    assert metrics.f1_score("The", "a.") == 0.0
    assert isinstance(metrics.exact_match_score("a", "b"), float)


def test_squad_evaluate_by_hand():
    with pytest.warns(UserWarning, match="1 of 8 questions have no prediction and score 0: q4"):
        result = metrics.squad_evaluate(SQUAD_DATA, SQUAD_PREDICTIONS)
    assert result == pytest.approx(SQUAD_EXPECTED, abs=1e-12)
    assert result == pytest.approx(_official_evaluate(SQUAD_DATA, SQUAD_PREDICTIONS), abs=1e-12)
    # The whole json (with "data") is accepted too.
    with pytest.warns(UserWarning):
        assert metrics.squad_evaluate({"version": "1.1", "data": SQUAD_DATA}, SQUAD_PREDICTIONS) == result


def test_squad_evaluate_perfect_and_empty():
    perfect = {qa["id"]: qa["answers"][0]["text"] for a in SQUAD_DATA for p in a["paragraphs"] for qa in p["qas"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no missing prediction, no warning
        assert metrics.squad_evaluate(SQUAD_DATA, perfect) == {"exact_match": 100.0, "f1": 100.0}
    with pytest.warns(UserWarning, match="8 of 8 questions"):
        assert metrics.squad_evaluate(SQUAD_DATA, {}) == {"exact_match": 0.0, "f1": 0.0}


def test_squad_evaluate_errors():
    with pytest.raises(ValueError, match="no questions"):
        metrics.squad_evaluate([], {})
    data = copy.deepcopy(SQUAD_DATA)
    data[0]["paragraphs"][0]["qas"][0]["answers"] = []
    with pytest.raises(ValueError, match="'q1' has no answers"):
        metrics.squad_evaluate(data, {"q1": "x"})
    with pytest.raises(ValueError, match="'q1' must be a string. Received: NoneType"):
        metrics.squad_evaluate(SQUAD_DATA, {"q1": None})


_EXTRA_TOKENS = ["the", "a", "an", "An", "THE", "Theatre", "another", "in", "at", "York", "1879", "blue"]
_PUNCTUATION = list(".,!?'\"-;:()")


def _perturb(rng, text, pool):
    """One random edit of an answer: what a span predictor gets slightly wrong."""
    tokens = text.split()
    edit = int(rng.integers(12))
    if edit == 0:
        return text.upper() if rng.random() < 0.5 else text.lower()
    if edit == 1:
        return str(rng.choice(["the ", "The ", "a ", "A ", "an ", "An "])) + text
    if edit == 2:  # punctuation at random positions, possibly splitting words
        chars = list(text)
        for _ in range(int(rng.integers(1, 4))):
            chars.insert(int(rng.integers(len(chars) + 1)), str(rng.choice(_PUNCTUATION)))
        return "".join(chars)
    if edit == 3:
        return str(rng.choice([" ", "  ", "\t", "\n "])).join(tokens) + str(rng.choice(["", " ", "\n"]))
    if edit == 4 and tokens:
        del tokens[int(rng.integers(len(tokens)))]
        return " ".join(tokens)
    if edit == 5:
        other = str(rng.choice(pool)).split()
        return " ".join(tokens + other[: int(rng.integers(1, len(other) + 1))])
    if edit == 6 and tokens:
        i = int(rng.integers(len(tokens)))
        return " ".join(tokens[: i + 1] + tokens[i:])  # a duplicated token
    if edit == 7:
        rng.shuffle(tokens)
        return " ".join(tokens)
    if edit == 8:
        return str(rng.choice(["", " ", "...", "the", "a an the", "!!"]))
    if edit == 9:
        tokens.insert(int(rng.integers(len(tokens) + 1)), str(rng.choice(_EXTRA_TOKENS)))
        return " ".join(tokens)
    if edit == 10:
        return str(rng.choice(pool))
    return text


@pytest.mark.parametrize("seed", range(10))
def test_squad_against_official_script(seed):
    rng = np.random.default_rng(seed)
    qas = [qa for article in SQUAD_DATA for p in article["paragraphs"] for qa in p["qas"]]
    pool = [answer["text"] for qa in qas for answer in qa["answers"]]
    for _ in range(20):
        predictions = {}
        for qa in qas:
            if rng.random() < 0.1:
                continue  # missing: scores 0
            text = str(rng.choice([answer["text"] for answer in qa["answers"]]))
            for _ in range(int(rng.integers(0, 4))):
                text = _perturb(rng, text, pool)
            predictions[qa["id"]] = text
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # missing-prediction warnings
            result = metrics.squad_evaluate(SQUAD_DATA, predictions)
        assert result == pytest.approx(_official_evaluate(SQUAD_DATA, predictions), abs=1e-12)
        for qid, prediction in predictions.items():
            truth = str(rng.choice(pool))
            assert metrics.normalize_answer(prediction) == _official_normalize_answer(prediction)
            assert metrics.exact_match_score(prediction, truth) == float(
                _official_exact_match_score(prediction, truth)
            )
            assert metrics.f1_score(prediction, truth) == pytest.approx(
                _official_f1_score(prediction, truth), abs=1e-15
            )
