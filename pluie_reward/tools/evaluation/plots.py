"""PNG figures of the seeds on matplotlib's Agg canvas: metric curves against the threshold, score histograms
and score against edit distance per label, share predicted paraphrase per STS bin, error rates beside the
peers, reliability diagrams. Every figure uses the same label names (:data:`LABEL_NAMES`) and colours.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .calibration import expected_calibration_error
from .metrics import as_scored, as_scores, best_threshold, candidate_thresholds, library, metrics_at

# the seeds' colours: blue accuracy, orange recall, red precision, green F1
CURVES = (("accuracy", "tab:blue"), ("recall", "tab:orange"), ("precision", "tab:red"), ("f1", "tab:green"))
LABEL_NAMES = ("negative", "positive")  # expected label False / True, in every plot of every command
LABEL_STYLE = {False: ("tab:orange", "s"), True: ("tab:blue", "o")}  # ParaPLUIE Fig. 2: orange squares, blue circles
PLUIE_AXIS = "PLUIE score: log p(Yes) − log p(No)"


def _figure(width: float = 6.4, height: float = 4.0, columns: int = 1) -> tuple[Any, Any]:
    """A figure on matplotlib's Agg canvas and its axes (``columns`` > 1: that many, sharing y)."""
    figure = library("matplotlib.figure", "the plots").Figure(figsize=(width, height), dpi=100)
    return figure, figure.subplots(1, columns, sharey=True)


def x_range(scores: np.ndarray, natural_threshold: float | None = None, pad: float = 0.03) -> tuple[float, float]:
    """The plotted threshold range: the scores (and the natural threshold), padded by ``pad`` of the span.

    Example:
        >>> x_range(np.array([0.2, 0.8]))
        (0.182, 0.8180000000000001)
    """
    lo, hi = float(scores.min()), float(scores.max())
    if natural_threshold is not None:
        lo, hi = min(lo, natural_threshold), max(hi, natural_threshold)
    margin = (hi - lo) * pad if hi > lo else 0.5
    return lo - margin, hi + margin


def plot_threshold_curves(
    scores: Iterable[float],
    labels: Iterable[Any],
    path: str | Path,
    *,
    title: str | None = None,
    natural_threshold: float | None = 0.0,
    xlabel: str = "decision threshold (positive when score > threshold)",
) -> Path:
    """Accuracy, recall, precision and F1 of ``score > t`` against ``t``, the best F1 marked at the threshold
    :func:`best_threshold` reports and the natural threshold dashed. Returns the written PNG path.

    Example:
        >>> scores, labels = [-2.1, -0.4, 0.3, 1.8, 2.5, 3.1], [False, False, True, False, True, True]
        >>> plot_threshold_curves(scores, labels, "out/mrpc_curves.png", title="MRPC")
        PosixPath('out/mrpc_curves.png')
    """
    s, y = as_scored(scores, labels)
    lo, hi = x_range(s, natural_threshold)
    inside = [t for t in candidate_thresholds(s) if lo <= t <= hi]
    grid = np.unique(np.concatenate([inside, s, np.linspace(lo, hi, 400)]))  # constant on [s_k, s_k+1): exact steps
    m = metrics_at(s, y, grid)
    figure, ax = _figure()
    for name, colour in CURVES:
        ax.step(grid, m[name], where="post", color=colour, label=name, linewidth=1.4)
    best = best_threshold(s, y, "f1")
    shown = min(max(best["threshold"], lo), hi)  # "all positive"/"all negative" lie outside the scores: edge
    note = " (every item positive)" if best["threshold"] < s.min() else " (every item negative)" if best["threshold"] > s.max() else ""
    ax.scatter([shown], [best["f1"]], color="tab:green", zorder=3, s=30)
    ax.annotate(f"best F1 {best['f1']:.2f} at threshold {best['threshold']:.3g}{note}", (shown, best["f1"]),
                textcoords="offset points", xytext=(6, 8), fontsize=8,
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8, "linewidth": 0})
    if natural_threshold is not None:
        ax.axvline(natural_threshold, color="grey", linestyle="--", linewidth=1, label=f"threshold {natural_threshold:g}")
    ax.set(xlim=(lo, hi), ylim=(-0.02, 1.02), xlabel=xlabel, ylabel="metric value")
    return _save(figure, path, {"best_f1_threshold": best["threshold"], "best_f1": best["f1"], "xlim": [lo, hi]},
                 ax=ax, title=title or "classification metrics against the threshold")


def histogram_edges(scores: np.ndarray, max_bins: int = 30, min_bins: int = 5) -> np.ndarray:
    """Bin edges: numpy's "auto" rule, kept between ``min_bins`` and ``max_bins`` bins.

    Example:
        >>> len(histogram_edges(np.array([0.0, 1.0, 2.0]))) - 1
        5
    """
    if scores.min() == scores.max():
        return np.array([scores.min() - 0.5, scores.max() + 0.5])
    auto = len(np.histogram_bin_edges(scores, bins="auto")) - 1
    return np.histogram_bin_edges(scores, bins=int(min(max(auto, min_bins), max_bins)))


