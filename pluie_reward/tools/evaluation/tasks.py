"""Judge evaluations on your own data, with baselines side by side: classification of labelled
pairs (the seeds' Tables 1/3) and alignment with human pairwise preferences (the seeds' Table 2).

A run scores one or more :class:`Condition` (a template and the fields it reads: ``Rev-PLUIE``,
``Rev-PLUIE w.g.``, ``Para-PLUIE``...) on every item. The two candidates of a preference item are
scored in the same ``Judge.score`` call, next to each other, so the prefix they share (template,
original, instruction, gold) is computed once. A choice template (``rev-choice``, ``net-choice``)
reads both candidates in one prompt instead: A in its ``hypothesis`` slot, B in ``alternative``;
its most likely answer is the predicted preference (first answer -> A, second -> B, others -> tie). With an output folder, scores are saved after every
call (:mod:`.store`): an interrupted run resumes, and :func:`report_folder` recomputes the tables
without the judge.

Example:
    >>> S = ["The cat sleeps.", "Prices rose in May.", "He left early.", "The shop is closed."]
    >>> H = ["A cat is asleep.", "Prices fell in May.", "He went home early.", "The store is open."]
    >>> labels = [True, False, True, False]  # paraphrase or not
    >>> r = evaluate_classification(judge, {"source": S, "hypothesis": H}, labels, progress=False)
    >>> print(classification_markdown(r))
    4 pairs, 2 positive; judge tiny-random, template para-fs.
    ...
    | metric | judge | threshold choice | Thr. | Acc. | Rec. | Prec. | F1 |
    |---|---|---|---|---|---|---|---|
    | PLUIE | tiny-random (this run) | natural threshold | 0.00 | ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ...core.outputs import SECOND_CANDIDATE
from ...core.template import load_template
from .baselines import levenshtein_similarity, parse_baselines, score_baseline
from .calibration import EVAL_HELDOUT, EVAL_SEED, calibration_report, heldout_calibrated
from .metrics import as_labels, as_preferences, choice_metrics, classification_report, preference_metrics
from .report import write_outputs
from .store import ScoreStore, chat_settings, fingerprint, load_run

from .tables import JUDGE_ROW, PAPER_BASELINES, classification_markdown, preference_markdown, task_markdown

__all__ = ["Condition", "JUDGE_ROW", "PAPER_BASELINES", "classification_markdown", "evaluate_classification",
           "evaluate_preference", "preference_markdown", "report_folder", "run_classification", "run_preference",
           "score_items", "task_markdown"]


@dataclass(frozen=True)
class Condition:
    """One way of asking the judge, scored on every item: a row of the result table.

    Args:
        name: the row's name in results ("PLUIE", "Rev-PLUIE w.g.").
        template: template name, YAML path or :class:`~pluie_reward.Template`.
        fields: template field -> one value per item (or one string for all); for preferences,
            every field but the hypothesis (the candidates A and B are the hypothesis).
        columns: template field -> where its values come from (shown in the report).
        row, variant: the paper's row ("Rev-PLUIE") and column group ("" or "w.g.").

    Example:
        >>> Condition("Para-PLUIE", "para-fs", {"source": ["The cat sleeps."]}).row
        'Para-PLUIE'
    """

    name: str
    template: Any = "para-fs"
    fields: Mapping[str, Any] = field(default_factory=dict)
    columns: Mapping[str, str] = field(default_factory=dict)
    row: str = ""
    variant: str = ""

    def __post_init__(self) -> None:
        if not self.row:
            object.__setattr__(self, "row", self.name)

    @property
    def template_name(self) -> str:
        return load_template(self.template).name

    def describe(self) -> dict[str, Any]:
        """What the report shows about this condition (and, for a choice template, its answers' labels)."""
        template = load_template(self.template)
        out = {"name": self.name, "row": self.row, "variant": self.variant, "template": template.name,
               "kind": template.kind, "columns": dict(self.columns)}
        if template.kind == "choice":
            out["labels"] = list(template.labels)
        return out

    def value(self, name: str, i: int) -> Any:
        v = self.fields[name]
        return v if isinstance(v, str) or v is None else v[i]


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
        if name not in ("hypothesis", SECOND_CANDIDATE):
            return name
    raise ValueError("the template has no field besides 'hypothesis' for the baselines to compare with; pass reference=.")


def _length(fields: Mapping[str, Any]) -> int:
    lengths = {k: len(v) for k, v in fields.items() if v is not None and not isinstance(v, str)}
    if not lengths:
        raise ValueError("at least one field must be a list of strings.")
    if len(set(lengths.values())) != 1:
        raise ValueError(f"fields differ in length: {lengths}.")
    return next(iter(lengths.values()))


def _broadcast(value: Any, n: int) -> list[str]:
    return [value] * n if isinstance(value, str) else list(value)


def _chunk_size(judge: Any, chunk_size: int | None, prompts_per_item: int = 1) -> int:
    from ..cli.common import auto_chunk_size

    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    return chunk_size or auto_chunk_size(judge, prompts_per_item)


def score_in_chunks(
    judge: Any, template: Any, fields: Mapping[str, Any], n: int, *, chunk_size: int | None = None,
    desc: str = "scoring", progress: bool = True,
) -> list[float]:
    """``judge.score`` over ``n`` items in chunks (default: about one forward batch), with a tqdm
    progress bar; list fields are sliced, string fields broadcast.

    Example:
        >>> S, H = ["The cat sleeps.", "Prices rose."], ["A cat is asleep.", "Prices fell."]
        >>> score_in_chunks(judge, "para-fs", {"source": S, "hypothesis": H}, len(S), chunk_size=1, progress=False)
        [..., ...]
    """
    condition = Condition(JUDGE_ROW, template, fields)
    lines = score_items(judge, [condition], [{"i": i, "h": ""} for i in range(n)], chunk_size=chunk_size,
                        progress=progress, desc=desc)
    return [line["scores"][JUDGE_ROW] for line in lines]


def edit_distances(references: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
    """Normalised character edit distance (1 - Levenshtein similarity) of each pair, for the
    score-against-edit-distance plots (ParaPLUIE Fig. 2).

    Example:
        >>> edit_distances(["kitten"], ["sitting"])
        [0.4285714285714286]
    """
    return [1.0 - levenshtein_similarity(str(r), str(h)) for r, h in zip(references, hypotheses)]


# scoring ----------------------------------------------------------------------------------------
def choice_preference(labels: Sequence[str], label: str) -> str:
    """The preference a choice template's answer stands for: its first answer prefers the candidate
    in ``hypothesis`` (A), its second the one in ``alternative`` (B), any other (e.g. "tie") neither.

    Example:
        >>> [choice_preference(["A", "B", "tie"], x) for x in ("A", "B", "tie")]
        ['A', 'B', 'tie']
    """
    k = list(labels).index(label)
    return "A" if k == 0 else "B" if k == 1 else "tie"


def _choice_condition(judge: Any, condition: Condition, template: Any, index: list[int],
                      pairs: tuple[Sequence[str], Sequence[str]], rows: Sequence[str]) -> list[dict[str, Any]]:
    """One ``Judge.score`` call for the items ``index`` of a choice condition: A and B of an item in
    one prompt; per item the answers' log-probabilities and the predicted A/B/tie (the most likely answer)."""
    values = {name: v if v is None or isinstance(v, str) else [v[i] for i in index] for name, v in condition.fields.items()}
    values["hypothesis"] = [pairs[0][i] for i in index]
    values[SECOND_CANDIDATE] = [pairs[1][i] for i in index]
    try:
        records = judge.score(condition.template, details=True, **values)
    except (TypeError, ValueError) as err:
        from ..cli.records import relocate

        raise type(err)(f"{condition.name}: {relocate(str(err), [rows[i] for i in index])}") from None
    return [{"logprobs": r["logprobs"], "choice": choice_preference(template.labels, r["choice"])} for r in records]


def check_choice_condition(condition: Condition, pairs: bool) -> None:
    """A choice template fits a preference task whose candidates fill its two slots, and nothing else."""
    template = load_template(condition.template)
    if template.kind != "choice":
        return
    if not pairs:
        raise ValueError(f"{condition.name}: template {template.name!r} chooses between two candidates; evaluate it "
                         "with a preference task (pluie-reward eval preference), not a classification.")
    if "hypothesis" not in template.fields or SECOND_CANDIDATE not in template.fields:
        raise ValueError(f"{condition.name}: choice template {template.name!r} needs the fields 'hypothesis' (candidate A) "
                         f"and {SECOND_CANDIDATE!r} (candidate B); its fields are {list(template.fields)}.")
    given = [f for f in ("hypothesis", SECOND_CANDIDATE) if f in condition.fields]
    if given:
        raise ValueError(f"{condition.name}: the candidates A and B fill {given} of template {template.name!r}; "
                         "do not give them as fields too.")


def _score_condition(judge: Any, condition: Condition, index: list[int], pairs: tuple[Sequence[str], Sequence[str]] | None,
                     rows: Sequence[str]) -> list[Any]:
    """One ``Judge.score`` call for the items ``index``; with ``pairs`` the call holds A and B of each
    item next to each other (A0 B0 A1 B1 ...), so their shared prefix is computed once."""
    template = load_template(condition.template)
    if template.kind == "choice" and pairs is not None:
        return _choice_condition(judge, condition, template, index, pairs, rows)
    copies = 1 if pairs is None else 2
    values = {}
    for name, v in condition.fields.items():
        if v is None or isinstance(v, str):
            values[name] = v
        else:
            values[name] = [v[i] for i in index for _ in range(copies)]
    if pairs is not None:
        values["hypothesis"] = [c for i in index for c in (pairs[0][i], pairs[1][i])]
    try:
        scores = judge.score(condition.template, **values)
    except (TypeError, ValueError) as err:
        from ..cli.records import relocate

        raise type(err)(f"{condition.name}: {relocate(str(err), [rows[i] for i in index], copies)}") from None
    if pairs is None:
        return list(scores)
    return [[a, b] for a, b in zip(scores[0::2], scores[1::2])]


def score_items(
    judge: Any,
    conditions: Sequence[Condition],
    items: Sequence[dict[str, Any]],
    *,
    pairs: tuple[Sequence[str], Sequence[str]] | None = None,
    baselines: Mapping[str, Callable[[list[int]], list[Any]]] | None = None,
    extras: Mapping[str, Callable[[list[int]], list[Any]]] | None = None,
    store: ScoreStore | None = None,
    chunk_size: int | None = None,
    progress: bool = True,
    desc: str = "scoring",
) -> list[dict[str, Any]]:
    """Score every condition (and baseline) on every item; returns one line per item,
    ``{**items[i], "scores": {name: score or [score_A, score_B]}}``.

    ``items[i]`` holds at least ``"i"`` and ``"h"`` (the item's input fingerprint); items the store
    already holds are not scored again; new lines are saved after every chunk. ``extras`` compute
    further per-item values kept beside the scores (e.g. the edit distance for the plots).
    """
    from tqdm.auto import tqdm

    baselines, extras = baselines or {}, extras or {}
    rows = [item.get("row", f"item {item['i'] + 1}") for item in items]
    lines: dict[int, dict[str, Any]] = {}
    todo: list[int] = []
    for k, item in enumerate(items):
        saved = store.done(item["i"], item["h"]) if store is not None else None
        if saved is not None:
            lines[k] = saved
        else:
            todo.append(k)
    size = _chunk_size(judge, chunk_size, 1 if pairs is None else 2)
    if pairs is not None:
        for condition in conditions:
            check_choice_condition(condition, True)
    if todo and hasattr(judge, "bind"):
        for condition in conditions:  # a template this judge cannot answer fails now, not after a first chunk
            judge.bind(condition.template)
    with tqdm(total=len(items), initial=len(items) - len(todo), desc=desc, unit="item", disable=not progress) as bar:
        for start in range(0, len(todo), size):
            index = todo[start : start + size]
            scored = {c.name: _score_condition(judge, c, index, pairs, rows) for c in conditions}
            scored.update({name: function(index) for name, function in baselines.items()})
            more = {name: function(index) for name, function in extras.items()}
            new = [{**items[k], **{name: values[j] for name, values in more.items()},
                    "scores": {name: values[j] for name, values in scored.items()}} for j, k in enumerate(index)]
            if store is not None:
                store.add(new)
            lines.update(zip(index, new))
            bar.update(len(index))
    return [lines[k] for k in range(len(items))]


def _chat(judge: Any, conditions: Sequence[Condition]) -> dict[str, Any]:
    """``{"chat_template_kwargs": {row: keywords}}`` when a row renders with chat-template keywords, else ``{}``
    (so runs without any keep the settings they were saved with)."""
    keywords = chat_settings(judge, {c.name: c.template for c in conditions})
    return {"chat_template_kwargs": keywords} if keywords else {}


def _config(task: str, judge: Any, conditions: Sequence[Condition], baselines: Sequence[str], **extra: Any) -> dict[str, Any]:
    return {
        "task": task,
        "judge": getattr(judge, "name", str(judge)),
        "conditions": [[c.name, c.template_name, fingerprint(repr(load_template(c.template)))] for c in conditions],
        "baselines": list(baselines),
        **_chat(judge, conditions),
        **extra,
    }


def _meta(task: str, judge: Any, conditions: Sequence[Condition], names: Sequence[str], n: int, **extra: Any) -> dict[str, Any]:
    return {
        "task": task,
        "judge": getattr(judge, "name", str(judge)),
        "template": ", ".join(dict.fromkeys(c.template_name for c in conditions)),
        "conditions": [c.describe() for c in conditions],
        "baselines": list(names),
        "n": n,
        **_chat(judge, conditions),
        **extra,
    }


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
    """Score ``conditions`` on labelled items and compute the Table 1 metrics of each condition
    (natural threshold and a posteriori) and of each baseline (``baseline_texts`` = (references,
    hypotheses) they compare; the normalised edit distance between them is kept for the plots).

    Example:
        >>> S = ["The cat sleeps.", "Prices rose in May.", "He left early.", "The shop is closed."]
        >>> H = ["A cat is asleep.", "Prices fell in May.", "He went home early.", "The store is open."]
        >>> labels = [True, False, True, False]  # paraphrase or not
        >>> r = run_classification(judge, [Condition("PLUIE", "para-fs", {"source": S, "hypothesis": H})], labels,
        ...                        progress=False)
        >>> r["n"], r["positives"], sorted(r["metrics"]["PLUIE"])
        (4, 2, ['best_accuracy', 'best_f1', 'n', 'natural', 'positives'])
    """
    for condition in conditions:
        check_choice_condition(condition, False)
    y = as_labels(labels)
    n = len(y)
    names = parse_baselines(baselines) if baseline_texts is not None else []
    rows = list(rows) if rows is not None else [f"item {i + 1}" for i in range(n)]
    refs, hyps = baseline_texts if baseline_texts is not None else (None, None)
    items = []
    for i in range(n):
        inputs = [[c.value(f, i) for f in sorted(c.fields)] for c in conditions]
        item: dict[str, Any] = {"i": i, "row": rows[i], "label": bool(y[i])}
        if refs is not None:
            inputs.append([refs[i], hyps[i]])
        item["h"] = fingerprint(item["label"], inputs)
        items.append(item)
    functions = {name: (lambda index, name=name: score_baseline(name, [refs[i] for i in index], [hyps[i] for i in index]))
                 for name in names}
    extras = {} if refs is None else {"edit_distance": lambda index: edit_distances([refs[i] for i in index], [hyps[i] for i in index])}
    info = _meta("classification", judge, conditions, names, n, threshold=threshold, **(meta or {}))
    with ScoreStore(output_dir, _config("classification", judge, conditions, names), info, overwrite=overwrite) as store:
        lines = score_items(judge, conditions, items, baselines=functions, extras=extras, store=store if output_dir else None,
                            chunk_size=chunk_size, progress=progress)
    return _finish_run(info, lines, output_dir, plots)


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
    """PLUIE at ``threshold`` and at the a posteriori best-F1 / best-accuracy thresholds, and each
    baseline at its a posteriori thresholds; optional PNG plots (``plots_dir``); scores saved in
    ``output_dir`` as they come (resumable).

    Example:
        >>> S = ["The cat sleeps.", "Prices rose in May.", "He left early.", "The shop is closed."]
        >>> H = ["A cat is asleep.", "Prices fell in May.", "He went home early.", "The store is open."]
        >>> labels = [True, False, True, False]  # paraphrase or not
        >>> r = evaluate_classification(judge, {"source": S, "hypothesis": H}, labels, progress=False)
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
    """The judged conditions whose score is PLUIE (a Yes/No template): their ``sigmoid(score)`` is
    a probability to calibrate. Runs saved before conditions recorded their kind look the template up."""
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
        >>> S = ["The cat sleeps.", "Prices rose in May.", "He left early.", "The shop is closed."]
        >>> H = ["A cat is asleep.", "Prices fell in May.", "He went home early.", "The store is open."]
        >>> labels = [True, False, True, False]  # paraphrase or not
        >>> r = evaluate_classification(judge, {"source": S, "hypothesis": H}, labels, progress=False, output_dir="out/parareval")
        >>> run, lines = load_run("out/parareval")  # later, without the judge
        >>> classification_results(run["meta"], lines)["metrics"]["PLUIE"]["best_f1"] == r["metrics"]["PLUIE"]["best_f1"]
        True
    """
    if not lines:
        raise ValueError("no scored items yet.")
    labels = [line["label"] for line in lines]
    judged = [c["name"] for c in meta["conditions"]]
    names = [*judged, *meta.get("baselines", [])]
    scores = {name: [line["scores"][name] for line in lines] for name in names}
    threshold = meta.get("threshold", 0.0)
    results = {
        **{k: v for k, v in meta.items() if k not in ("n",)},
        "n": len(lines),
        "planned": meta.get("n", len(lines)),
        "positives": int(sum(labels)),
        "metrics": {name: classification_report(s, labels, natural_threshold=threshold if name in judged else None)
                    for name, s in scores.items()},
        "scores": scores,
        "labels": labels,
    }
    calibration = {name: calibration_report(scores[name], labels, heldout_fraction=EVAL_HELDOUT, seed=EVAL_SEED)
                   for name in _yes_no_conditions(meta)}
    if calibration:
        results["calibration"] = calibration
    if all(line.get("edit_distance") is not None for line in lines):
        from .plots import pearson

        distance = [line["edit_distance"] for line in lines]
        results["edit_distance"] = distance
        results["edit_distance_correlation"] = {
            name: {label: pearson([d for d, y in zip(distance, labels) if y == value], [x for x, y in zip(s, labels) if y == value])
                   for label, value in (("positive", True), ("negative", False))}
            for name, s in scores.items()
        }
    return results


def classification_plots(results: Mapping[str, Any], folder: str | Path) -> list[str]:
    """Threshold curves, histograms and score-vs-edit-distance scatter for each row of ``results``,
    and a reliability diagram of ``p_yes = sigmoid(score)`` for each judged Yes/No row (with the
    Platt-calibrated probabilities of the held-out items beside it)."""
    from .calibration import p_yes
    from .plots import PLUIE_AXIS, plot_edit_distance, plot_reliability, plot_score_histograms, plot_threshold_curves

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
    human_synonyms: Mapping[str, str] | None = None,
    rows: Sequence[str] | None = None,
    output_dir: str | Path | None = None,
    overwrite: bool = False,
    chunk_size: int | None = None,
    progress: bool = True,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score both candidates of every item under each condition (A and B of an item in one call),
    then the Table 2 metrics against the human A/B/tie choices; baselines are the similarity of
    each candidate to ``baseline_reference``.

    Example:
        >>> O = ["Teh cat sleeps.", "Prices rose in may.", "he left early"]  # texts to revise
        >>> I = ["Fix the typos."] * 3  # the instruction
        >>> A = ["The cat sleeps.", "Prices rose in May.", "He left."]  # two candidate revisions
        >>> B = ["The cats sleep.", "Prices rose in may.", "He left early."]
        >>> human = ["A", "tie", "B"]
        >>> r = run_preference(judge, [Condition("Rev-PLUIE", "rev", {"original": O, "instruction": I})], A, B, human,
        ...                    progress=False)
        >>> sorted(r["metrics"]["Rev-PLUIE"])[:4]
        ['cohens_kappa', 'cohens_kappa_range', 'cramers_v', 'cramers_v_range']
    """
    h = as_preferences(human, "human", human_synonyms)
    n = len(h)
    if len(candidates_a) != n or len(candidates_b) != n:
        raise ValueError(f"{len(candidates_a)} A candidates and {len(candidates_b)} B candidates for {n} human choices.")
    names = parse_baselines(baselines) if baseline_reference is not None else []
    rows = list(rows) if rows is not None else [f"item {i + 1}" for i in range(n)]
    items = []
    for i in range(n):
        inputs = [[c.value(f, i) for f in sorted(c.fields)] for c in conditions]
        inputs.append([candidates_a[i], candidates_b[i], baseline_reference[i] if baseline_reference is not None else None])
        items.append({"i": i, "row": rows[i], "human": h[i], "h": fingerprint(h[i], inputs)})

    def baseline(name: str) -> Callable[[list[int]], list[Any]]:
        def run(index: list[int]) -> list[Any]:
            ref = [baseline_reference[i] for i in index]
            a = score_baseline(name, ref, [candidates_a[i] for i in index])
            b = score_baseline(name, ref, [candidates_b[i] for i in index])
            return [[x, y] for x, y in zip(a, b)]
        return run

    info = _meta("preference", judge, conditions, names, n, epsilon=epsilon, **(meta or {}))
    with ScoreStore(output_dir, _config("preference", judge, conditions, names), info, overwrite=overwrite) as store:
        lines = score_items(judge, conditions, items, pairs=(candidates_a, candidates_b),
                            baselines={name: baseline(name) for name in names}, store=store if output_dir else None,
                            chunk_size=chunk_size, progress=progress, desc="scoring A and B")
    return _finish_run(info, lines, output_dir, False)


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
    """Score both candidates of each instance (``fields`` holds the template's other fields, e.g.
    ``source``), then pairwise accuracy with tie calibration, Cramér's V and Cohen's κ against the
    human A/B/tie choices, for PLUIE and each baseline (similarity of the candidate to the reference).

    Example:
        >>> S = ["The cat sleeps.", "Prices rose in May.", "He left early."]
        >>> A = ["A cat is asleep.", "Prices fell.", "He left."]
        >>> B = ["The cat sleeps.", "Prices went up in May.", "Nobody left."]
        >>> r = evaluate_preference(judge, {"source": S}, A, B, ["A", "tie", "B"], progress=False)
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
        >>> S = ["The cat sleeps.", "Prices rose in May.", "He left early."]
        >>> A = ["A cat is asleep.", "Prices fell.", "He left."]
        >>> B = ["The cat sleeps.", "Prices went up in May.", "Nobody left."]
        >>> r = run_preference(judge, [Condition("PLUIE", "para-fs", {"source": S})], A, B, ["A", "tie", "B"],
        ...                    progress=False, output_dir="out/pref")
        >>> run, lines = load_run("out/pref")  # later, without the judge
        >>> preference_results(run["meta"], lines)["metrics"]["PLUIE"]["pairwise_accuracy"] == r["metrics"]["PLUIE"]["pairwise_accuracy"]
        True
    """
    if not lines:
        raise ValueError("no scored items yet.")
    human = [line["human"] for line in lines]
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
    return {
        **{k: v for k, v in meta.items() if k not in ("n",)},
        "n": len(lines),
        "planned": meta.get("n", len(lines)),
        "metrics": metrics,
        "scores": scores,
    }


def logratio_row(name: str) -> str:
    """The result row of a choice condition read as the score log p(A) - log p(B) (tie-calibrated).

    Example:
        >>> logratio_row("LLM-choice")
        'LLM-choice, log p(A) − log p(B)'
    """
    return f"{name}, log p(A) − log p(B)"


# common -----------------------------------------------------------------------------------------
def _finish_run(meta: Mapping[str, Any], lines: Sequence[Mapping[str, Any]], output_dir: str | Path | None,
                plots: bool) -> dict[str, Any]:
    results = (classification_results if meta["task"] == "classification" else preference_results)(meta, lines)
    if plots and output_dir is not None and meta["task"] == "classification":
        results["plots"] = classification_plots(results, Path(output_dir) / "plots")
    if output_dir is not None:
        write_outputs(output_dir, results, task_markdown(results))
    return results


def report_folder(folder: str | Path, *, plots: bool = False) -> dict[str, Any]:
    """Recompute an evaluation's results (and plots) from its output folder alone, without the
    judge; works on an interrupted run too (the report says how many items it covers).

    Example:
        >>> S = ["The cat sleeps.", "Prices rose in May.", "He left early.", "The shop is closed."]
        >>> H = ["A cat is asleep.", "Prices fell in May.", "He went home early.", "The store is open."]
        >>> labels = [True, False, True, False]  # paraphrase or not
        >>> _ = evaluate_classification(judge, {"source": S, "hypothesis": H}, labels, progress=False, output_dir="out/parareval")
        >>> print(task_markdown(report_folder("out/parareval")))
        4 pairs, 2 positive; judge tiny-random, template para-fs.
        ...
    """
    run, lines = load_run(folder)
    meta = run["meta"]
    if meta.get("benchmark") == "PARAPHRASUS":
        from .paraphrasus import paraphrasus_results, paraphrasus_plots

        results = paraphrasus_results(meta, lines)
        if plots:
            results["plots"] = paraphrasus_plots(results, Path(folder) / "plots")
        write_outputs(folder, results, task_markdown(results))
        return results
    return _finish_run(meta, lines, folder, plots)
