"""Evaluation metrics for fine-tuning: GLUE and SQuAD v1.1, in plain NumPy (float64).

GLUE (Wang et al., 2019): accuracy, binary F1 (MRPC, QQP), Matthews (CoLA), Pearson and
Spearman (STS-B); `glue_metrics` computes a task's metrics, `glue_score` its number in the
GLUE table. SQuAD v1.1 (Rajpurkar et al., 2016) follows the official `evaluate-v1.1.py`
line for line, so the numbers are comparable to published ones. (scipy and scikit-learn
compute some of these too, but they are test dependencies only: the tests compare.)

The functions take anything `np.asarray` accepts, return Python floats and raise
`ValueError` naming the problem (lengths differ, empty input, 2-D logits where class ids
are expected, non-finite values).
"""

import collections
import math
import re
import string
import warnings

import numpy as np

from keras_tupe.data.glue import GLUE_TASKS


def _as_vector(values, name):
    values = np.asarray(values)
    if values.ndim != 1:
        hint = " (logits? take `argmax(-1)` first)" if values.ndim == 2 else ""
        raise ValueError(f"`{name}` must be 1-D{hint}. Received: shape {values.shape}")
    return values


def _check_pair(predictions, labels):
    predictions = _as_vector(predictions, "predictions")
    labels = _as_vector(labels, "labels")
    if len(predictions) != len(labels):
        raise ValueError(
            "`predictions` and `labels` must have the same length. Received: "
            f"{len(predictions)} predictions and {len(labels)} labels"
        )
    if len(predictions) == 0:
        raise ValueError("`predictions` and `labels` are empty; a metric needs at least one example")
    return predictions, labels


def _classification_pair(predictions, labels):
    predictions, labels = _check_pair(predictions, labels)
    # Class ids may be ints, bools or strings; a float array is accepted only when every
    # value is a whole number, which catches probabilities passed by mistake.
    for name, values in (("predictions", predictions), ("labels", labels)):
        if values.dtype.kind == "c":
            raise ValueError(f"`{name}` must be class ids. Received: dtype {values.dtype}")
        whole = values.dtype.kind != "f" or np.isfinite(values) & (values == np.round(values))
        if not np.all(whole):
            raise ValueError(
                f"`{name}` must be class ids, not scores or probabilities (take `argmax(-1)` "
                f"of the logits). Received: a non-integer value {float(values[~whole][0])}"
            )
    return predictions, labels


def _regression_pair(predictions, labels):
    predictions, labels = _check_pair(predictions, labels)
    arrays = []
    for name, values in (("predictions", predictions), ("labels", labels)):
        if values.dtype.kind not in "biuf":
            raise ValueError(f"`{name}` must be numeric. Received: dtype {values.dtype}")
        values = values.astype(np.float64)
        if not np.all(np.isfinite(values)):
            raise ValueError(f"`{name}` must be finite. Received: {values[~np.isfinite(values)][0]}")
        arrays.append(values)
    if len(predictions) < 2:
        raise ValueError(
            f"A correlation needs at least 2 examples. Received: {len(predictions)}"
        )
    return arrays


# Classification and regression metrics (GLUE)
def accuracy(predictions, labels):
    """Fraction of predictions equal to the labels.

    Args:
        predictions: 1-D array-like of class ids.
        labels: 1-D array-like of class ids, same length.

    Returns:
        float in [0, 1].
    """
    predictions, labels = _classification_pair(predictions, labels)
    return float(np.mean(predictions == labels, dtype=np.float64))


def f1(predictions, labels, positive=1):
    """Binary F1 of the `positive` class: 2·TP / (2·TP + FP + FN).

    The GLUE convention for MRPC and QQP (sklearn's `f1_score(average="binary")`).
    Every other class counts as negative, so on more than two classes this is the
    one-vs-rest F1 of `positive`.

    Args:
        predictions: 1-D array-like of class ids.
        labels: 1-D array-like of class ids, same length.
        positive: the class whose F1 is returned. Defaults to `1`.

    Returns:
        float in [0, 1]; `0.0` when `positive` occurs in neither array (no true and no
        predicted positive: F1 is undefined, and sklearn returns 0.0 too).
    """
    predictions, labels = _classification_pair(predictions, labels)
    predicted, actual = predictions == positive, labels == positive
    true_positives = np.sum(predicted & actual, dtype=np.float64)
    # 2·TP + FP + FN = (TP + FP) + (TP + FN): whole numbers, exact in float64.
    denominator = np.sum(predicted, dtype=np.float64) + np.sum(actual, dtype=np.float64)
    if denominator == 0.0:
        return 0.0
    return float(2.0 * true_positives / denominator)