def plot_score_histograms(
    scores: Iterable[float],
    labels: Iterable[Any],
    path: str | Path,
    *,
    title: str | None = None,
    label_names: Sequence[str] = LABEL_NAMES,
    bins: int = 30,
    natural_threshold: float | None = 0.0,
    xlabel: str = "score",
) -> Path:
    """Histograms of the scores of negative and positive items, side by side per bin; when every item has
    the same expected label, the correct side of the threshold is shaded and the error rate written. Its facts
    (:func:`plot_facts`) hold the number of bins and each label's counts per bin, negative first.

    Example:
        >>> scores, labels = [-2.1, -0.4, 0.3, 1.8, 2.5, 3.1], [False, False, True, False, True, True]
        >>> plot_score_histograms(scores, labels, "out/mrpc_hist.png")
        PosixPath('out/mrpc_hist.png')
    """
    from matplotlib.ticker import MaxNLocator

    s, y = as_scored(scores, labels)
    edges = histogram_edges(s, max_bins=bins)
    figure, ax = _figure()
    present = [v for v in (False, True) if (y == v).any()]
    parts = [s[y == value] for value in present]
    counts, _, _ = ax.hist(parts, bins=edges, rwidth=0.95, color=[LABEL_STYLE[v][0] for v in present], alpha=0.8,
                           label=[f"{label_names[int(v)]} (n={part.size})" for v, part in zip(present, parts)])
    lo, hi = x_range(s, natural_threshold)
    lo, hi = min(lo, edges[0]), max(hi, edges[-1])
    if natural_threshold is not None:
        ax.axvline(natural_threshold, color="grey", linestyle="--", linewidth=1, label=f"threshold {natural_threshold:g}")
        if len(present) == 1:
            expected = present[0]
            wrong = int(((s > natural_threshold) != expected).sum())
            room = 0.15 * (hi - lo)  # show some of the correct side even when no score falls there
            lo, hi = (lo, max(hi, natural_threshold + room)) if expected else (min(lo, natural_threshold - room), hi)
            side = (natural_threshold, hi) if expected else (lo, natural_threshold)
            ax.axvspan(*side, color="tab:green", alpha=0.08, zorder=0,
                       label=f"correct side: {label_names[int(expected)]} ({wrong}/{s.size} wrong)")
    ax.set(xlim=(lo, hi), xlabel=xlabel, ylabel="items")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    facts = {"bins": len(edges) - 1, "yticks": [float(t) for t in ax.get_yticks()], "counts": np.atleast_2d(counts).astype(int).tolist()}
    return _save(figure, path, facts,
                 ax=ax, title=title or "score distribution per label", legend={"title": "expected label"})


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r, ``None`` when undefined (fewer than 2 points or a constant variable).

    Example:
        >>> pearson([1, 2, 3], [2, 4, 7])
        0.9933992677987828
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:  # not std(): [0.1] * 3 has a std of 1e-17
        return None
    return float(np.corrcoef(a, b)[0, 1])


def plot_edit_distance(
    scores: Iterable[float],
    labels: Iterable[Any],
    distances: Iterable[float],
    path: str | Path,
    *,
    title: str | None = None,
    natural_threshold: float | None = 0.0,
    ylabel: str = "score",
) -> Path:
    """Score against normalised edit distance, one marker per label (ParaPLUIE Fig. 2), with Pearson's r
    inside each label in the legend.

    Example:
        >>> scores, labels = [-2.1, -0.4, 0.3, 1.8, 2.5, 3.1], [False, False, True, False, True, True]
        >>> distances = [0.1, 0.5, 0.3, 0.2, 0.4, 0.1]  # e.g. normalised Levenshtein of each pair
        >>> plot_edit_distance(scores, labels, distances, "out/PLUIE_edit_distance.png")
        PosixPath('out/PLUIE_edit_distance.png')
    """
    s, y = as_scored(scores, labels)
    d = as_scores(distances, "distances")
    figure, ax = _figure()
    for value in (True, False):
        mask = y == value
        if not mask.any():
            continue
        colour, marker = LABEL_STYLE[value]
        r = pearson(d[mask], s[mask])
        ax.scatter(d[mask], s[mask], s=14, marker=marker, facecolors="none" if value else colour, edgecolors=colour,
                   alpha=0.7, linewidths=0.8,
                   label=f"{LABEL_NAMES[int(value)]} (n={int(mask.sum())}, r={'N/A' if r is None else f'{r:.2f}'})")
    if natural_threshold is not None:
        ax.axhline(natural_threshold, color="tab:red", linewidth=1, label=f"threshold {natural_threshold:g}")
    ax.set(xlabel="normalised edit distance (character Levenshtein / longer length)", ylabel=ylabel)
    return _save(figure, path, ax=ax, title=title or "score against edit distance",
                 legend={"title": "expected label (Pearson r with distance)"})


