"""Calibration of a judge's probabilities: expected calibration error (per-bin rows), Brier score,
log loss, and a Platt fit ``p = sigmoid(a * PLUIE + b)`` on labelled scores with a seeded held-out split.

Conventions (those of scikit-learn's ``calibration_curve(strategy="uniform")``): the probability of
the positive label is compared with the share of positive labels. Equal-width bins over [0, 1] are
closed on the right: ``[0, 1/k], (1/k, 2/k], ..., ((k-1)/k, 1]``. ECE = sum over bins of
``(n_bin / n) * |share positive - mean probability|``; empty bins count 0.

Example:
    >>> ece = expected_calibration_error([0.1, 0.4, 0.8, 0.9], [False, True, True, True], n_bins=2)
    >>> round(ece["ece"], 4)   # bin [0, .5]: |0.5 - 0.25|; bin (.5, 1]: |1 - 0.85|; halves each
    0.2
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ...core.calibration import Calibration
from .metrics import as_labels, as_scored, as_scores, library, _same_length
from ..report import markdown_table, number
from ..shared import check_number

__all__ = ["CalibrationConfig", "brier_score", "calibration_markdown", "calibration_metrics", "calibration_report",
           "expected_calibration_error", "fit_calibration", "fit_platt", "heldout_split", "log_loss", "p_yes", "probabilities",
           "reliability_bins"]

DEFAULT_BINS = 10
EPS = 1e-15  # probabilities are clipped to [EPS, 1 - EPS] in the log loss


def probabilities(values: Iterable[float], name: str = "probabilities") -> np.ndarray:
    """Probabilities as a float array, checked to lie in [0, 1] (no NaN).

    Example:
        >>> probabilities([0, 0.25, 1]).tolist()
        [0.0, 0.25, 1.0]
    """
    p = as_scores(values, name)
    bad = np.flatnonzero((p < 0) | (p > 1))
    if bad.size:
        raise ValueError(f"{name} must lie in [0, 1]; index {bad[0]} is {p[bad[0]]!r} (pass sigmoid(PLUIE), not PLUIE).")
    return p


_WHOLE, _NUMBER = (int, np.integer), (int, float, np.integer, np.floating)  # numpy's numbers are accepted


def _check_bins(n_bins: int) -> int:
    return int(check_number("n_bins", n_bins, "a positive integer", lambda k: k >= 1, _WHOLE))


def _inputs(probs: Iterable[float], labels: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    p, y = probabilities(probs), as_labels(labels)
    _same_length(probabilities=p, labels=y)
    return p, y


# metrics ----------------------------------------------------------------------------------------
def reliability_bins(probs: Iterable[float], labels: Iterable[Any], n_bins: int = DEFAULT_BINS) -> list[dict[str, Any]]:
    """One row per equal-width bin of [0, 1], empty bins included (closed on the right, the first includes 0).

    Returns:
        ``[{"lo", "hi", "count", "mean_probability", "positive_rate", "gap"}]``, ``gap = positive_rate - mean_probability``
        (``None`` for an empty bin).

    Example:
        >>> rows = reliability_bins([0.5, 0.6], [True, False], n_bins=2)
        >>> [(r["lo"], r["hi"], r["count"], r["positive_rate"]) for r in rows]
        [(0.0, 0.5, 1, 1.0), (0.5, 1.0, 1, 0.0)]
    """
    p, y = _inputs(probs, labels)
    k = _check_bins(n_bins)
    edges = np.linspace(0.0, 1.0, k + 1)
    index = np.searchsorted(edges[1:-1], p, side="left")  # p == an inner edge goes to the bin on its left
    rows = []
    for b in range(k):
        members = index == b
        count = int(members.sum())
        mean_p = float(p[members].mean()) if count else None
        rate = float(y[members].mean()) if count else None
        rows.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "count": count, "mean_probability": mean_p,
                     "positive_rate": rate, "gap": None if count == 0 else rate - mean_p})
    return rows


def expected_calibration_error(probs: Iterable[float], labels: Iterable[Any], n_bins: int = DEFAULT_BINS) -> dict[str, Any]:
    """Expected calibration error over ``n_bins`` equal-width bins, with the per-bin rows.

    Returns:
        ``{"ece", "mce", "n_bins", "n", "bins"}``: ECE = sum of ``n_bin / n * |gap|``; MCE = the
        largest ``|gap|`` over non-empty bins; ``bins`` as :func:`reliability_bins`.

    Example:
        >>> r = expected_calibration_error([0.2, 0.2, 0.9], [False, True, True], n_bins=5)  # 0.2 is an edge: first bin
        >>> round(r["ece"], 4), round(r["mce"], 4), [b["count"] for b in r["bins"]]
        (0.2333, 0.3, [2, 0, 0, 0, 1])
    """
    rows = reliability_bins(probs, labels, n_bins)
    n = sum(r["count"] for r in rows)
    filled = [r for r in rows if r["count"]]
    ece = float(sum(r["count"] / n * abs(r["gap"]) for r in filled))
    mce = float(max(abs(r["gap"]) for r in filled))
    return {"ece": ece, "mce": mce, "n_bins": len(rows), "n": n, "bins": rows}


def brier_score(probs: Iterable[float], labels: Iterable[Any]) -> float:
    """Brier score, the mean of ``(p - y)^2``: scikit-learn's ``brier_score_loss``.

    Example:
        >>> round(brier_score([1.0, 0.5, 0.2], [True, True, False]), 6)   # (0 + 0.25 + 0.04) / 3
        0.096667
    """
    p, y = _inputs(probs, labels)
    return float(library("sklearn.metrics", "brier_score").brier_score_loss(y, p, pos_label=True))


def log_loss(probs: Iterable[float], labels: Iterable[Any], eps: float = EPS) -> float:
    """Mean negative log-likelihood (natural log) of the labels, ``p`` clipped to ``[eps, 1 - eps]``: scikit-learn's
    ``log_loss``.

    Example:
        >>> round(log_loss([0.5, 0.8], [True, False]), 6)   # (log 2 + log 5) / 2
        1.151293
    """
    p, y = _inputs(probs, labels)
    return float(library("sklearn.metrics", "log_loss").log_loss(y, np.clip(p, eps, 1.0 - eps), labels=[False, True]))


def logit_log_loss(logits: Iterable[float], labels: Iterable[Any]) -> float:
    """:func:`log_loss` of ``sigmoid(logits)`` computed from the logits (exact for large |logit|, no clipping).

    Example:
        >>> round(logit_log_loss([0.0, 50.0], [True, False]), 6)   # (log 2 + 50) / 2, where log_loss would clip
        25.346574
    """
    z, y = as_scored(logits, labels, "logits")
    return float(np.mean(np.logaddexp(0.0, np.where(y, -z, z))))  # softplus


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))


def p_yes(scores: Iterable[float]) -> np.ndarray:
    """``sigmoid(PLUIE)`` of every score, computed without overflow.

    Example:
        >>> p_yes([0.0, -1000.0, 1000.0]).tolist()
        [0.5, 0.0, 1.0]
    """
    return _sigmoid(as_scores(scores))


def calibration_metrics(probs: Iterable[float], labels: Iterable[Any], n_bins: int = DEFAULT_BINS,
                        logits: Iterable[float] | None = None) -> dict[str, Any]:
    """ECE (with its bins), Brier score and log loss of one set of probabilities.

    Args:
        logits: the log-odds the probabilities come from, if known: the log loss is then exact
            (:func:`logit_log_loss`) instead of clipped.

    Returns:
        ``{"n", "ece", "mce", "brier", "log_loss", "n_bins", "bins"}``.

    Example:
        >>> m = calibration_metrics([0.5, 0.5], [True, False])
        >>> m["ece"], m["brier"], round(m["log_loss"], 4)
        (0.0, 0.25, 0.6931)
    """
    p, y = _inputs(probs, labels)
    ece = expected_calibration_error(p, y, n_bins)
    loss = logit_log_loss(logits, y) if logits is not None else log_loss(p, y)
    return {"n": int(p.size), "ece": ece["ece"], "mce": ece["mce"], "brier": brier_score(p, y), "log_loss": loss,
            "n_bins": ece["n_bins"], "bins": ece["bins"]}


# fitting ----------------------------------------------------------------------------------------
@dataclass
class CalibrationConfig:
    """Options of :func:`fit_calibration`, in the style of PEFT's configs.

    Example:
        >>> CalibrationConfig(heldout_fraction=1.0)
        Traceback (most recent call last):
        ...
        ValueError: heldout_fraction must be a number with 0 <= x < 1, got 1.0.
    """

    heldout_fraction: float = field(default=0.3, metadata={
        "help": "share of the labelled items kept out of the fit; the before/after metrics are computed on them "
                "(0: no held-out part, the metrics are then in-sample)", "aliases": ["--heldout"]})
    seed: int = field(default=0, metadata={"help": "seed of the held-out split (numpy default_rng permutation)"})
    n_bins: int = field(default=DEFAULT_BINS, metadata={"help": "equal-width bins of the expected calibration error",
                                                        "aliases": ["--bins"]})
    l2: float = field(default=1e-4, metadata={
        "help": "ridge penalty 0.5 * l2 * (a^2 + b^2) added to the mean log loss; keeps the fit finite when the "
                "scores separate the labels perfectly (0: plain maximum likelihood)"})
    max_iter: int = field(default=100, metadata={"help": "Newton iterations at most"})
    tol: float = field(default=1e-10, metadata={"help": "stop when the gradient and the Newton decrement fall below this "
                                                        "(scikit-learn's newton-cholesky solver)"})

    def __post_init__(self) -> None:
        check_number("heldout_fraction", self.heldout_fraction, "a number with 0 <= x < 1", lambda f: 0 <= f < 1, _NUMBER)
        check_number("seed", self.seed, "a whole number >= 0", lambda s: s >= 0, _WHOLE)
        _check_bins(self.n_bins)
        check_number("l2", self.l2, "a finite number >= 0", lambda v: v >= 0, _NUMBER)
        check_number("max_iter", self.max_iter, "a positive integer", lambda v: v >= 1, _WHOLE)
        check_number("tol", self.tol, "a positive number", lambda v: v > 0, _NUMBER)


def heldout_split(n: int, fraction: float, seed: int = 0, parts: str = "fit",
                  items: str = "labelled items") -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(fit, held-out)`` of a seeded random split (the tuner's too: :meth:`PairData.split
    <pluie_reward.tools.tune.data.PairData.split>`): the held-out part has ``round(fraction * n)`` items, at least one
    when ``fraction > 0``; both sorted. ``parts`` and ``items`` name the fit part and the items in the error.

    Example:
        >>> [part.tolist() for part in heldout_split(5, 0.4, seed=0)]
        [[0, 1, 3], [2, 4]]
    """
    held = 0 if fraction <= 0 else max(1, int(round(fraction * n)))
    if held >= n:
        raise ValueError(f"{n} item(s) cannot be split into {parts} and held-out parts (heldout_fraction={fraction}); "
                         f"give more {items} or set heldout_fraction=0.")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[held:]), np.sort(order[:held])


