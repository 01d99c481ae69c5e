"""Judge evaluations on your own data, with baselines side by side: classification of labelled
pairs (the seeds' Tables 1/3) and alignment with human pairwise preferences (the seeds' Table 2).

A run scores one or more :class:`Condition` (a template and the fields it reads) on every item. The two
candidates of a preference item are scored in one ``Judge.score`` call, so their shared prefix is computed
once; a choice template (``rev-choice``, ``net-choice``) reads A (``hypothesis``) and B (``alternative``) in
one prompt, its most likely answer being the prediction. With an output folder, scores are saved after every
call (:mod:`.store`): an interrupted run resumes, and :func:`report_folder` recomputes the tables without the judge.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...core.template import load_template
from ...integrations.outputs import SECOND_CANDIDATE
from .baselines import parse_baselines, score_baseline
from .calibration import EVAL_HELDOUT, EVAL_SEED, calibration_report, heldout_calibrated, p_yes
from .metrics import as_labels, as_preferences, choice_metrics, classification_report, preference_metrics
from .paraphrasus import paraphrasus_plots, paraphrasus_results
from .plots import PLUIE_AXIS, pearson, plot_edit_distance, plot_reliability, plot_score_histograms, plot_threshold_curves
from ..report import write_outputs
from .scoring import (
    JUDGE_ROW,
    Condition,
    _broadcast,
    _length,
    check_choice_condition,
    edit_distances,
    reference_field,
    score_items,
)
from .store import ScoreStore, chat_settings, fingerprint, load_run
from .tables import logratio_row, task_markdown

__all__ = ["evaluate_classification", "evaluate_preference", "report_folder", "run_classification", "run_preference"]


def _score_run(task: str, judge: Any, conditions: Sequence[Condition], items: list[dict[str, Any]], names: Sequence[str],
               meta: Mapping[str, Any], output_dir: str | Path | None, overwrite: bool, plots: bool, **score: Any) -> dict[str, Any]:
    """Score ``items`` (:func:`score_items` with ``score``), saved under the run's config and meta, then the results."""
    common = {"task": task, "judge": getattr(judge, "name", str(judge))}
    keywords = chat_settings(judge, {c.name: c.template for c in conditions})  # saved when a row renders with some
    chat = {"chat_template_kwargs": keywords} if keywords else {}
    config = {**common, "conditions": [[c.name, c.template_name, fingerprint(repr(load_template(c.template)))] for c in conditions],
              "baselines": list(names), **chat}
    info = {**common, "template": ", ".join(dict.fromkeys(c.template_name for c in conditions)),
            "conditions": [c.describe() for c in conditions], "baselines": list(names), "n": len(items), **chat, **meta}
    with ScoreStore(output_dir, config, info, overwrite=overwrite) as store:
        lines = score_items(judge, conditions, items, store=store if output_dir else None, **score)
    return _finish_run(info, lines, output_dir, plots)


def _inputs(conditions: Sequence[Condition], i: int) -> list[list[Any]]:
    """What item ``i`` of each condition reads (for its fingerprint)."""
    return [[c.value(f, i) for f in sorted(c.fields)] for c in conditions]