def plot_reliability(
    probs: Iterable[float],
    labels: Iterable[Any],
    path: str | Path,
    *,
    title: str | None = None,
    n_bins: int = 10,
    calibrated: tuple[Iterable[float], Iterable[Any]] | None = None,
    name: str = "p_yes = sigmoid(PLUIE)",
    calibrated_name: str = "Platt-calibrated",
) -> Path:
    """Reliability diagram: per equal-width bin, the share of positive labels against the mean probability,
    item counts by the points and as bars; ECE in the legend.

    Args:
        calibrated: ``(probabilities, labels)`` of a second series, e.g. Platt-calibrated ``p`` on a held-out split.
        name, calibrated_name: the two series' legend names.

    Returns:
        The written PNG path; its facts (:func:`plot_facts`) hold each series' ECE and bin counts.

    Example:
        >>> path = plot_reliability([0.1, 0.8, 0.9], [False, True, False], "out/PLUIE_reliability.png")
        >>> round(plot_facts(path)["p_yes = sigmoid(PLUIE)"]["ece"], 3)
        0.4
    """
    series = [(name, probs, labels, "tab:blue", "o")]
    if calibrated is not None:
        series.append((calibrated_name, calibrated[0], calibrated[1], "tab:green", "s"))
    figure, ax = _figure()
    counts_ax = ax.twinx()
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfectly calibrated")
    facts: dict[str, Any] = {"n_bins": n_bins}
    width = 1.0 / n_bins / len(series)
    for k, (label, p, y, colour, marker) in enumerate(series):
        result = expected_calibration_error(p, y, n_bins)
        rows = [r for r in result["bins"] if r["count"]]
        xs = [r["mean_probability"] for r in rows]
        ys = [r["positive_rate"] for r in rows]
        ax.plot(xs, ys, color=colour, marker=marker, markersize=5, linewidth=1.4,
                label=f"{label}: n={result['n']}, ECE {result['ece']:.3f}")
        for x, yv, r in zip(xs, ys, rows):
            ax.annotate(f"{r['count']}", (x, yv), textcoords="offset points", xytext=(4, -10 if k else 4), fontsize=7,
                        color=colour)
        counts_ax.bar([r["lo"] + k * width for r in result["bins"]], [r["count"] for r in result["bins"]], width=width * 0.9,
                      align="edge", color=colour, alpha=0.15)
        facts[label] = {"ece": result["ece"], "counts": [r["count"] for r in result["bins"]]}
    counts_ax.set_ylabel("items per bin (bars)", fontsize=8)
    counts_ax.set_ylim(0, max(1, *(max(v["counts"]) for k, v in facts.items() if k != "n_bins")) * 3)
    ax.set_zorder(counts_ax.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.set(xlim=(0, 1), ylim=(-0.02, 1.02), xlabel=f"mean predicted probability of the positive label ({n_bins} equal-width bins)",
           ylabel="share of positive labels")
    return _save(figure, path, facts, ax=ax, title=title or "reliability diagram", legend={"loc": "upper left"})


STS_BINS = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5.0001))


def sts_bin_shares(sts: Sequence[float], positive: Sequence[bool]) -> list[tuple[str, int, float | None]]:
    """Share of positives per STS score bin 0-1, 1-2, 2-3, 3-4, 4-5: ``[(bin, n, share or None)]``.

    Example:
        >>> sts_bin_shares([0.5, 0.7, 4.2, 5.0], [False, True, True, True])[0]
        ('0-1', 2, 0.5)
    """
    out = []
    for lo, hi in STS_BINS:
        members = [p for x, p in zip(sts, positive) if lo <= x < hi]
        out.append((f"{lo}-{math.floor(hi)}", len(members), (sum(members) / len(members)) if members else None))
    return out