def fit_platt(scores: Iterable[float], labels: Iterable[Any], l2: float = 1e-4, max_iter: int = 100,
              tol: float = 1e-10) -> tuple[float, float]:
    """``(a, b)`` minimising ``mean log loss of sigmoid(a * s + b) + 0.5 * l2 * (a^2 + b^2)``: scikit-learn's
    ``LogisticRegression(solver="newton-cholesky", C=1 / (n * l2))`` on the columns ``[s, 1]`` without its own
    intercept, so that the bias is penalised as the slope is. Labels must hold both values; ``max_iter`` and
    ``tol`` as in :class:`CalibrationConfig`.

    Example:
        >>> a, b = fit_platt([0, 0, 0, 0, 1, 1, 1, 1], [1, 0, 0, 0, 1, 1, 1, 0], l2=0)
        >>> round(b, 6), round(a + b, 6)   # logit(1/4) = -log 3 at s = 0, logit(3/4) = log 3 at s = 1
        (-1.098612, 1.098612)
    """
    s, y = as_scored(scores, labels)
    if y.all() or not y.any():
        raise ValueError(f"the calibration fit needs both positive and negative labels; all {s.size} are "
                         f"{'positive' if y.all() else 'negative'}.")
    what = "the calibration fit (fit_platt)"
    model = library("sklearn.linear_model", what).LogisticRegression(
        C=np.inf if l2 == 0 else 1.0 / (s.size * l2), fit_intercept=False, solver="newton-cholesky", max_iter=max_iter, tol=tol)
    with warnings.catch_warnings():  # max_iter reached: the last iterate is returned, without a warning
        warnings.simplefilter("ignore", library("sklearn.exceptions", what).ConvergenceWarning)
        w = model.fit(np.stack([s, np.ones_like(s)], axis=1), y).coef_[0]
    if not np.all(np.isfinite(w)):
        raise FloatingPointError(f"the calibration fit diverged (a, b = {w.tolist()}); raise l2.")
    return float(w[0]), float(w[1])