def matthews_corrcoef(predictions, labels):
    """Matthews correlation coefficient (CoLA).

    For two classes it is

        (TP·TN − FP·FN) / sqrt((TP + FP)(TP + FN)(TN + FP)(TN + FN)).

    For more classes, the same generalization as sklearn (Gorodkin's R_K) on the
    confusion matrix C (rows: labels, columns: predictions), with t = row sums,
    p = column sums, c = trace(C), s = sum(C):

        (c·s − t·p) / sqrt((s² − p·p)(s² − t·t)).

    Args:
        predictions: 1-D array-like of class ids.
        labels: 1-D array-like of class ids, same length.

    Returns:
        float in [-1, 1]; `0.0` when a denominator factor is 0 (one of the arrays holds
        a single class), as sklearn.
    """
    predictions, labels = _classification_pair(predictions, labels)
    _, codes = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    codes = codes.reshape(-1)
    num_classes = int(codes.max()) + 1
    label_codes, prediction_codes = codes[: len(labels)], codes[len(labels) :]
    confusion = np.zeros((num_classes, num_classes), np.float64)  # (labels, predictions)
    np.add.at(confusion, (label_codes, prediction_codes), 1.0)
    true_sums = confusion.sum(axis=1)
    predicted_sums = confusion.sum(axis=0)
    correct = np.trace(confusion)
    total = confusion.sum()
    covariance = correct * total - np.dot(true_sums, predicted_sums)
    prediction_variance = total**2 - np.dot(predicted_sums, predicted_sums)
    label_variance = total**2 - np.dot(true_sums, true_sums)
    if prediction_variance * label_variance == 0.0:
        return 0.0
    return float(covariance / math.sqrt(prediction_variance * label_variance))


def _pearson(x, y):
    # Constant inputs are tested on the values, not on the centred vector: the mean of
    # equal floats need not equal them, which would leave rounding noise to correlate.
    if np.all(x == x[0]) or np.all(y == y[0]):
        warnings.warn(
            "An input is constant; the correlation is undefined and is returned as NaN.",
            RuntimeWarning,
            stacklevel=3,
        )
        return float("nan")
    # Scale by the largest magnitude before the norm (no overflow for huge values), then
    # to unit norm; |r| <= 1 up to rounding, clipped as scipy does.
    x = x - x.mean()
    y = y - y.mean()
    x = x / np.max(np.abs(x))
    y = y / np.max(np.abs(y))
    return float(np.clip(np.dot(x / np.linalg.norm(x), y / np.linalg.norm(y)), -1.0, 1.0))


def pearson(predictions, labels):
    """Pearson correlation coefficient (STS-B).

    r = Σ(x − x̄)(y − ȳ) / sqrt(Σ(x − x̄)² · Σ(y − ȳ)²).

    Args:
        predictions: 1-D array-like of numbers, at least 2.
        labels: 1-D array-like of numbers, same length.

    Returns:
        float in [-1, 1]; NaN, with a `RuntimeWarning`, when either input is constant
        (the correlation is undefined; scipy returns NaN too). A constant regression
        output early in fine-tuning should not abort an evaluation loop.
    """
    x, y = _regression_pair(predictions, labels)
    return _pearson(x, y)


def _average_ranks(values):
    """1-based ranks, ties getting the mean of the ranks they span (scipy's "average")."""
    order = np.argsort(values, kind="stable")
    inverse = np.empty(len(values), np.intp)
    inverse[order] = np.arange(len(values))
    ordered = values[order]
    starts = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    group = np.cumsum(starts)[inverse]  # 1-based tie group of each element
    bounds = np.concatenate([np.flatnonzero(starts), [len(values)]])
    # A group spanning sorted positions [lo, hi) holds ranks lo+1 … hi: mean (lo + 1 + hi) / 2.
    return 0.5 * (bounds[group - 1] + 1 + bounds[group]).astype(np.float64)


def spearman(predictions, labels):
    """Spearman rank correlation (STS-B): Pearson of the ranks, ties given average ranks.

    Args:
        predictions: 1-D array-like of numbers, at least 2.
        labels: 1-D array-like of numbers, same length.

    Returns:
        float in [-1, 1]; NaN, with a `RuntimeWarning`, when either input is constant.
    """
    x, y = _regression_pair(predictions, labels)
    return _pearson(_average_ranks(x), _average_ranks(y))


# GLUE tasks: each task's metrics, as `keras_tupe.data.glue.GLUE_TASKS` lists them.
GLUE_METRICS = {name: task.metrics for name, task in GLUE_TASKS.items()}

_METRIC_FUNCTIONS = {
    "accuracy": accuracy,
    "f1": f1,
    "matthews": matthews_corrcoef,
    "pearson": pearson,
    "spearman": spearman,
}

# The number each task contributes to the GLUE table of BERT/TUPE-style papers: its first
# metric (Matthews for CoLA, Pearson for STS-B, accuracy for the others).
_GLUE_SCORE_METRIC = {task: metrics[0] for task, metrics in GLUE_METRICS.items()}