def plot_sts_bins(
    sts: Sequence[float],
    predicted: Sequence[bool],
    path: str | Path,
    *,
    human: tuple[Sequence[float], Sequence[bool]] | None = None,
    title: str | None = None,
) -> Path:
    """PARAPHRASUS Fig. 1: the share predicted "paraphrase" per STS bin; ``human`` adds the STS-H annotators'. Its facts
    (:func:`plot_facts`) hold each series' :func:`sts_bin_shares`.

    Example:
        >>> sts_scores = [0.5, 1.5, 2.5, 3.5, 4.5, 4.9]  # STS-benchmark similarity of each pair
        >>> verdicts = [False, False, True, True, True, True]  # the judge's
        >>> plot_sts_bins(sts_scores, verdicts, "out/sts_bins.png")
        PosixPath('out/sts_bins.png')
    """
    judged = sts_bin_shares(sts, predicted)
    figure, ax = _figure()
    x = np.arange(len(judged))
    series = [("judge: predicted paraphrase", judged, "tab:blue")]
    if human is not None:
        series.append(("STS-H annotators: paraphrase", sts_bin_shares(*human), "tab:grey"))
    width = 0.8 / len(series)
    for k, (name, shares, colour) in enumerate(series):
        values = [100 * v if v is not None else 0.0 for _, _, v in shares]
        bars = ax.bar(x + (k - (len(series) - 1) / 2) * width, values, width=width * 0.95, color=colour, label=name)
        ax.bar_label(bars, ["–" if v is None else f"{100 * v:.0f}%\nn={n}" for _, n, v in shares], fontsize=7, padding=2)
    ax.set_xticks(x, [f"{b}" for b, _, _ in judged])
    ax.set(xlabel="STS score bin (0 = unrelated, 5 = equivalent); – = no pair in the bin", ylabel="% of the bin's pairs", ylim=(0, 118))
    return _save(figure, path, {name: shares for name, shares, _ in series}, ax=ax,
                 title=title or "share predicted paraphrase per STS bin (PARAPHRASUS Fig. 1)",
                 legend={"loc": "upper left"})


def plot_error_rates(
    columns: Mapping[str, Mapping[str, float | None]],
    path: str | Path,
    *,
    title: str | None = None,
) -> Path:
    """Error rates (%) per row: the first system (this judge) as bars, the others (peers) as markers.

    Example:
        >>> plot_error_rates({"judge": {"MRPC": 0.3}, "llama": {"MRPC": 0.24}}, "out/errors.png")
        PosixPath('out/errors.png')
    """
    systems = list(columns)
    rows = list(dict.fromkeys(row for figures in columns.values() for row in figures))
    figure, ax = _figure(8.6, 0.32 * len(rows) + 1.8)
    y = np.arange(len(rows))
    ours = [columns[systems[0]].get(r) for r in rows]
    ax.barh(y, [100 * v if v is not None else 0 for v in ours], height=0.6, color="tab:blue", alpha=0.45, label=systems[0])
    for yi, row, v in zip(y, rows, ours):
        if v is not None:  # written right of the row's last bar end or marker, so that it hides no peer
            right = max(100 * w for w in (figures.get(row) for figures in columns.values()) if w is not None)
            ax.annotate(f"{100 * v:.1f}%", (right, yi), xytext=(5, -3), textcoords="offset points", fontsize=7,
                        bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "alpha": 0.7, "linewidth": 0})
    palette = ["tab:orange", "tab:red", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:grey", "tab:olive", "tab:cyan", "black"]
    markers = "osD^v<>Pp*X"
    for k, system in enumerate(systems[1:]):
        values = [(yi, 100 * v) for yi, v in zip(y, (columns[system].get(r) for r in rows)) if v is not None]
        if values:
            ax.scatter([v for _, v in values], [yi for yi, _ in values], s=22, marker=markers[k % len(markers)],
                       color=palette[k % len(palette)], label=system, zorder=3)
    ax.set_yticks(y, rows)
    ax.invert_yaxis()
    ax.set(xlim=(0, 105), xlabel="error rate (%), lower is better")
    return _save(figure, path, {"rows": rows, "systems": systems}, ax=ax, title=title or "error rates beside the published peers",
                 legend={"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 7, "title_fontsize": 7,
                         "title": "bars: this judge; markers: peers"})


def plot_facts(path: str | Path) -> dict[str, Any]:
    """What a plot shows, as stored in its PNG "Description" text.

    Example:
        >>> _ = plot_threshold_curves([-2.0, 1.0, 3.0], [False, True, True], "out/plots/PLUIE_thresholds.png")
        >>> plot_facts("out/plots/PLUIE_thresholds.png")["best_f1_threshold"]  # halfway between -2 and 1
        -0.5
    """
    from PIL import Image

    with Image.open(path) as image:
        return json.loads(image.text.get("Description", "{}"))


def _save(figure: Any, path: str | Path, facts: Mapping[str, Any] | None = None, *, ax: Any = None, title: str = "",
          legend: Mapping[str, Any] | None = None) -> Path:
    """Title ``ax`` (wrapped), draw its legend (``legend`` over the defaults) and write the PNG with ``facts``
    in its "Description" text."""
    if ax is not None:
        ax.set_title("\n".join(textwrap.wrap(title, 72)), fontsize=9)
        ax.legend(**{"loc": "best", "fontsize": 8, "title_fontsize": 8, **(legend or {})})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, format="png", metadata={"Description": json.dumps(dict(facts or {}))})
    return path