# classification -------------------------------------------------------------------------------
def run_classification(
    judge: Any,
    conditions: Sequence[Condition],
    labels: Sequence[Any],
    *,
    baseline_texts: tuple[Sequence[str], Sequence[str]] | None = None,
    baselines: Any = ("levenshtein", "bleu"),
    threshold: float = 0.0,
    rows: Sequence[str] | None = None,
    output_dir: str | Path | None = None,
    overwrite: bool = False,
    plots: bool = False,
    chunk_size: int | None = None,
    progress: bool = True,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score ``conditions`` on labelled items: the Table 1 metrics of each condition and of each baseline
    (``baseline_texts`` = the (references, hypotheses) they compare, whose edit distance the plots use).

    Example:
        >>> fields = {"source": ["The cat sleeps.", "Prices rose."], "hypothesis": ["A cat is asleep.", "Prices fell."]}
        >>> r = run_classification(judge, [Condition("PLUIE", "para-fs", fields)], [True, False], progress=False)
        >>> r["n"], r["positives"], sorted(r["metrics"]["PLUIE"])
        (2, 1, ['best_accuracy', 'best_f1', 'n', 'natural', 'positives'])
    """
    for condition in conditions:
        check_choice_condition(condition, False)
    y = as_labels(labels)
    n = len(y)
    names = parse_baselines(baselines) if baseline_texts is not None else []
    rows = list(rows) if rows is not None else [f"item {i + 1}" for i in range(n)]
    refs, hyps = baseline_texts if baseline_texts is not None else (None, None)
    items = [{"i": i, "row": rows[i], "label": bool(y[i]),
              "h": fingerprint(bool(y[i]), _inputs(conditions, i) + ([[refs[i], hyps[i]]] if refs is not None else []))}
             for i in range(n)]
    functions = {name: (lambda index, name=name: score_baseline(name, [refs[i] for i in index], [hyps[i] for i in index]))
                 for name in names}
    extras = {} if refs is None else {"edit_distance": lambda index: edit_distances([refs[i] for i in index], [hyps[i] for i in index])}
    return _score_run("classification", judge, conditions, items, names, {"threshold": threshold, **(meta or {})}, output_dir,
                      overwrite, plots, baselines=functions, extras=extras, chunk_size=chunk_size, progress=progress)


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
    chunk_size: int | None = None,
    progress: bool = True,
    output_dir: str | Path | None = None,
) -> dict[str, Any]:
    """PLUIE at ``threshold`` and at the a posteriori best-F1 / best-accuracy thresholds, each baseline at
    its a posteriori ones; PNG plots in ``plots_dir``; scores saved in ``output_dir`` as they come (resumable).

    Example:
        >>> fields = {"source": ["The cat sleeps.", "Prices rose."], "hypothesis": ["A cat is asleep.", "Prices fell."]}
        >>> r = evaluate_classification(judge, fields, [True, False], progress=False)
        >>> sorted(r["metrics"])  # PLUIE and the baselines
        ['PLUIE', 'bleu', 'levenshtein']
        >>> r["metrics"]["PLUIE"]["natural"]  # at threshold 0
        {'threshold': 0.0, 'accuracy': ..., 'precision': ..., 'recall': ..., 'f1': ..., 'tp': ..., 'fp': ..., 'tn': ..., 'fn': ...}
    """
    n = _length(fields)
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} items.")
    ref = reference_field(template, fields, reference)
    texts = (_broadcast(fields[ref], n), _broadcast(fields["hypothesis"], n))
    results = run_classification(
        judge, [Condition(JUDGE_ROW, template, fields)], labels, baseline_texts=texts, baselines=baselines,
        threshold=threshold, output_dir=output_dir, chunk_size=chunk_size, progress=progress,
        meta={"reference_from": f"baselines and edit distance compare the hypothesis with the field {ref!r}"},
    )
    if plots_dir is not None:
        results["plots"] = classification_plots(results, plots_dir)
    return results


def _yes_no_conditions(meta: Mapping[str, Any]) -> list[str]:
    """The judged conditions of a Yes/No template (``sigmoid(score)`` is a probability); a run without ``kind``
    looks the template up."""
    names = []
    for c in meta["conditions"]:
        kind = c.get("kind")
        if kind is None:
            try:
                kind = load_template(c["template"]).kind
            except (FileNotFoundError, ValueError, OSError):
                continue
        if kind == "binary":
            names.append(c["name"])
    return names


def classification_results(meta: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Metrics of every condition and baseline from scored lines (no judge needed).

    Example:
        >>> fields = {"source": ["The cat sleeps.", "Prices rose."], "hypothesis": ["A cat is asleep.", "Prices fell."]}
        >>> r = evaluate_classification(judge, fields, [True, False], progress=False, output_dir="out/parareval")
        >>> run, lines = load_run("out/parareval")  # later, without the judge
        >>> classification_results(run["meta"], lines)["metrics"]["PLUIE"]["best_f1"] == r["metrics"]["PLUIE"]["best_f1"]
        True
    """
    labels = [line["label"] for line in _scored(lines)]
    judged = [c["name"] for c in meta["conditions"]]
    scores = {name: [line["scores"][name] for line in lines] for name in [*judged, *meta.get("baselines", [])]}
    threshold = meta.get("threshold", 0.0)
    metrics = {name: classification_report(s, labels, natural_threshold=threshold if name in judged else None)
               for name, s in scores.items()}
    results = _results(meta, lines, positives=int(sum(labels)), metrics=metrics, scores=scores, labels=labels)
    calibration = {name: calibration_report(scores[name], labels, heldout_fraction=EVAL_HELDOUT, seed=EVAL_SEED)
                   for name in _yes_no_conditions(meta)}
    if calibration:
        results["calibration"] = calibration
    if all(line.get("edit_distance") is not None for line in lines):
        distance = [line["edit_distance"] for line in lines]
        results["edit_distance"] = distance
        results["edit_distance_correlation"] = {
            name: {label: pearson([d for d, y in zip(distance, labels) if y == value], [x for x, y in zip(s, labels) if y == value])
                   for label, value in (("positive", True), ("negative", False))}
            for name, s in scores.items()
        }
    return results


def classification_plots(results: Mapping[str, Any], folder: str | Path) -> list[str]:
    """Threshold curves, histograms and score against edit distance for each row of ``results``, and a
    reliability diagram of ``p_yes`` (with the Platt-calibrated held-out items) for each judged Yes/No row."""
    folder = Path(folder)
    judged = {c["name"]: c for c in results["conditions"]}
    written = []
    labels = results["labels"]
    for name, scores in results["scores"].items():
        natural = results.get("threshold", 0.0) if name in judged else None
        where = (f"judge {results['judge']}, template {judged[name]['template']}" if name in judged else "baseline")
        title = f"{name} ({where}), {results['n']} items"
        axis = PLUIE_AXIS if name in judged else f"{name} similarity"
        stem = name.replace("/", "-").replace(" ", "_").replace("*", "star")
        written.append(str(plot_threshold_curves(scores, labels, folder / f"{stem}_thresholds.png", title=title,
                                                 natural_threshold=natural)))
        written.append(str(plot_score_histograms(scores, labels, folder / f"{stem}_histogram.png", title=title,
                                                 natural_threshold=natural, xlabel=axis)))
        if "edit_distance" in results:
            written.append(str(plot_edit_distance(scores, labels, results["edit_distance"], folder / f"{stem}_edit_distance.png",
                                                  title=title, natural_threshold=natural, ylabel=axis)))
        calibration = results.get("calibration", {}).get(name)
        if calibration is not None:
            fit = calibration.get("fit")
            after = heldout_calibrated(scores, labels, fit) if fit and fit["n_heldout"] else None
            written.append(str(plot_reliability(
                p_yes(scores), labels, folder / f"{stem}_reliability.png", title=title, n_bins=calibration["n_bins"], calibrated=after,
                name="p_yes = sigmoid(score), all items",
                calibrated_name=f"Platt-calibrated (a={fit['a']:.2f}, b={fit['b']:.2f}), held-out items" if after else "")))
    return written


# preference -----------------------------------------------------------------------------------
def run_preference(
    judge: Any,
    conditions: Sequence[Condition],
    candidates_a: Sequence[str],
    candidates_b: Sequence[str],
    human: Sequence[Any],
    *,
    baseline_reference: Sequence[str] | None = None,
    baselines: Any = ("levenshtein", "bleu"),
    epsilon: float | None = None,
    rows: Sequence[str] | None = None,
    output_dir: str | Path | None = None,
    overwrite: bool = False,
    chunk_size: int | None = None,
    progress: bool = True,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score both candidates of every item under each condition (A and B in one call), then the Table 2 metrics
    against the human A/B/tie choices; baselines: each candidate's similarity to ``baseline_reference``.

    Example:
        >>> rev = Condition("Rev-PLUIE", "rev", {"original": ["Teh cat sleeps.", "he left early"], "instruction": ["Fix typos."] * 2})
        >>> r = run_preference(judge, [rev], ["The cat sleeps.", "He left."], ["The cats sleep.", "He left early."], ["A", "B"],
        ...                    progress=False)
        >>> sorted(r["metrics"]["Rev-PLUIE"])[:4]
        ['cohens_kappa', 'cohens_kappa_range', 'cramers_v', 'cramers_v_range']
    """
    h = as_preferences(human, "human")
    n = len(h)
    if len(candidates_a) != n or len(candidates_b) != n:
        raise ValueError(f"{len(candidates_a)} A candidates and {len(candidates_b)} B candidates for {n} human choices.")
    names = parse_baselines(baselines) if baseline_reference is not None else []
    rows = list(rows) if rows is not None else [f"item {i + 1}" for i in range(n)]
    reference = baseline_reference if baseline_reference is not None else [None] * n
    items = [{"i": i, "row": rows[i], "human": h[i],
              "h": fingerprint(h[i], _inputs(conditions, i) + [[candidates_a[i], candidates_b[i], reference[i]]])}
             for i in range(n)]

    def baseline(name: str, index: list[int]) -> list[list[float]]:  # [A, B] per item: each one's similarity to the reference
        ref = [baseline_reference[i] for i in index]
        return [list(ab) for ab in zip(*(score_baseline(name, ref, [c[i] for i in index]) for c in (candidates_a, candidates_b)))]

    return _score_run("preference", judge, conditions, items, names, {"epsilon": epsilon, **(meta or {})}, output_dir, overwrite,
                      False, pairs=(candidates_a, candidates_b), baselines={name: partial(baseline, name) for name in names},
                      chunk_size=chunk_size, progress=progress, desc="scoring A and B")


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
    chunk_size: int | None = None,
    progress: bool = True,
    output_dir: str | Path | None = None,
) -> dict[str, Any]:
    """:func:`run_preference` of one template whose other fields (e.g. ``source``) are in ``fields``, with the
    baselines comparing each candidate with the reference field.

    Example:
        >>> A, B = ["A cat is asleep.", "Prices fell.", "He left."], ["The cat sleeps.", "Prices went up.", "Nobody left."]
        >>> r = evaluate_preference(judge, {"source": ["The cat sleeps.", "Prices rose.", "He left early."]}, A, B, ["A", "tie", "B"],
        ...                         progress=False)
        >>> r["metrics"]["PLUIE"]["human_counts"], sorted(r["metrics"])
        ({'A': 1, 'B': 1, 'tie': 1}, ['PLUIE', 'bleu', 'levenshtein'])
    """
    n = len(human)
    slots = ("hypothesis", SECOND_CANDIDATE) if load_template(template).kind == "choice" else ("hypothesis",)
    shared = {k: v for k, v in fields.items() if k not in slots}
    names = parse_baselines(baselines)
    reference_texts = None
    if names:
        ref = reference_field(template, {**shared, "hypothesis": None}, reference)
        reference_texts = _broadcast(shared[ref], n)
    return run_preference(
        judge, [Condition(JUDGE_ROW, template, shared)], candidates_a, candidates_b, human,
        baseline_reference=reference_texts, baselines=names, epsilon=epsilon, output_dir=output_dir,
        chunk_size=chunk_size, progress=progress,
    )


def preference_results(meta: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Table 2 metrics of every condition and baseline from scored lines (no judge needed).

    Example:
        >>> r = run_preference(judge, [Condition("PLUIE", "para-fs", {"source": ["The cat sleeps.", "He left early."]})],
        ...                    ["A cat is asleep.", "He left."], ["The cat sleeps.", "Nobody left."], ["A", "B"],
        ...                    progress=False, output_dir="out/pref")
        >>> run, lines = load_run("out/pref")  # later, without the judge
        >>> preference_results(run["meta"], lines)["metrics"]["PLUIE"]["pairwise_accuracy"] == r["metrics"]["PLUIE"]["pairwise_accuracy"]
        True
    """
    human = [line["human"] for line in _scored(lines)]
    labels = {c["name"]: c["labels"] for c in meta["conditions"] if c.get("labels")}
    names = [*(c["name"] for c in meta["conditions"]), *meta.get("baselines", [])]
    metrics: dict[str, Any] = {}
    scores: dict[str, Any] = {}
    for name in names:
        if name in labels:  # a choice template: its argmax, and log p(A) - log p(B) with tie calibration
            first, second = labels[name][:2]
            a = [line["scores"][name]["logprobs"][first] for line in lines]
            b = [line["scores"][name]["logprobs"][second] for line in lines]
            predicted = [line["scores"][name]["choice"] for line in lines]
            metrics[name] = choice_metrics(predicted, human)
            metrics[logratio_row(name)] = preference_metrics(a, b, human, epsilon=meta.get("epsilon"))
            scores[name] = {"A": a, "B": b, "choice": predicted}
            continue
        a = [line["scores"][name][0] for line in lines]
        b = [line["scores"][name][1] for line in lines]
        metrics[name] = preference_metrics(a, b, human, epsilon=meta.get("epsilon"))
        scores[name] = {"A": a, "B": b}
    return _results(meta, lines, metrics=metrics, scores=scores)


# common -----------------------------------------------------------------------------------------
def _scored(lines: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """``lines``, refused before any metric when there is none (a run stopped before its first chunk)."""
    if not lines:
        raise ValueError("no scored items yet.")
    return lines


def _results(meta: Mapping[str, Any], lines: Sequence[Mapping[str, Any]], **fields: Any) -> dict[str, Any]:
    """A run's results: its meta, the items scored (``n``) and planned, then ``fields``."""
    return {**{k: v for k, v in meta.items() if k != "n"}, "n": len(lines), "planned": meta.get("n", len(lines)), **fields}


def _finish_run(meta: Mapping[str, Any], lines: Sequence[Mapping[str, Any]], output_dir: str | Path | None,
                plots: bool) -> dict[str, Any]:
    """The results of a run's scored lines, with their plots (``plots``) and files in ``output_dir``."""
    if meta.get("benchmark") == "PARAPHRASUS":
        results, draw = paraphrasus_results(meta, lines), paraphrasus_plots
    elif meta["task"] == "classification":
        results, draw = classification_results(meta, lines), classification_plots
    else:
        results, draw = preference_results(meta, lines), None
    if plots and output_dir is not None and draw is not None:
        results["plots"] = draw(results, Path(output_dir) / "plots")
    if output_dir is not None:
        write_outputs(output_dir, results, task_markdown(results))
    return results


def report_folder(folder: str | Path, *, plots: bool = False) -> dict[str, Any]:
    """Recompute an evaluation's results (and plots) from its output folder alone, without the judge;
    an interrupted run too (the report says how many items it covers).

    Example:
        >>> fields = {"source": ["The cat sleeps.", "Prices rose."], "hypothesis": ["A cat is asleep.", "Prices fell."]}
        >>> _ = evaluate_classification(judge, fields, [True, False], progress=False, output_dir="out/parareval")
        >>> print(task_markdown(report_folder("out/parareval")))
        2 pairs, 1 positive; judge tiny-random, template para-fs.
        ...
    """
    run, lines = load_run(folder)
    return _finish_run(run["meta"], lines, folder, plots)