def _glue_task(task):
    # "SST-2", "STS-B", "sst_2" all name a task of GLUE_METRICS.
    name = str(task).lower().replace("-", "").replace("_", "")
    if name not in GLUE_METRICS:
        raise ValueError(
            f"Unknown GLUE task {task!r}. Valid names: {', '.join(GLUE_METRICS)}"
        )
    return name


def glue_metrics(task, predictions, labels):
    """The metrics GLUE reports for `task`.

    Args:
        task: str, a key of `GLUE_METRICS` (case, "-" and "_" ignored: "STS-B" works).
        predictions: 1-D array-like: class ids, or similarity scores for `stsb`.
        labels: 1-D array-like, same length.

    Returns:
        dict from metric name to float, e.g. `{"accuracy": 0.86, "f1": 0.90}` for MRPC;
        fractions, not percentages.

    Example:
        >>> glue_metrics("mrpc", [1, 0, 1, 1], [1, 0, 0, 1])
        {'accuracy': 0.75, 'f1': 0.8}
    """
    name = _glue_task(task)
    return {metric: _METRIC_FUNCTIONS[metric](predictions, labels) for metric in GLUE_METRICS[name]}


def glue_score_metric(task):
    """The name of the metric `glue_score` reports for `task` (e.g. "matthews" for CoLA)."""
    return _GLUE_SCORE_METRIC[_glue_task(task)]


def glue_score(task, metrics):
    """The single number of the GLUE table for `task`, from `glue_metrics`' output.

    CoLA: Matthews; STS-B: Pearson (what the BERT-style papers report); every other
    task: accuracy. Multiplying by 100 is the caller's job.

    Args:
        task: str, a key of `GLUE_METRICS`.
        metrics: dict from metric name to value, e.g. the output of `glue_metrics`.

    Returns:
        float in [-1, 1] (Matthews, Pearson) or [0, 1] (accuracy).
    """
    name = _glue_task(task)
    metric = _GLUE_SCORE_METRIC[name]
    if metric not in metrics:
        raise ValueError(
            f"The GLUE score of {name} is its {metric!r} metric. Received: metrics with "
            f"keys {sorted(metrics)}"
        )
    return float(metrics[metric])


# SQuAD v1.1 (official evaluate-v1.1.py semantics)
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s):
    """Lower case, remove punctuation, the articles a/an/the, and extra whitespace.

    In the official order: punctuation goes *before* the articles, so "a-ha" becomes
    "aha" (kept) rather than "ha". Articles are whole words only ("theatre" stays).
    """
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match_score(prediction, ground_truth):
    """1.0 when the normalized strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction, ground_truth):
    """Token F1 of the normalized strings, overlap counted with multiplicity (Counter).

    0.0 when nothing overlaps, including when both normalize to "" (v1.1 semantics;
    SQuAD v2.0's script returns 1.0 there).
    """
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def squad_evaluate(dataset, predictions):
    """Exact match and F1 (percentages) of `predictions` on a SQuAD v1.1 dataset.

    Each question scores the max over its ground truths; the mean runs over *all*
    questions of `dataset`, a question without a prediction scoring 0 (the official
    script prints a line for each; here one `UserWarning` lists them). Predictions
    for ids not in the dataset are ignored, as in the official script.

    Args:
        dataset: the `"data"` list of a SQuAD json (articles → `"paragraphs"` →
            `"qas"`, each with `"id"` and `"answers"` of `{"text": …}`). The whole
            json (a dict with `"data"`) is accepted too.
        predictions: dict from question id to predicted answer text.

    Returns:
        `{"exact_match": float, "f1": float}`, both in [0, 100].

    Reference: https://rajpurkar.github.io/SQuAD-explorer/ (evaluate-v1.1.py).
    """
    if isinstance(dataset, dict) and "data" in dataset:
        dataset = dataset["data"]
    exact_match = f1 = 0.0
    total = 0
    missing = []
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    missing.append(qa["id"])
                    continue
                ground_truths = [answer["text"] for answer in qa["answers"]]
                if not ground_truths:
                    raise ValueError(f"Question {qa['id']!r} has no answers; SQuAD v1.1 needs one")
                prediction = predictions[qa["id"]]
                if not isinstance(prediction, str):
                    raise ValueError(
                        f"The prediction for question {qa['id']!r} must be a string. "
                        f"Received: {type(prediction).__name__}"
                    )
                exact_match += max(exact_match_score(prediction, truth) for truth in ground_truths)
                f1 += max(f1_score(prediction, truth) for truth in ground_truths)
    if total == 0:
        raise ValueError("`dataset` holds no questions")
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", …" if len(missing) > 10 else "")
        warnings.warn(
            f"{len(missing)} of {total} questions have no prediction and score 0: {shown}",
            UserWarning,
            stacklevel=2,
        )
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}
