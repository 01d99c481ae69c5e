"""Markdown tables of evaluation results in the seeds' layouts: Table 1 (classification: threshold,
accuracy, recall, precision, F1) and Table 2 (preference: pairwise accuracy, V, κ, with the "w.g."
columns when a condition gives the gold revision), this run's rows next to the paper's (:func:`task_markdown` picks the task's layout).
"""

from __future__ import annotations

from typing import Any, Mapping

from .calibration import calibration_markdown
from .paraphrasus import markdown_report, partial_note
from ..report import markdown_table, number
from .scoring import JUDGE_ROW

PAPER_BASELINES = {"levenshtein": "Levenshtein", "bleu": "BLEU"}  # our baseline -> the paper's row name
TABLE1 = ("threshold", "accuracy", "recall", "precision", "f1")


def classification_markdown(results: Mapping[str, Any]) -> str:
    """Table 1 layout: metric, threshold choice, Thr., Acc., Rec., Prec., F1 (and the paper's rows).

    Example:
        >>> from pluie_reward.tools.evaluation.tasks import evaluate_classification
        >>> results = evaluate_classification(judge, {"source": ["The cat sleeps.", "Prices rose."],
        ...                                            "hypothesis": ["A cat is asleep.", "Prices fell."]}, [True, False], progress=False)
        >>> print(classification_markdown(results))
        2 pairs, 1 positive; judge tiny-random, template para-fs.
        ...
        | PLUIE | tiny-random (this run) | natural threshold | 0.00 | ...
        | PLUIE | tiny-random (this run) | best F1 (a posteriori) | ...
    """
    ours: dict[str, list[list[str]]] = {}
    judged = {c["name"] for c in results.get("conditions", [{"name": JUDGE_ROW}])}
    paper = results.get("paper")
    for name, report in results["metrics"].items():
        who = _who(results, name in judged)
        shown = PAPER_BASELINES.get(name, name) if paper else name
        for key, label in (("natural", "natural threshold"), ("best_f1", "best F1 (a posteriori)"),
                           ("best_accuracy", "best accuracy (a posteriori)")):
            if key in report:
                ours.setdefault(shown, []).append([shown, who, label, *(number(report[key][k]) for k in TABLE1)])
    published = [[row["metric"], _who(row, True, "paper"), "as published", *(number(row[k]) for k in TABLE1)]
                 for row in (paper or {}).get("rows", [])]
    rows = _side_by_side(ours, published)
    head = (f"{results['n']} pairs, {results['positives']} positive; judge {results['judge']}, "
            f"template {results['template']}.{partial_note(results)}")
    parts = [head, _fields_note(results),
             markdown_table(["metric", "judge", "threshold choice", "Thr.", "Acc.", "Rec.", "Prec.", "F1"], rows)]
    if results.get("calibration"):
        parts.append(calibration_markdown(results["calibration"]))
    if paper:
        parts.append(f"Paper rows: {paper['caption']}, {paper['reference']}; they were computed on the full data set "
                     "with the judges named, this run on your file with yours.")
    return "\n\n".join(p for p in parts if p)


def _who(row: Mapping[str, Any], judged: bool, source: str = "this run") -> str:
    """The judge column: "<judge> (this run)" / "<judge> (paper)", or the source alone for a baseline."""
    return f"{row['judge'] or ''} ({source})".strip() if judged else f"({source})"


def logratio_row(name: str) -> str:
    """The result row of a choice condition read as the score log p(A) - log p(B) (tie-calibrated).

    Example:
        >>> logratio_row("LLM-choice")
        'LLM-choice, log p(A) − log p(B)'
    """
    return f"{name}, log p(A) − log p(B)"


def _range(values: Any) -> str:
    if not values:
        return "N/A"
    lo, hi = values
    return number(lo) if number(lo) == number(hi) else f"{number(lo)} … {number(hi)}"


