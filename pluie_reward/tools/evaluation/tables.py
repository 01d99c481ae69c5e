"""Markdown tables of evaluation results in the seeds' layouts: Table 1 (classification: threshold,
accuracy, recall, precision, F1) and Table 2 (preference: pairwise accuracy, V, κ, with the "w.g."
columns when a condition gives the gold revision), this run's rows next to the paper's.

Example:
    >>> from pluie_reward.tools.evaluation.tasks import evaluate_classification
    >>> results = evaluate_classification(judge, {"source": ["The cat sleeps.", "Prices rose."],
    ...                                            "hypothesis": ["A cat is asleep.", "Prices fell."]}, [True, False], progress=False)
    >>> print(task_markdown(results))  # the layout of the task: Table 1 here
    2 pairs, 1 positive; judge tiny-random, template para-fs.
    ...
    | metric | judge | threshold choice | Thr. | Acc. | Rec. | Prec. | F1 |
    ...
"""

from __future__ import annotations

from typing import Any, Mapping

from .calibration import calibration_markdown
from .paraphrasus import markdown_report, partial_note
from ..report import markdown_table, number
from .scoring import JUDGE_ROW
PAPER_BASELINES = {"levenshtein": "Levenshtein", "bleu": "BLEU"}  # our baseline -> the paper's row name


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
                m = report[key]
                ours.setdefault(shown, []).append([shown, who, label, number(m["threshold"]), number(m["accuracy"]),
                                                   number(m["recall"]), number(m["precision"]), number(m["f1"])])
    published = [[row["metric"], _who(row, True, "paper"), "as published", number(row["threshold"]),
                  number(row["accuracy"]), number(row["recall"]), number(row["precision"]), number(row["f1"])]
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


def _range(values: Any) -> str:
    if not values:
        return "N/A"
    lo, hi = values
    return number(lo) if number(lo) == number(hi) else f"{number(lo)} … {number(hi)}"


def preference_markdown(results: Mapping[str, Any]) -> str:
    """Table 2 layout: pairwise accuracy, V and κ per metric (with the paper's "w.g." columns when a
    condition gives the gold revision, and the paper's rows), then the chosen tie margins ε and the
    range of V and κ over the equally good ones.

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
        row = f"{name}, log p(A) − log p(B)"
        judged[row] = {**judged[name], "name": row, "row": f"{judged[name].get('row', name)}, log p(A) − log p(B)"}
    grouped = any(c.get("variant") for c in conditions)
    keys = ("pairwise_accuracy", "cramers_v", "cohens_kappa")
    rows: list[list[str]] = []
    if grouped:
        table_rows: dict[str, dict[str, Any]] = {}
        for name, m in metrics.items():
            c = judged.get(name, {"row": PAPER_BASELINES.get(name, name), "variant": ""})
            entry = table_rows.setdefault(c["row"], {"who": _who(results, name in judged)})
            entry[c.get("variant") or ""] = m
        ours = {}
        for row, entry in table_rows.items():
            cells = [row, entry["who"]]
            for key in keys:
                cells += [number(entry[""][key]) if "" in entry else "", number(entry["w.g."][key]) if "w.g." in entry else ""]
            ours[row] = [cells]
        published = []
        for paper_row in (results.get("paper") or {}).get("rows", []):
            wg = paper_row.get("with_gold") or {}
            cells = [paper_row["metric"], _who(paper_row, True, "paper")]
            for key in keys:
                cells += [number(paper_row.get(key)), number(wg.get(key)) if wg else ""]
            published.append(cells)
        rows = _side_by_side(ours, published)
        headers = ["metric", "judge", "Pair acc.", "Pair acc. w.g.", "V", "V w.g.", "κ", "κ w.g."]
    else:
        ours = {name: [[name, _who(results, name in judged), *[number(m[k]) for k in keys]]]
                for name, m in metrics.items()}
        published = [[r["metric"], _who(r, True, "paper"), *[number(r.get(k)) for k in keys]]
                     for r in (results.get("paper") or {}).get("rows", [])]
        rows = _side_by_side(ours, published)
        headers = ["metric", "judge", "Pair acc.", "V", "κ"]
    detail = []
    for name, m in metrics.items():
        ties = m.get("equally_good_epsilons")
        if m.get("read") == "argmax":
            detail.append([name, "none: argmax", "–", "–", "–", "/".join(str(m["predicted_counts"][k]) for k in ("A", "B", "tie"))])
            continue
        detail.append([name, number(m["epsilon"], 3) + ("" if m.get("tie_calibrated") else " (fixed)"),
                       f"{ties['count']} ({number(ties['min'], 3)} … {number(ties['max'], 3)})" if ties else "–",
                       _range(m.get("cramers_v_range")) if ties else "–", _range(m.get("cohens_kappa_range")) if ties else "–",
                       "/".join(str(m["predicted_counts"][k]) for k in ("A", "B", "tie"))])
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
    lines = []
    if results.get("input"):
        lines.append(f"Input: {results['input']}.")
    for c in results.get("conditions", []):
        if c.get("columns"):
            used = ", ".join(f"{f} ← {col}" for f, col in c["columns"].items())
            lines.append(f"- {c['name']}: template {c['template']}; {used}")
    for key in ("labels_from", "human_from", "reference_from"):
        if results.get(key):
            lines.append(f"- {results[key]}")
    for note in results.get("notes", []):
        lines.append(f"- {note}")
    return "\n".join(lines)


def task_markdown(results: Mapping[str, Any]) -> str:
    """The Markdown report of any evaluation's results."""
    if results.get("benchmark") == "PARAPHRASUS":
        return markdown_report(results)
    return (classification_markdown if results["task"] == "classification" else preference_markdown)(results)
