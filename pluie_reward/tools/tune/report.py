"""The report of a tuning run: the student's agreement with the teacher and its classification of labelled
pairs (:mod:`pluie_reward.tools.evaluation.metrics`), before and after tuning, on each evaluation set; the
adapter's card (``pluie_tune.json`` and ``README.md``) and threshold-curve plots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..evaluation.metrics import as_scores, classification_report
from ..evaluation.plots import pearson, plot_threshold_curves
from ..report import markdown_table, number, percent, write_outputs


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks (1-based, ties averaged): pandas' ``rank`` (pandas comes with datasets, so Spearman needs no extra)."""
    import pandas as pd

    return pd.Series(x).rank(method="average").to_numpy(dtype=float)


def agreement(student: Iterable[float], teacher: Iterable[float], threshold: float = 0.0) -> dict[str, Any]:
    """How well student scores follow teacher scores: Pearson and Spearman (``None`` for a constant series), the
    share of equal verdicts at ``threshold``, the mean absolute difference, each side's positive rate.

    Example:
        >>> agreement([1, 2, 3], [10, 20, 35])["spearman"]
        1.0
    """
    s, t = as_scores(student, "student scores"), as_scores(teacher, "teacher scores")
    if len(s) != len(t):
        raise ValueError(f"student and teacher scores differ in length ({len(s)} vs {len(t)}).")
    return {
        "n": int(len(s)),
        "pearson": pearson(s, t),
        "spearman": pearson(_ranks(s), _ranks(t)),
        "verdict_agreement": float(np.mean((s > threshold) == (t > threshold))),
        "mean_abs_difference": float(np.mean(np.abs(s - t))),
        "student_positive_rate": float(np.mean(s > threshold)),
        "teacher_positive_rate": float(np.mean(t > threshold)),
    }


def evaluate_scores(scores: Sequence[float], labels: Any = None, targets: Any = None) -> dict[str, Any]:
    """Metrics of one set of student scores: ``teacher`` (:func:`agreement`) with teacher targets, ``labels``
    (:func:`~pluie_reward.tools.evaluation.metrics.classification_report`) with labels, and the mean score.

    Example:
        >>> evaluate_scores([1.0, -1.0], labels=[True, False])["labels"]["natural"]["accuracy"]
        1.0
    """
    s = as_scores(scores)
    out: dict[str, Any] = {"n": int(len(s)), "mean_score": float(s.mean())}
    if targets is not None:
        out["teacher"] = agreement(s, targets)
    if labels is not None:
        out["labels"] = classification_report(s, labels)
    return out


# the card --------------------------------------------------------------------------------------
def _rows(name: str, before: Mapping[str, Any], after: Mapping[str, Any], teacher: Mapping[str, Any] | None) -> list[list[str]]:
    rows = []

    def add(metric: str, get: Any, fmt: Any = number, teacher_too: bool = False) -> None:
        try:
            row = [name, metric, fmt(get(before)), fmt(get(after))]
        except KeyError:
            return
        if teacher is not None:
            try:
                row.append(fmt(get(teacher)) if teacher_too else "")
            except KeyError:
                row.append("")
        rows.append(row)

    add("Pearson with teacher", lambda m: m["teacher"]["pearson"])
    add("Spearman with teacher", lambda m: m["teacher"]["spearman"])
    add("verdicts equal to teacher's (at 0)", lambda m: m["teacher"]["verdict_agreement"], percent)
    add("mean |student - teacher|", lambda m: m["teacher"]["mean_abs_difference"])
    add("accuracy at 0", lambda m: m["labels"]["natural"]["accuracy"], percent, True)
    add("F1 at 0", lambda m: m["labels"]["natural"]["f1"], percent, True)
    for key, label in (("accuracy", "best accuracy (threshold)"), ("f1", "best F1 (threshold)")):
        add(label, lambda m, key=key: (m["labels"][f"best_{key}"][key], m["labels"][f"best_{key}"]["threshold"]),
            lambda v: f"{percent(v[0])} ({v[1]:.2f})", True)
    add("positive verdicts at 0", lambda m: m["teacher"]["student_positive_rate"] if "teacher" in m
        else (m["labels"]["natural"]["tp"] + m["labels"]["natural"]["fp"]) / m["n"], percent, True)
    add("mean score", lambda m: m["mean_score"], number, True)
    return rows


