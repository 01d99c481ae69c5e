"""Metrics of the seeds: classification at a threshold (natural 0 or a posteriori), and alignment
with human pairwise preferences (pairwise accuracy with tie calibration, Cramér's V, Cohen's κ).

Conventions (the same as :meth:`pluie_reward.Judge.score`): an item is predicted positive when
``score > threshold``; a preference instance is predicted ``"tie"`` when ``|score_a - score_b| <= epsilon``.
Precision, recall and F1 are 0 when their denominator is 0 (no predicted / no actual positives).
Among equally good a posteriori thresholds the lowest is chosen; among equally good tie margins
the smallest, and :func:`preference_metrics` reports the range of V and κ over all of them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ...common.errors import library

METRICS = ("accuracy", "precision", "recall", "f1")
PREFERENCES = ("A", "B", "tie")
_TRUE = {"true", "1", "yes", "y", "t", "paraphrase", "positive", "pos"}
_FALSE = {"false", "0", "no", "n", "f", "non-paraphrase", "not paraphrase", "negative", "neg"}
# "both" (both acceptable) and "none" (neither) are ties, as in ParaReval's preference question
_PREFERENCE_WORDS = {"a": "A", "b": "B", "tie": "tie", "=": "tie", "equal": "tie", "same": "tie",
                     "both": "tie", "none": "tie", "neither": "tie"}


# input checks ---------------------------------------------------------------------------------
def as_scores(scores: Iterable[float], name: str = "scores") -> np.ndarray:
    """Scores as a float array; raises on empty input, non-numbers, NaN or infinities.

    Example:
        >>> as_scores([1, -2.5]).tolist()
        [1.0, -2.5]
    """
    try:
        array = np.asarray(list(scores), dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numbers ({err}).") from None
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty flat list of numbers.")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{name} has {bad.size} NaN/infinite value(s), first at index {bad[0]}; drop or fix them first.")
    return array


def binary_label(value: Any, synonyms: Mapping[str, bool] | None = None) -> bool:
    """One binary label from a bool, 0/1 or a word ("true"/"false", "yes"/"no", "paraphrase"...);
    ``synonyms`` adds words (lower case) of your data. Raises ``ValueError`` listing what is accepted.

    Example:
        >>> binary_label("Yes"), binary_label(0), binary_label("good", {"good": True})
        (True, False, True)
    """
    if isinstance(value, (bool, np.bool_, int, np.integer, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        key = value.strip().lower()
        if synonyms and key in synonyms:
            return bool(synonyms[key])
        if key in _TRUE | _FALSE:
            return key in _TRUE
    if value is None:
        raise ValueError("the label is missing (null/empty); every item needs one: fix or remove the row")
    extra = synonyms or {}
    yes = sorted(_TRUE | {k for k, v in extra.items() if v}, key=lambda w: (len(w) > 1, w))
    no = sorted(_FALSE | {k for k, v in extra.items() if not v}, key=lambda w: (len(w) > 1, w))
    raise ValueError(f"{value!r} is not a binary label; use (case-insensitive) {'/'.join(yes)} for positive, "
                     f"{'/'.join(no)} for negative")


def as_labels(labels: Iterable[Any], name: str = "labels", synonyms: Mapping[str, bool] | None = None) -> np.ndarray:
    """Binary labels from bools, 0/1 or strings such as "true"/"false", "yes"/"no" (see :func:`binary_label`).

    Example:
        >>> as_labels([True, 0, "yes", "False"]).tolist()
        [True, False, True, False]
    """
    return np.asarray(_each(labels, lambda value: binary_label(value, synonyms), name), dtype=bool)


def _each(values: Iterable[Any], convert: Callable[[Any], Any], name: str, where: Callable[[int], str] | None = None,
          error: type[Exception] = ValueError) -> list[Any]:
    """``convert`` applied to every value; an ``error`` names the item (``where(i)``, default ``name[i]``), and an
    empty input is one."""
    out = []
    for i, value in enumerate(values):
        try:
            out.append(convert(value))
        except ValueError as err:
            raise error(f"{where(i) if where else f'{name}[{i}]'}: {err}.") from None
    if not out:
        raise error(f"{name} is empty.")
    return out


def preference_label(value: Any, synonyms: Mapping[str, str] | None = None) -> str:
    """One human (or metric) choice as "A", "B" or "tie" (case-insensitive); ``synonyms`` maps
    further words of your data (lower case) to one of the three. A missing value is an error, never a tie.

    Example:
        >>> preference_label("a"), preference_label("Both"), preference_label("win", {"win": "A"})
        ('A', 'tie', 'A')
    """
    table = {**_PREFERENCE_WORDS, **{k.lower(): v for k, v in (synonyms or {}).items()}}
    if value is None:
        raise ValueError("the human choice is missing (null/empty); every item needs one: fix or remove the row")
    key = str(value).strip().lower()
    if isinstance(value, str) and key in table:
        return table[key]
    others = ", ".join(f"{k} ({v})" for k, v in table.items() if k not in ("a", "b", "tie"))
    raise ValueError(f"{value!r} is not a preference; use A, B or tie (also accepted, case-insensitive: {others})")


def as_preferences(choices: Iterable[Any], name: str = "preferences", synonyms: Mapping[str, str] | None = None) -> list[str]:
    """Human (or metric) choices normalised to "A", "B" or "tie" (see :func:`preference_label`).

    Example:
        >>> as_preferences(["a", "B", "Tie", "=", "None"])
        ['A', 'B', 'tie', 'tie', 'tie']
    """
    return _each(choices, lambda value: preference_label(value, synonyms), name)


def as_scored(scores: Iterable[float], labels: Iterable[Any], name: str = "scores") -> tuple[np.ndarray, np.ndarray]:
    """Scores and binary labels as arrays of one length (:func:`as_scores`, :func:`as_labels`).

    Example:
        >>> [a.tolist() for a in as_scored([0.5, -1], ["yes", "no"])]
        [[0.5, -1.0], [True, False]]
    """
    s, y = as_scores(scores, name), as_labels(labels)
    _same_length(**{name: s, "labels": y})
    return s, y


def _same_length(**arrays: Any) -> int:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"inputs must have the same length, got {lengths}.")
    return next(iter(lengths.values()))


# classification -------------------------------------------------------------------------------
def metrics_at(scores: Iterable[float], labels: Iterable[Any], thresholds: Iterable[float]) -> dict[str, np.ndarray]:
    """Accuracy, precision, recall and F1 of ``score > t`` for every threshold ``t`` (vectorised).

    Example:
        >>> metrics_at([-1.0, 2.0], [False, True], [0.0])["accuracy"].tolist()
        [1.0]
    """
    s, y = as_scored(scores, labels)
    t = np.atleast_1d(np.asarray(list(thresholds), dtype=float))
    n, positives = s.size, int(y.sum())
    neg_pred = np.searchsorted(np.sort(s), t, side="right")
    fn = np.searchsorted(np.sort(s[y]), t, side="right")
    tp = positives - fn
    fp = (n - neg_pred) - tp
    tn = (n - positives) - fp
    # a zero denominator has a zero numerator (no predicted or no actual positive: tp = 0): dividing by 1 gives the 0
    precision = tp / np.maximum(tp + fp, 1)
    recall = tp / max(positives, 1)
    f1 = 2 * precision * recall / np.where(precision + recall > 0, precision + recall, 1)
    return {
        "threshold": t,
        "accuracy": (tp + tn) / n,
        "precision": precision.astype(float),
        "recall": recall.astype(float),
        "f1": f1.astype(float),
        "tp": tp, "fp": fp, "tn": tn, "fn": fn,
    }


def classification_metrics(scores: Iterable[float], labels: Iterable[Any], threshold: float = 0.0) -> dict[str, float]:
    """Accuracy, precision, recall, F1 (and the confusion counts) at one threshold.

    Example:
        >>> classification_metrics([-2, 1, 3], [False, False, True])["precision"]
        0.5
    """
    return _row(metrics_at(scores, labels, [threshold]), 0)


def _row(m: Mapping[str, np.ndarray], i: int) -> dict[str, Any]:
    """Column ``i`` of :func:`metrics_at`: its threshold, the four metrics, the confusion counts."""
    return {"threshold": float(m["threshold"][i]), **{k: float(m[k][i]) for k in METRICS},
            **{k: int(m[k][i]) for k in ("tp", "fp", "tn", "fn")}}


def roc_auc(scores: Iterable[float], labels: Iterable[Any]) -> float:
    """Area under the ROC curve (ties count one half): scikit-learn's ``roc_auc_score``.

    Args:
        scores: one score per item (higher: more positive).
        labels: binary labels (see :func:`as_labels`); both values must occur, else ``ValueError``.

    Example:
        >>> roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True])
        0.75
        >>> roc_auc([1.0, 1.0], [True, False])
        0.5
    """
    s, y = as_scored(scores, labels)
    if y.all() or not y.any():
        raise ValueError("ROC-AUC needs both positive and negative labels.")
    return float(library("sklearn.metrics", "roc_auc").roc_auc_score(y, s))


def require_metric_libraries(what: str = "this command") -> None:
    """Raise the missing-extra error now when scikit-learn or scipy (the ``eval`` extra: roc_auc, Cohen's κ,
    Cramér's V, the calibration metrics and fit) is missing: a command checks before it scores, not after."""
    library("sklearn.metrics", what), library("scipy.stats.contingency", what)


def candidate_thresholds(scores: Iterable[float]) -> np.ndarray:
    """Every distinct decision: ``min - 1`` (all positive), the midpoints between consecutive distinct
    scores, and ``max + 1`` (all negative).

    Example:
        >>> candidate_thresholds([0.0, 1.0, 1.0, 3.0]).tolist()
        [-1.0, 0.5, 2.0, 4.0]
    """
    u = np.unique(as_scores(scores))
    return np.concatenate([[u[0] - 1.0], (u[:-1] + u[1:]) / 2.0, [u[-1] + 1.0]])


def best_threshold(scores: Iterable[float], labels: Iterable[Any], by: str = "f1") -> dict[str, float]:
    """The a posteriori threshold maximising ``by`` ("f1" or "accuracy"); ties go to the lowest threshold.

    Example:
        >>> best_threshold([1, 2, 3, 4], [True, False, False, False], by="accuracy")["threshold"]
        5.0
    """
    if by not in METRICS:
        raise ValueError(f"by must be one of {METRICS}, got {by!r}.")
    s = as_scores(scores)
    m = metrics_at(s, labels, candidate_thresholds(s))
    return _row(m, int(np.argmax(m[by])))  # first maximum = lowest threshold


def classification_report(
    scores: Iterable[float],
    labels: Iterable[Any],
    natural_threshold: float | None = 0.0,
    optimise: Sequence[str] = ("f1", "accuracy"),
) -> dict[str, Any]:
    """The seeds' Table 1/3 row: metrics at the natural threshold and at the a posteriori best ones.

    Set ``natural_threshold=None`` for metrics without a natural threshold (BLEU, Levenshtein...).

    Example:
        >>> r = classification_report([-1.0, 2.0, 0.5], [False, True, False])
        >>> r["natural"]["accuracy"], r["best_f1"]["threshold"]
        (0.6666666666666666, 1.25)
    """
    s, y = as_scored(scores, labels)
    report: dict[str, Any] = {"n": int(s.size), "positives": int(y.sum())}
    if natural_threshold is not None:
        report["natural"] = classification_metrics(s, y, natural_threshold)
    for by in optimise:
        report[f"best_{by}"] = best_threshold(s, y, by)
    return report


# preference -----------------------------------------------------------------------------------
def preference_predictions(scores_a: Iterable[float], scores_b: Iterable[float], epsilon: float = 0.0) -> list[str]:
    """"A" if ``a - b > epsilon``, "B" if ``b - a > epsilon``, else "tie".

    Example:
        >>> preference_predictions([3, 1, 2], [1, 2, 2.1], epsilon=0.5)
        ['A', 'B', 'tie']
    """
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}.")
    a, b = as_scores(scores_a, "scores_a"), as_scores(scores_b, "scores_b")
    _same_length(scores_a=a, scores_b=b)
    d = a - b
    return ["tie" if abs(x) <= epsilon else ("A" if x > 0 else "B") for x in d]