def preference_markdown(results: Mapping[str, Any]) -> str:
    """Table 2 layout: pairwise accuracy, V and κ per metric (with "w.g." columns when a condition gives the
    gold revision, and the paper's rows), then the chosen tie margins ε and V and κ over the equally good ones.

    Example:
        >>> from pluie_reward.tools.evaluation.tasks import evaluate_preference
        >>> results = evaluate_preference(judge, {"source": ["The cat sleeps.", "Prices rose."]},
        ...                               ["A cat is asleep.", "Prices fell."], ["The cat sleeps.", "Prices went up."],
        ...                               ["A", "B"], progress=False)
        >>> print(preference_markdown(results))
        2 instances (human: 1 A, 1 B, 0 ties); judge tiny-random, template para-fs.
        <BLANKLINE>
        | metric | judge | Pair acc. | V | κ |
        |---|---|---|---|---|
        | PLUIE | tiny-random (this run) | ...
    """
    metrics = results["metrics"]
    conditions = results.get("conditions", [{"name": n, "row": n, "variant": ""} for n in metrics])
    judged = {c["name"]: c for c in conditions}
    choices = [c["name"] for c in conditions if c.get("labels")]
    for name in choices:  # the same calls read as log p(A) - log p(B): a row of its own
        judged[logratio_row(name)] = {**judged[name], "name": logratio_row(name), "row": logratio_row(judged[name].get("row", name))}
    # the "w.g." columns when a condition gives the gold revision; rows then by the condition's table row
    variants = ("", "w.g.") if any(c.get("variant") for c in conditions) else ("",)
    keys = ("pairwise_accuracy", "cramers_v", "cohens_kappa")
    table_rows: dict[str, dict[str, Any]] = {}
    for name, m in metrics.items():
        c = judged.get(name, {"row": PAPER_BASELINES.get(name, name)}) if len(variants) > 1 else {"row": name}
        entry = table_rows.setdefault(c["row"], {"who": _who(results, name in judged)})
        entry[c.get("variant") or ""] = m
    ours = {row: [[row, entry["who"], *(number(entry[v][k]) if v in entry else "" for k in keys for v in variants)]]
            for row, entry in table_rows.items()}
    published = []
    for r in (results.get("paper") or {}).get("rows", []):
        wg = r.get("with_gold") or {}
        published.append([r["metric"], _who(r, True, "paper"),
                          *(number(r.get(k)) if not v else number(wg.get(k)) if wg else "" for k in keys for v in variants)])
    rows = _side_by_side(ours, published)
    headers = ["metric", "judge", *(f"{h} {v}".strip() for h in ("Pair acc.", "V", "κ") for v in variants)]
    detail = []
    for name, m in metrics.items():
        ties = m.get("equally_good_epsilons")
        predicted = "/".join(str(m["predicted_counts"][k]) for k in ("A", "B", "tie"))
        if m.get("read") == "argmax":
            detail.append([name, "none: argmax", "–", "–", "–", predicted])
            continue
        detail.append([name, number(m["epsilon"], 3) + ("" if m.get("tie_calibrated") else " (fixed)"),
                       f"{ties['count']} ({number(ties['min'], 3)} … {number(ties['max'], 3)})" if ties else "–",
                       _range(m.get("cramers_v_range")) if ties else "–", _range(m.get("cohens_kappa_range")) if ties else "–",
                       predicted])
    counts = next(iter(metrics.values()))["human_counts"]
    head = (f"{results['n']} instances (human: {counts['A']} A, {counts['B']} B, {counts['tie']} ties); "
            f"judge {results['judge']}, template {results['template']}.{partial_note(results)}")
    parts = [head, _fields_note(results), markdown_table(headers, rows),
             "Tie margin ε (tie calibration picks the smallest of the equally good ones; V and κ move with the choice):",
             markdown_table(["metric", "ε", "equally good ε (count, range)", "V over them", "κ over them", "predicted A/B/tie"], detail)]
    if choices:
        parts.append(
            f"{', '.join(choices)}: a choice template read in one judge call per instance (A in its 'hypothesis' slot, B in "
            "'alternative'); the prediction is its most likely answer (first answer → A, second → B, others → tie), so "
            "there is no tie margin and tie calibration (the ε search) does not apply to that row. The row "
            "'…, log p(A) − log p(B)' reads the same calls as a score, with the tie-calibrated ε like PLUIE's rows."
        )
    paper = results.get("paper")
    if paper:
        parts.append(f"Paper rows: {paper['caption']}, {paper['reference']}; computed on the full test split with the "
                     "judges named, this run on your file with yours. Pair acc. and V lie in [0, 1], κ in [-1, 1].")
    return "\n\n".join(p for p in parts if p)


def _side_by_side(ours: Mapping[str, list[list[str]]], published: list[list[str]]) -> list[list[str]]:
    """This run's rows of each metric followed by the paper's rows of the same metric."""
    rows = []
    for metric, cells in ours.items():
        rows += cells + [p for p in published if p[0] == metric]
    return rows + [p for p in published if p[0] not in ours]


def _fields_note(results: Mapping[str, Any]) -> str:
    """Which input column fed which template field, per condition."""
    lines = [f"Input: {results['input']}."] if results.get("input") else []
    lines += [f"- {c['name']}: template {c['template']}; " + ", ".join(f"{f} ← {col}" for f, col in c["columns"].items())
              for c in results.get("conditions", []) if c.get("columns")]
    lines += [f"- {results[key]}" for key in ("labels_from", "human_from", "reference_from") if results.get(key)]
    lines += [f"- {note}" for note in results.get("notes", [])]
    return "\n".join(lines)


def task_markdown(results: Mapping[str, Any]) -> str:
    """The Markdown report of any evaluation's results."""
    if results.get("benchmark") == "PARAPHRASUS":
        return markdown_report(results)
    return (classification_markdown if results["task"] == "classification" else preference_markdown)(results)