def metrics_table(evaluations: Mapping[str, Mapping[str, Any]]) -> str:
    """A Markdown table of before/after metrics for every evaluation set (and the teacher's on labelled sets).

    Example:
        >>> e = {"held-out": {"before": evaluate_scores([-1.0, -2.0], labels=[True, False]),
        ...                   "after": evaluate_scores([1.0, -2.0], labels=[True, False])}}
        >>> print(metrics_table(e).splitlines()[2])
        | held-out (n=2) | accuracy at 0 | 50.0% | 100.0% |
    """
    with_teacher = any("teacher" in ev for ev in evaluations.values())
    rows = []
    for name, ev in evaluations.items():
        rows += _rows(f"{name} (n={ev['before']['n']})", ev["before"], ev["after"], ev.get("teacher", {} if with_teacher else None))
    headers = ["set", "metric", "before", "after"] + (["teacher"] if with_teacher else [])
    return markdown_table(headers, rows)


def write_card(directory: Path, card: Mapping[str, Any]) -> tuple[Path, Path | None]:
    """Write ``pluie_tune.json`` (the card) and ``README.md`` into the adapter folder; the README says what the adapter
    is, how to load it, the data and the before/after metrics."""
    data = card["data"]
    lines = [
        f"# PLUIE judge adapter: `{card['template']}` on {card['base_model']}",
        "",
        "A LoRA adapter tuned by `pluie-reward tune` so that the judge's own PLUIE score, "
        "log p(Yes) − log p(No) read in one forward pass with this template, follows the "
        f"{card['supervision']}. The natural threshold stays 0.",
        "",
        "```python",
        "from pluie_reward import Judge",
        "judge = Judge.load("
        + ("" if card.get("load_model") is None else f"{card['load_model']!r}, ")
        + 'adapter="path/to/this/folder")'
        + ("  # the embedded SmolLM2 base" if card.get("load_model") is None else ""),
        f"judge.score(\"path/to/this/folder/template.yaml\", source=[...], hypothesis=[...])  # template {card['template']!r}",
        "```",
        "",
        f"Data: {data['train']} training pairs, {data['heldout']} held-out pairs"
        + "".join(f", {n} pairs in {name!r}" for name, n in data.get("eval", {}).items())
        + f". Teacher: {card.get('teacher') or 'none'}. Loss: {card['loss']}.",
        "",
        metrics_table(card["evaluation"]),
        "",
        "Threshold curves (accuracy/recall/precision/F1 against the decision threshold): "
        + ", ".join(f"`{p}`" for p in card.get("plots", [])) if card.get("plots") else "",
        "",
        "Before/after: the base model without / with this adapter, both through `Judge.score`; the teacher "
        "column (labelled sets the teacher scored) is the teacher's own classification. Per-item scores: "
        "`scores.jsonl`. Training configuration and loss history: `pluie_tune.json` (`config`, `history`).",
        "",
    ]
    return write_outputs(directory, card, "\n".join(lines), names=("pluie_tune.json", "README.md"), default=_jsonable)


def _jsonable(value: Any) -> Any:
    """numpy numbers and arrays as Python ones, anything else JSON cannot hold as its text."""
    return value.tolist() if isinstance(value, (np.integer, np.floating, np.ndarray)) else str(value)


def write_plots(directory: Path, name: str, before: Sequence[float], after: Sequence[float], labels: Any, what: str) -> list[str]:
    """Threshold curves of the scores before and after tuning against ``labels`` (true labels or the teacher's
    verdicts, named by ``what``). Returns the file names written (none without matplotlib).

    Example:
        >>> before, after, labels = [-1.0, 0.5, 2.0], [-2.0, 1.0, 3.0], [False, True, True]
        >>> write_plots(Path("out"), "heldout", before, after, labels, "labels")
        ['heldout_thresholds_before.png', 'heldout_thresholds_after.png']
    """
    try:
        written = []
        for when, scores in (("before", before), ("after", after)):
            file = f"{name}_thresholds_{when}.png"
            plot_threshold_curves(scores, labels, directory / file, title=f"{name}, {when} tuning (against {what})")
            written.append(file)
        return written
    except ModuleNotFoundError:
        return []