def tie_calibrated_accuracy(
    scores_a: Iterable[float], scores_b: Iterable[float], human: Iterable[Any]
) -> tuple[float, float]:
    """Pairwise accuracy with tie calibration (Deutsch et al., 2023): the best agreement (ties
    included) over tie thresholds ``epsilon`` in {0} ∪ {|a - b|}; ties go to the smallest epsilon.

    Returns ``(accuracy, epsilon)``.

    Example:
        >>> tie_calibrated_accuracy([3, 1, 2], [1, 2, 2.1], ["A", "B", "tie"])
        (1.0, 0.1...)
    """
    candidates, correct, n = _tie_margins(scores_a, scores_b, human)
    i = int(np.argmax(correct))
    return float(correct[i] / n), float(candidates[i])


def _tie_margins(scores_a: Iterable[float], scores_b: Iterable[float], human: Iterable[Any]) -> tuple[np.ndarray, np.ndarray, int]:
    """The tie margins {0} ∪ {|a - b|} (sorted), how many human choices each one matches, and the number of items."""
    a, b = as_scores(scores_a, "scores_a"), as_scores(scores_b, "scores_b")
    h = np.asarray(as_preferences(human, "human"))
    _same_length(scores_a=a, scores_b=b, human=h)
    d = a - b
    candidates = np.unique(np.concatenate([[0.0], np.abs(d)]))
    # a human A/B is matched when the sign agrees and |d| > eps; a human tie when |d| <= eps
    decided = np.sort(np.abs(d)[((h == "A") & (d > 0)) | ((h == "B") & (d < 0))])
    ties = np.sort(np.abs(d)[h == "tie"])
    correct = (decided.size - np.searchsorted(decided, candidates, side="right")) + np.searchsorted(ties, candidates, side="right")
    return candidates, correct, d.size