def fit_calibration(
    scores: Iterable[float],
    labels: Iterable[Any],
    heldout_fraction: float = 0.3,
    seed: int = 0,
    *,
    config: CalibrationConfig | None = None,
    template: str | None = None,
    judge: str | None = None,
) -> Calibration:
    """Fit ``p = sigmoid(a * PLUIE + b)`` on labelled scores, keeping a seeded held-out split for the
    before (``p_yes = sigmoid(PLUIE)``) / after (calibrated ``p``) metrics.

    Args:
        scores: the judge's PLUIE log-ratios (``Judge.score`` floats of a Yes/No template).
        heldout_fraction: share of the items kept out of the fit (0: fit on all, metrics in-sample).
        config: further options (:class:`CalibrationConfig`); its ``heldout_fraction`` and ``seed``
            win over the arguments when given.
        template, judge: names recorded in the result (what the scores came from).

    Returns:
        A :class:`~pluie_reward.core.calibration.Calibration` with ``metrics = {"heldout": {"before",
        "after"}, "fit": {"before", "after"}}`` (``"heldout"`` only when items were held out).

    Example:
        >>> c = fit_calibration([-3, -1, -2, 0.5, 2, 3, -0.5, 1, 4, -4], [0, 0, 0, 1, 1, 1, 1, 0, 1, 0])
        >>> c.n_fit, c.n_heldout, c.a > 0
        (7, 3, True)
    """
    config = config or CalibrationConfig(heldout_fraction=heldout_fraction, seed=seed)
    s, y = as_scored(scores, labels)
    fit, held = heldout_split(s.size, config.heldout_fraction, config.seed)
    try:
        a, b = fit_platt(s[fit], y[fit], config.l2, config.max_iter, config.tol)
    except ValueError as err:
        raise ValueError(f"{err} (fit part of {fit.size} item(s) after holding out {held.size}; seed {config.seed})") from None
    metrics = {"fit": _before_after(s[fit], y[fit], a, b, config.n_bins)}
    if held.size:
        metrics = {"heldout": _before_after(s[held], y[held], a, b, config.n_bins), **metrics}
    return Calibration(a=a, b=b, template=template, judge=judge, n_fit=int(fit.size), n_heldout=int(held.size),
                       heldout_fraction=float(config.heldout_fraction), seed=int(config.seed), n_bins=config.n_bins,
                       metrics=metrics)


