"""PNG figures like the seeds' Figures 3-4: accuracy/recall/precision/F1 against the decision
threshold, and score histograms per label. Uses matplotlib's Agg canvas (no display, no pyplot state).

Example:
    >>> plot_threshold_curves([-2.0, 1.0, 3.0], [False, True, True], "curves.png")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .metrics import as_labels, as_scores, candidate_thresholds, metrics_at

# the seeds' colours: blue accuracy, orange recall, red precision, green F1
CURVES = (("accuracy", "tab:blue"), ("recall", "tab:orange"), ("precision", "tab:red"), ("f1", "tab:green"))


def _figure(width: float = 6.4, height: float = 4.0) -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:  # pragma: no cover
        raise ModuleNotFoundError("plots need matplotlib: pip install 'pluie-reward[eval]'.") from err
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot(1, 1, 1)


def plot_threshold_curves(
    scores: Iterable[float],
    labels: Iterable[Any],
    path: str | Path,
    *,
    title: str | None = None,
    natural_threshold: float | None = 0.0,
    points: int = 400,
) -> Path:
    """Accuracy, recall, precision and F1 of ``score > t`` against ``t``; the best F1 is marked and
    the natural threshold drawn as a dashed line. Returns the written PNG path.

    Example:
        >>> plot_threshold_curves(scores, labels, "out/mrpc_curves.png", title="MRPC")  # doctest: +SKIP
    """
    s, y = as_scores(scores), as_labels(labels)
    grid = np.unique(np.concatenate([candidate_thresholds(s), np.linspace(s.min() - 1.0, s.max() + 1.0, points)]))
    m = metrics_at(s, y, grid)
    figure, ax = _figure()
    for name, colour in CURVES:
        ax.plot(grid, m[name], color=colour, label=name, linewidth=1.4)
    best = int(np.argmax(m["f1"]))
    ax.scatter([grid[best]], [m["f1"][best]], color="tab:green", zorder=3, s=30)
    ax.annotate(f"max F1 {m['f1'][best]:.2f} at {grid[best]:.2f}", (grid[best], m["f1"][best]),
                textcoords="offset points", xytext=(6, 8), fontsize=8,
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8, "linewidth": 0})
    if natural_threshold is not None:
        ax.axvline(natural_threshold, color="grey", linestyle="--", linewidth=1, label=f"threshold {natural_threshold:g}")
    ax.set_xlabel("decision threshold")
    ax.set_ylabel("score")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title or "classification metrics against the threshold")
    ax.legend(loc="best", fontsize=8)
    figure.tight_layout()
    return _save(figure, path)


def plot_score_histograms(
    scores: Iterable[float],
    labels: Iterable[Any],
    path: str | Path,
    *,
    title: str | None = None,
    label_names: Sequence[str] = ("negative", "positive"),
    bins: int = 30,
    natural_threshold: float | None = 0.0,
) -> Path:
    """Overlaid histograms of the scores of negative and positive items. Returns the PNG path.

    Example:
        >>> plot_score_histograms(scores, labels, "out/mrpc_hist.png", label_names=("non-paraphrase", "paraphrase"))  # doctest: +SKIP
    """
    s, y = as_scores(scores), as_labels(labels)
    if len(s) != len(y):
        raise ValueError(f"scores and labels differ in length ({len(s)} vs {len(y)}).")
    edges = np.histogram_bin_edges(s, bins=bins)
    figure, ax = _figure()
    for value, name, colour in ((False, label_names[0], "tab:orange"), (True, label_names[1], "tab:blue")):
        part = s[y == value]
        if part.size:
            ax.hist(part, bins=edges, alpha=0.55, color=colour, label=f"{name} (n={part.size})")
    if natural_threshold is not None:
        ax.axvline(natural_threshold, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("score")
    ax.set_ylabel("items")
    ax.set_title(title or "score distribution per label")
    ax.legend(loc="best", fontsize=8)
    figure.tight_layout()
    return _save(figure, path)


def _save(figure: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path