def cramers_v(x: Sequence[Any], y: Sequence[Any]) -> float | None:
    """Cramér's V over the observed categories (no bias correction): scipy's ``association(method="cramer")``
    on the ``crosstab``; ``None`` (N/A) when one labeling has a single category.

    Example:
        >>> cramers_v(["A", "B", "A", "B"], ["A", "B", "A", "B"])
        1.0
    """
    _same_length(x=x, y=y)
    contingency = library("scipy.stats.contingency", "cramers_v")
    table = contingency.crosstab(list(x), list(y)).count
    return None if min(table.shape) < 2 else float(contingency.association(table, method="cramer"))


def cohens_kappa(x: Sequence[Any], y: Sequence[Any]) -> float | None:
    """Cohen's κ = (p_o - p_e) / (1 - p_e): scikit-learn's ``cohen_kappa_score``; ``None`` (N/A) when
    p_e = 1 (both raters constant and equal).

    Example:
        >>> cohens_kappa(["A", "B", "A", "B"], ["A", "B", "B", "B"])
        0.5
    """
    _same_length(x=x, y=y)
    if len(x) == 0:
        raise ValueError("cohens_kappa needs at least one item.")
    if len(set(x) | set(y)) == 1:
        return None
    return float(library("sklearn.metrics", "cohens_kappa").cohen_kappa_score(list(x), list(y)))