def _before_after(s: np.ndarray, y: np.ndarray, a: float, b: float, n_bins: int) -> dict[str, Any]:
    after = a * s + b
    return {"before": calibration_metrics(_sigmoid(s), y, n_bins, logits=s),
            "after": calibration_metrics(_sigmoid(after), y, n_bins, logits=after)}


def calibration_report(scores: Sequence[float], labels: Sequence[Any], *, n_bins: int = DEFAULT_BINS,
                       heldout_fraction: float = 0.3, seed: int = 0) -> dict[str, Any]:
    """What an evaluation report shows about one judged condition: calibration metrics of
    ``p_yes = sigmoid(score)`` on all items, and a Platt fit with before/after on a held-out split
    (``"fit"`` is ``None``, with ``"fit_error"`` saying why, when the split or the fit is not possible).

    Example:
        >>> r = calibration_report([-2.0, 1.0, 3.0, -1.0], [False, True, True, False], heldout_fraction=0)
        >>> r["n"], round(r["brier"], 4), r["fit"]["n_fit"]
        (4, 0.0403, 4)
    """
    s, y = as_scored(scores, labels)
    out: dict[str, Any] = calibration_metrics(_sigmoid(s), y, n_bins, logits=s)
    try:
        c = fit_calibration(s, y, config=CalibrationConfig(heldout_fraction=heldout_fraction, seed=seed, n_bins=n_bins))
    except ValueError as err:
        out.update(fit=None, fit_error=str(err))
    else:
        out["fit"] = {k: v for k, v in c.to_dict().items() if k != "format"}
    return out


# in evaluation reports -----------------------------------------------------------------------------
EVAL_HELDOUT = 0.3  # the held-out share and seed of the Platt fit in evaluation reports
EVAL_SEED = 0


