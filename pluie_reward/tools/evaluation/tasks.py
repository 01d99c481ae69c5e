"""Judge evaluations on your own data, with baselines side by side: classification of labelled
pairs (the seeds' Tables 1/3) and alignment with human pairwise preferences (the seeds' Table 2).

Example:
    >>> r = evaluate_classification(judge, {"source": S, "hypothesis": H}, labels)  # doctest: +SKIP
    >>> print(classification_markdown(r))  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ...core.template import load_template
from .baselines import parse_baselines, score_baseline
from .metrics import as_labels, as_preferences, classification_report, preference_metrics
from .report import markdown_table, number

JUDGE_ROW = "PLUIE"


def reference_field(template: Any, fields: Mapping[str, Any], reference: str | None = None) -> str:
    """The field baselines compare the hypothesis with: ``reference``, else "gold" when given, else
    the template's first non-hypothesis field.

    Example:
        >>> reference_field("para-fs", {"source": [], "hypothesis": []})
        'source'
    """
    if reference is not None:
        if reference not in fields:
            raise ValueError(f"reference field {reference!r} is not among the inputs {sorted(fields)}.")
        return reference
    if fields.get("gold") is not None:
        return "gold"
    for name in load_template(template).fields:
        if name != "hypothesis":
            return name
    raise ValueError("the template has no field besides 'hypothesis' for the baselines to compare with; pass reference=.")


def score_in_chunks(
    judge: Any, template: Any, fields: Mapping[str, Any], n: int, *, chunk_size: int = 64, desc: str = "scoring", progress: bool = True
) -> list[float]:
    """``judge.score`` over ``n`` items in chunks, with a tqdm progress bar; list fields are sliced,
    string fields broadcast.

    Example:
        >>> score_in_chunks(judge, "para-fs", {"source": S, "hypothesis": H}, len(S))  # doctest: +SKIP
    """
    from tqdm.auto import tqdm

    scores: list[float] = []
    with tqdm(total=n, desc=desc, unit="item", disable=not progress) as bar:
        for start in range(0, n, chunk_size):
            part = {k: (v if isinstance(v, str) or v is None else list(v[start : start + chunk_size])) for k, v in fields.items()}
            scores.extend(judge.score(template, **part))
            bar.update(min(chunk_size, n - start))
    return scores


def _length(fields: Mapping[str, Any]) -> int:
    lengths = {k: len(v) for k, v in fields.items() if v is not None and not isinstance(v, str)}
    if not lengths:
        raise ValueError("at least one field must be a list of strings.")
    if len(set(lengths.values())) != 1:
        raise ValueError(f"fields differ in length: {lengths}.")
    return next(iter(lengths.values()))


def _broadcast(value: Any, n: int) -> list[str]:
    return [value] * n if isinstance(value, str) else list(value)


def evaluate_classification(
    judge: Any,
    fields: Mapping[str, Any],
    labels: Sequence[Any],
    *,
    template: Any = "para-fs",
    threshold: float = 0.0,
    baselines: Any = ("levenshtein", "bleu"),
    reference: str | None = None,
    plots_dir: str | Path | None = None,
    chunk_size: int = 64,
    progress: bool = True,
) -> dict[str, Any]:
    """PLUIE at ``threshold`` and at the a posteriori best-F1 / best-accuracy thresholds, and each
    baseline at its a posteriori thresholds; optional PNG plots per metric.

    Example:
        >>> r = evaluate_classification(judge, {"source": S, "hypothesis": H}, [True, False])  # doctest: +SKIP
        >>> r["metrics"]["PLUIE"]["natural"]["f1"]  # doctest: +SKIP
    """
    y = as_labels(labels)
    n = _length(fields)
    if len(y) != n:
        raise ValueError(f"{len(y)} labels for {n} items.")
    scores = {JUDGE_ROW: score_in_chunks(judge, template, fields, n, chunk_size=chunk_size, progress=progress)}
    names = parse_baselines(baselines)
    if names:
        ref = _broadcast(fields[reference_field(template, fields, reference)], n)
        hyp = _broadcast(fields["hypothesis"], n)
        for name in names:
            scores[name] = score_baseline(name, ref, hyp)
    metrics = {
        name: classification_report(s, y, natural_threshold=threshold if name == JUDGE_ROW else None)
        for name, s in scores.items()
    }
    results: dict[str, Any] = {
        "task": "classification",
        "judge": getattr(judge, "name", str(judge)),
        "template": getattr(template, "name", template),
        "n": n,
        "positives": int(y.sum()),
        "metrics": metrics,
        "scores": scores,
    }
    if plots_dir is not None:
        from .plots import plot_score_histograms, plot_threshold_curves

        results["plots"] = []
        for name, s in scores.items():
            natural = threshold if name == JUDGE_ROW else None
            results["plots"].append(str(plot_threshold_curves(s, y, Path(plots_dir) / f"{name}_thresholds.png", title=name, natural_threshold=natural)))
            results["plots"].append(str(plot_score_histograms(s, y, Path(plots_dir) / f"{name}_histogram.png", title=name, natural_threshold=natural)))
    return results


def classification_markdown(results: dict[str, Any]) -> str:
    """Table 1 layout: metric, setting, Thr., Acc., Rec., Prec., F1.

    Example:
        >>> print(classification_markdown(results))  # doctest: +SKIP
    """
    rows = []
    for name, report in results["metrics"].items():
        for key, label in (("natural", "natural threshold"), ("best_f1", "best F1 (a posteriori)"), ("best_accuracy", "best accuracy (a posteriori)")):
            if key in report:
                m = report[key]
                rows.append([name, label, number(m["threshold"]), number(m["accuracy"]), number(m["recall"]), number(m["precision"]), number(m["f1"])])
    head = f"{results['n']} pairs, {results['positives']} positive; judge {results['judge']}, template {results['template']}."
    return head + "\n\n" + markdown_table(["metric", "threshold choice", "Thr.", "Acc.", "Rec.", "Prec.", "F1"], rows)


def evaluate_preference(
    judge: Any,
    fields: Mapping[str, Any],
    candidates_a: Sequence[str],
    candidates_b: Sequence[str],
    human: Sequence[Any],
    *,
    template: Any = "para-fs",
    epsilon: float | None = None,
    baselines: Any = ("levenshtein", "bleu"),
    reference: str | None = None,
    chunk_size: int = 64,
    progress: bool = True,
) -> dict[str, Any]:
    """Score both candidates of each instance (``fields`` holds the template's other fields, e.g.
    ``source``), then pairwise accuracy with tie calibration, Cramér's V and Cohen's κ against the
    human A/B/tie choices, for PLUIE and each baseline (similarity of the candidate to the reference).

    Example:
        >>> r = evaluate_preference(judge, {"source": S}, A, B, ["A", "tie", "B"])  # doctest: +SKIP
    """
    h = as_preferences(human, "human")
    n = len(h)
    if len(candidates_a) != n or len(candidates_b) != n:
        raise ValueError(f"{len(candidates_a)} A candidates and {len(candidates_b)} B candidates for {n} human choices.")
    shared = {k: v for k, v in fields.items() if k != "hypothesis"}
    both = {k: (v if isinstance(v, str) or v is None else [*v, *v]) for k, v in shared.items()}
    both["hypothesis"] = [*candidates_a, *candidates_b]
    pluie = score_in_chunks(judge, template, both, 2 * n, chunk_size=chunk_size, desc="scoring A and B", progress=progress)
    scores = {JUDGE_ROW: (pluie[:n], pluie[n:])}
    names = parse_baselines(baselines)
    if names:
        ref = _broadcast(shared[reference_field(template, {**shared, "hypothesis": None}, reference)], n)
        for name in names:
            scores[name] = (score_baseline(name, ref, candidates_a), score_baseline(name, ref, candidates_b))
    return {
        "task": "preference",
        "judge": getattr(judge, "name", str(judge)),
        "template": getattr(template, "name", template),
        "n": n,
        "metrics": {name: preference_metrics(a, b, h, epsilon=epsilon) for name, (a, b) in scores.items()},
        "scores": {name: {"A": a, "B": b} for name, (a, b) in scores.items()},
    }


def preference_markdown(results: dict[str, Any]) -> str:
    """Table 2 layout: metric, Pair acc., tie epsilon, V, κ.

    Example:
        >>> print(preference_markdown(results))  # doctest: +SKIP
    """
    rows = [
        [name, number(m["pairwise_accuracy"]), number(m["epsilon"], 3), number(m["cramers_v"]), number(m["cohens_kappa"])]
        for name, m in results["metrics"].items()
    ]
    counts = next(iter(results["metrics"].values()))["human_counts"]
    head = (f"{results['n']} instances (human: {counts['A']} A, {counts['B']} B, {counts['tie']} ties); "
            f"judge {results['judge']}, template {results['template']}.")
    return head + "\n\n" + markdown_table(["metric", "Pair acc.", "tie ε", "V", "κ"], rows)