def preference_metrics(
    scores_a: Iterable[float],
    scores_b: Iterable[float],
    human: Iterable[Any],
    epsilon: float | None = None,
) -> dict[str, Any]:
    """The seeds' Table 2 row: pairwise accuracy (tie-calibrated unless ``epsilon`` is given), and
    Cramér's V and Cohen's κ between the human choices and the metric's A/B/tie at that epsilon.

    Example:
        >>> m = preference_metrics([3, 1, 2], [1, 2, 2.1], ["A", "B", "tie"])
        >>> m["pairwise_accuracy"], m["cohens_kappa"]
        (1.0, 1.0)
    """
    a, b = as_scores(scores_a, "scores_a"), as_scores(scores_b, "scores_b")
    h = as_preferences(human, "human")
    _same_length(scores_a=a, scores_b=b, human=h)
    eps = tie_calibrated_accuracy(a, b, h)[1] if epsilon is None else float(epsilon)
    out = _agreement(preference_predictions(a, b, eps), h, epsilon=eps, tie_calibrated=epsilon is None)
    if epsilon is None:
        out.update(_equally_good(a, b, h))
    return out


def _agreement(predicted: list[str], human: list[str], **settings: Any) -> dict[str, Any]:
    """The Table 2 row of predicted A/B/tie choices against the human ones (``settings``: how they were read)."""
    return {"n": len(human), "pairwise_accuracy": sum(x == y for x, y in zip(predicted, human)) / len(human), **settings,
            "cramers_v": cramers_v(human, predicted), "cohens_kappa": cohens_kappa(human, predicted),
            "human_counts": {k: human.count(k) for k in PREFERENCES},
            "predicted_counts": {k: predicted.count(k) for k in PREFERENCES}}