def calibration_markdown(calibration: Mapping[str, Mapping[str, Any]], bins: bool = True) -> str:
    """The Markdown of an evaluation's ``results["calibration"]`` (:func:`calibration_report` per judged Yes/No
    condition): ECE, Brier, log loss, the Platt fit with before → after, and (``bins``) the per-bin rows.

    Example:
        >>> r = {"PLUIE": calibration_report([-2.0, 1.0, 3.0, -1.0, 0.5, -0.2], [0, 1, 1, 0, 0, 1], heldout_fraction=0.5)}
        >>> print(calibration_markdown(r, bins=False).splitlines()[2])  # doctest: +NORMALIZE_WHITESPACE
        | metric | n | ECE | Brier | log loss | Platt a | Platt b | held-out n | ECE before → after | Brier before → after
        | log loss before → after |
    """
    first = next(iter(calibration.values()))
    rows, notes, tables = [], [], []
    for name, r in calibration.items():
        fit = r.get("fit")
        cells = [name, r["n"], *(number(r[k], 3) for k in ("ece", "brier", "log_loss"))]
        held = (fit or {}).get("metrics", {}).get("heldout")
        if fit is None:
            cells += ["–"] * 6
            notes.append(f"- {name}: no Platt fit: {r.get('fit_error', 'not possible')}")
        else:
            cells += [number(fit["a"], 3), number(fit["b"], 3)]
            if held:
                cells += [fit["n_heldout"]] + [f"{number(held['before'][k], 3)} → {number(held['after'][k], 3)}"
                                               for k in ("ece", "brier", "log_loss")]
            else:
                cells += ["0 (in-sample)"] + ["–"] * 3
        rows.append(cells)
        if bins:
            tables.append(f"{name}: p_yes per bin (bins (lo, hi], the first includes 0; gap = share positive − mean p_yes; "
                          "an empty bin shows –)\n\n" + markdown_table(
                ["bin", "items", "mean p_yes", "share positive", "gap"],
                [[f"{b['lo']:.1f}–{b['hi']:.1f}", b["count"],
                  *(("–",) * 3 if not b["count"] else
                    (number(b["mean_probability"], 3), number(b["positive_rate"], 3), f"{b['gap']:+.3f}"))] for b in r["bins"]],
                align="lrrrr"))
    fit = next((r["fit"] for r in calibration.values() if r.get("fit")), None)
    how = (f"Platt fit p = sigmoid(a · score + b) on {fit['n_fit']} items (minimal log loss; random split, seed {fit['seed']}), before → "
           f"after on the {fit['n_heldout']} held-out items" if fit else "Platt fit p = sigmoid(a · score + b)")
    head = (f"Calibration of p_yes = sigmoid(score) on all items: expected calibration error over {first['n_bins']} "
            f"equal-width bins, Brier score, log loss (lower is better); {how}. Apply a fit with "
            "`pluie-reward calibrate` and Judge.load(..., calibration=...).")
    table = markdown_table(["metric", "n", "ECE", "Brier", "log loss", "Platt a", "Platt b", "held-out n",
                            "ECE before → after", "Brier before → after", "log loss before → after"], rows,
                           align="lrrrrrrrrrr")
    return "\n\n".join([head, table, *(["\n".join(notes)] if notes else []), *tables])


def heldout_calibrated(scores: Sequence[float], labels: Sequence[Any], fit: Mapping[str, Any]) -> tuple[list[float], list[bool]]:
    """The calibrated probabilities and labels of a report's held-out items (its split redone from
    ``fit``'s ``heldout_fraction`` and ``seed``), e.g. for the reliability diagram.

    Example:
        >>> fit = calibration_report([-2.0, 1.0, 3.0, -1.0, 0.5, -0.2], [0, 1, 1, 0, 0, 1], heldout_fraction=0.5)["fit"]
        >>> len(heldout_calibrated([-2.0, 1.0, 3.0, -1.0, 0.5, -0.2], [0, 1, 1, 0, 0, 1], fit)[0])
        3
    """
    s, y = as_scored(scores, labels)
    _, held = heldout_split(s.size, fit["heldout_fraction"], fit["seed"])
    return [float(v) for v in _sigmoid(fit["a"] * s[held] + fit["b"])], [bool(v) for v in y[held]]