def choice_metrics(predicted: Iterable[Any], human: Iterable[Any]) -> dict[str, Any]:
    """The Table 2 row of a judge that picks A, B or tie itself (a choice template's most likely answer):
    as :func:`preference_metrics`, without a tie margin (``epsilon`` is ``None``, ``read`` is ``"argmax"``).

    Example:
        >>> m = choice_metrics(["A", "tie", "B", "A"], ["A", "tie", "A", "A"])
        >>> m["pairwise_accuracy"], m["cohens_kappa"], m["epsilon"]
        (0.75, 0.5..., None)
    """
    p = as_preferences(predicted, "predicted")
    h = as_preferences(human, "human")
    _same_length(predicted=p, human=h)
    return _agreement(p, h, epsilon=None, tie_calibrated=False, read="argmax")


def equally_good_epsilons(scores_a: Iterable[float], scores_b: Iterable[float], human: Iterable[Any]) -> list[float]:
    """Every tie margin in {0} ∪ {|a - b|} reaching the best tie-calibrated accuracy, smallest first
    (:func:`tie_calibrated_accuracy` picks the first one).

    Example:
        >>> equally_good_epsilons([3, 1, 2, 0, 5], [1, 2, 2, 0.5, 4.8], ["A", "B", "tie", "tie", "A"])
        [0.0, 0.5]
    """
    candidates, correct, _ = _tie_margins(scores_a, scores_b, human)
    return [float(e) for e in candidates[correct == correct.max()]]


def _equally_good(a: np.ndarray, b: np.ndarray, h: list[str]) -> dict[str, Any]:
    """V and κ over every ε as good as the chosen one: the choice among them moves both."""
    epsilons = equally_good_epsilons(a, b, h)
    vs = [cramers_v(h, preference_predictions(a, b, e)) for e in epsilons]
    ks = [cohens_kappa(h, preference_predictions(a, b, e)) for e in epsilons]

    def span(values: list[float | None]) -> list[float] | None:
        known = [v for v in values if v is not None]
        return [min(known), max(known)] if known else None

    return {
        "equally_good_epsilons": {"count": len(epsilons), "min": epsilons[0], "max": epsilons[-1]},
        "cramers_v_range": span(vs),
        "cohens_kappa_range": span(ks),
    }
