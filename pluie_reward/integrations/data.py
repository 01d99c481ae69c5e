"""Judge-annotated datasets: score a :class:`datasets.Dataset` with PLUIE, filter it, and keep the
best teacher candidates per source (best-of-n) to build distillation data.

PLUIE alone prefers copies, so for a template of a known task
(:func:`~pluie_reward.integrations.novelty.task_of`) :func:`score_dataset` also adds the copy-proof score,
novelty and a copy flag, and :func:`best_of_n` ranks by the copy-proof score by default.

Example:
    >>> from datasets import Dataset
    >>> ds = Dataset.from_dict({"source": ["The cat sleeps."] * 2, "hypothesis": ["A cat is asleep.", "The cat sleeps."]})
    >>> ds = score_dataset(ds, judge)  # adds pluie_logratio, pluie_p_yes, pluie_verdict, pluie_novelty, pluie_copy, pluie_copy_proof
    >>> list(ds["pluie_copy"]), ds["pluie_copy_proof"][1]
    ([False, True], 0.0)
    >>> list(best_of_n(ds, group_by="source", k=1)["hypothesis"])  # the best of each source: never the copy
    ['A cat is asleep.']
"""

from __future__ import annotations

import math
import re
import uuid
from typing import TYPE_CHECKING, Any, Mapping

from ..core.template import load_template
from .fields import map_fields
from .novelty import resolve_task, task_of, words

if TYPE_CHECKING:  # pragma: no cover
    from datasets import Dataset

    from ..core.judge import Judge

SCORE_COLUMNS = ("logratio", "p_yes", "verdict")
COPY_PROOF_COLUMNS = ("novelty", "copy", "copy_proof")


def _field_columns(dataset: "Dataset", template: Any, columns: Mapping[str, str] | None) -> dict[str, str]:
    """Map each template field to a dataset column (same name unless ``columns`` says otherwise;
    optional fields only when their column exists), with :mod:`pluie_reward.integrations.fields`."""
    tmpl = load_template(template)
    field_map = map_fields(tmpl.fields, columns, optional=tmpl.optional_fields, template=tmpl.name, setting="columns")
    return field_map.select(dataset.column_names, where="the dataset")


def score_dataset(
    dataset: "Dataset",
    judge: "Judge",
    template: Any = None,
    *,
    columns: Mapping[str, str] | None = None,
    threshold: float | None = None,
    batch_size: int = 64,
    prefix: str = "pluie_",
    truncate: bool = True,
    desc: str | None = "PLUIE scoring",
    task: Any = None,
    overwrite: bool = False,
) -> "Dataset":
    """Add ``{prefix}logratio``, ``{prefix}p_yes`` and ``{prefix}verdict`` columns with a batched ``map``
    that calls :meth:`Judge.score` (the map shows a progress bar; ``desc=None`` keeps its default),
    and, for a template of a known task, ``{prefix}novelty``
    (:func:`~pluie_reward.integrations.novelty.copy_proof_novelty` against the task's source
    field), ``{prefix}copy`` (:func:`~pluie_reward.integrations.novelty.is_copy`) and
    ``{prefix}copy_proof`` (:func:`~pluie_reward.integrations.novelty.copy_proof_score`: the
    reward of :class:`~pluie_reward.ParaphraseReward` and its siblings, 0 for a copy); with a task the judge reads
    each hypothesis' reading, as those rewards' judge does (:meth:`~pluie_reward.integrations.novelty.Task.read`).

    Args:
        columns: template field -> dataset column, for columns not named like the fields.
        threshold: verdict is ``logratio > threshold`` (default: the judge's).
        task: the :class:`~pluie_reward.integrations.novelty.Task` (or its name) for the
            copy-proof columns; default: the template's (``para-*``: paraphrase, ``net``: translation,
            ``rev``: revision; none for other templates, and then no such columns).
        overwrite: replace score columns the dataset already has (default: refuse them, ValueError).

    Returns:
        The dataset with the new columns.

    Raises:
        ValueError, TypeError: a bad item (the message names its absolute row), a column that exists
            without ``overwrite``, a threshold that is not a finite number.

    Example:
        >>> from datasets import Dataset
        >>> ds = Dataset.from_dict({"source": ["The cat sleeps.", "Prices rose."],
        ...                         "paraphrase": ["A cat is asleep.", "Prices fell."]})
        >>> scored = score_dataset(ds, judge, "para-fs", columns={"hypothesis": "paraphrase"})
        >>> scored["pluie_logratio"][:2]
        [..., ...]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    if threshold is not None:
        _check_threshold(threshold)
    mapping = _field_columns(dataset, template, columns)
    task = _task(template, task)
    added = [prefix + key for key in SCORE_COLUMNS + (COPY_PROOF_COLUMNS if task is not None else ())]
    existing = [c for c in added if c in dataset.column_names]
    if existing and not overwrite:
        raise ValueError(f"the dataset already has the column(s) {existing}; pass overwrite=True to replace them, "
                         f"or prefix= to add the new scores beside them (prefix={prefix!r} now).")

    def annotate(batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        values = {field: batch[column] for field, column in mapping.items()}
        judged = values if task is None else task.judged(values, judge.clean_text)  # a task's readings, as its reward's
        try:
            results = judge.score(template, details=True, threshold=threshold, truncate=truncate, **judged)
        except (TypeError, ValueError) as err:  # the judge counts items from the batch's start: name the dataset's row
            raise type(err)(_absolute_rows(str(err), indices)) from err
        out = {prefix + key: [r[key] for r in results] for key in SCORE_COLUMNS}
        if task is not None:
            out.update(_copy_proof_columns(task, values[task.source_field], values["hypothesis"], out[prefix + "p_yes"], prefix,
                                           judge.clean_text))
        return out

    # The judge (a whole model) is not hashed for the fingerprint; a fresh one avoids stale caches.
    return dataset.map(annotate, batched=True, batch_size=batch_size, with_indices=True, load_from_cache_file=False,
                       new_fingerprint=uuid.uuid4().hex, desc=desc)


def _absolute_rows(message: str, indices: list[int]) -> str:
    """A judge's message about "item i" of a batch, about the dataset's row instead.

    Example:
        >>> _absolute_rows("field 'hypothesis', item 5: expected a string.", list(range(8, 16)))
        "field 'hypothesis', row 13: expected a string."
        >>> _absolute_rows("something else", [8, 9])
        'rows 8-9: something else'
    """
    swapped, found = re.subn(r"\bitem (\d+)\b", lambda m: f"row {indices[int(m.group(1))]}", message)
    return swapped if found else f"rows {indices[0]}-{indices[-1]}: {message}"


def _check_threshold(threshold: float) -> float:
    """A threshold as a finite float (nothing is above nan: every row would go without a word).

    Example:
        >>> _check_threshold(0)
        0.0
    """
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}.")
    return float(threshold)


def _task(template: Any, task: Any) -> Any:
    """The task of the copy-proof columns: ``task`` (a Task or its name), else the template's, else None."""
    task = task_of(load_template(template)) if task is None else resolve_task(task)
    if task is not None and task.source_field not in load_template(template).fields:
        raise ValueError(f"task {task.name!r} reads the field {task.source_field!r}, which template "
                         f"{load_template(template).name!r} does not have.")
    return task


def _copy_proof_columns(task: Any, sources: list, hypotheses: list, p_yes: list, prefix: str, read: bool) -> dict[str, list]:
    readings = task.readings(sources, hypotheses, read)  # what the judge read (Task.batch counts the same)
    novelty = [task.novelty(s, r) for s, r in zip(sources, readings)]
    return {
        prefix + "novelty": novelty,
        prefix + "copy": [task.is_copy(s, r) for s, r in zip(sources, readings)],
        prefix + "copy_proof": [task.score(*item) for item in zip(p_yes, sources, hypotheses, novelty, readings)],
    }


def _scores(dataset: "Dataset", score_column: str) -> list[float]:
    if score_column not in dataset.column_names:
        hint = (" (score_dataset adds it for the paraphrase, translation and revision templates, or with task=; "
                "score_column='pluie_logratio' ranks by PLUIE, which prefers copies)" if score_column.endswith("copy_proof") else "")
        raise ValueError(
            f"the dataset has no column {score_column!r} (columns: {dataset.column_names}); "
            f"score it first with score_dataset(dataset, judge) or pass judge={hint}."
        )
    scores = dataset[score_column]
    for i, s in enumerate(scores):
        if s is None or not math.isfinite(s):
            raise ValueError(f"{score_column}[{i}] is {s!r}; every row needs a finite score.")
    return list(scores)


def filter_dataset(dataset: "Dataset", judge: "Judge | None" = None, template: Any = None, *, threshold: float = 0.0,
                   score_column: str = "pluie_logratio", **score_kwargs: Any) -> "Dataset":
    """Keep the rows whose score is ``> threshold``; rows are scored first when ``judge`` is given
    (then ``score_column`` must be ``prefix + "logratio"``, the default).

    Example:
        >>> from datasets import Dataset
        >>> ds = Dataset.from_dict({"source": ["The cat sleeps."] * 2, "hypothesis": ["A cat is asleep.", "Dogs bark."]})
        >>> kept = filter_dataset(ds, judge, threshold=0.0)  # scored first
        >>> scored = ds.add_column("pluie_logratio", [1.7, -2.4])  # or already scored
        >>> list(filter_dataset(scored, threshold=0.0)["hypothesis"])
        ['A cat is asleep.']
    """
    _check_threshold(threshold)
    if judge is not None:
        dataset = score_dataset(dataset, judge, template, **score_kwargs)
    scores = _scores(dataset, score_column)
    return dataset.select([i for i, s in enumerate(scores) if s > threshold])


def best_of_n(dataset: "Dataset", *, group_by: str = "source", score_column: str = "pluie_copy_proof", k: int = 1,
              threshold: float | None = None, select: str = "score", prefix: str = "pluie_",
              length_ratio: "tuple[float, float] | None" = None, text_column: str = "hypothesis") -> "Dataset":
    """For each value of ``group_by`` keep the ``k`` highest-scoring rows, only those ``> threshold``
    when one is given (a group with none left disappears). Groups stay in order of first
    appearance; inside a group rows are sorted by decreasing score (equal scores: input order).

    The default score is the copy-proof score of :func:`score_dataset` (in [0, 1): a threshold of 0
    drops copies); ``score_column="pluie_logratio"`` ranks by PLUIE, which prefers copies.

    ``select="novel"`` makes fidelity a gate and novelty the choice (as Impossible Distillation, Jung et al.
    2023, keeps the least-overlapping survivor): among the rows above ``threshold`` (required: with the
    copy-proof score, the floor folds in the judge's p_yes, the copy rule and the length floor), whose
    ``{prefix}verdict`` is true and ``{prefix}copy`` false where those columns exist, keep the ``k`` with the
    highest ``{prefix}novelty`` (equal novelty: the higher score, then input order). ``length_ratio=(low, high)``
    adds a length gate in either mode: a row's words over its source's (the ``group_by`` column) must lie in
    ``[low, high]`` (Impossible Distillation's is (0.8, 1.5); it keeps off candidates that append commentary,
    whose added words count as novelty).

    Args:
        dataset: scored rows (:func:`score_dataset`).
        group_by: the column whose values form the groups (the source).
        score_column: the score that ranks (``select="score"``) or gates and breaks ties (``"novel"``).
        k: rows kept per group.
        threshold: keep only rows whose score is above it (a finite number).
        select: ``"score"`` (the default) or ``"novel"``.
        prefix: the prefix of :func:`score_dataset`'s columns (``select="novel"`` reads novelty, verdict, copy).
        length_ratio: (low, high) bounds of a row's word count over its source's, or None (no length gate).
        text_column: the column of the candidates (for ``length_ratio``).

    Returns:
        The kept rows.

    Example:
        >>> from datasets import Dataset
        >>> scored = Dataset.from_dict({"source": ["s1", "s1", "s2"], "hypothesis": ["a", "b", "c"],
        ...                             "pluie_logratio": [1.5, 2.5, -0.3]})
        >>> best = best_of_n(scored, group_by="source", k=1, threshold=0.0, score_column="pluie_logratio")
        >>> list(best["hypothesis"])  # s2's only candidate is not above the threshold
        ['b']
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    if select not in ("score", "novel"):
        raise ValueError(f"select must be 'score' or 'novel', got {select!r}.")
    if threshold is not None:
        _check_threshold(threshold)
    elif select == "novel":
        raise ValueError("select='novel' keeps the most novel row above a floor: pass threshold= (e.g. 0.7 on the "
                         "copy-proof score, which is 0 for a copy).")
    if group_by not in dataset.column_names:
        raise ValueError(f"the dataset has no column {group_by!r} to group by (columns: {dataset.column_names}).")
    scores = _scores(dataset, score_column)
    passes = [threshold is None or s > threshold for s in scores]
    if length_ratio is not None:
        passes = [p and r for p, r in zip(passes, _within_length(dataset, group_by, text_column, length_ratio))]
    novelty = [0.0] * len(scores)  # select="score": the score alone ranks
    if select == "novel":
        novelty, accepted = _novel_gate(dataset, prefix)
        passes = [p and a for p, a in zip(passes, accepted)]
    groups: dict[Any, list[int]] = {}
    for i, key in enumerate(dataset[group_by]):
        groups.setdefault(key, []).append(i)
    keep: list[int] = []
    for rows in groups.values():
        ranked = [i for i in sorted(rows, key=lambda i: (-novelty[i], -scores[i])) if passes[i]]  # stable: ties keep input order
        keep.extend(ranked[:k])
    return dataset.select(keep)


def _within_length(dataset: "Dataset", source_column: str, text_column: str, length_ratio: Any) -> list[bool]:
    """Whether each row's word count over its source's lies in ``length_ratio`` (a source without a word: yes).

    Example:
        >>> from datasets import Dataset
        >>> rows = Dataset.from_dict({"source": ["a b c d"] * 3, "hypothesis": ["a b", "a b c d e", "a b c d e f g"]})
        >>> _within_length(rows, "source", "hypothesis", (0.8, 1.5))  # 2/4, 5/4, 7/4
        [False, True, False]
    """
    if (isinstance(length_ratio, (str, bytes)) or not hasattr(length_ratio, "__len__") or len(length_ratio) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in length_ratio)
            or not 0 <= length_ratio[0] <= length_ratio[1]):
        raise ValueError(f"length_ratio must be (low, high) with 0 <= low <= high, finite, got {length_ratio!r}.")
    if text_column not in dataset.column_names:
        raise ValueError(f"length_ratio reads the candidates in column {text_column!r}, which the dataset does not have "
                         f"(columns: {dataset.column_names}); pass text_column=.")
    low, high = length_ratio
    out = []
    for source, text in zip(dataset[source_column], dataset[text_column]):
        n = len(words(source))
        out.append(n == 0 or low <= len(words(text)) / n <= high)
    return out


def _novel_gate(dataset: "Dataset", prefix: str) -> tuple[list[float], list[bool]]:
    """``select="novel"``'s reads: each row's novelty, and whether the judge accepts it and it is no copy
    (where the verdict and copy columns exist)."""
    column = prefix + "novelty"
    if column not in dataset.column_names:
        raise ValueError(f"select='novel' reads the column {column!r}, which the dataset does not have "
                         f"(columns: {dataset.column_names}); score_dataset adds it for a template of a known task, or with task=.")
    n = dataset.num_rows
    verdicts = dataset[prefix + "verdict"] if prefix + "verdict" in dataset.column_names else [True] * n
    copies = dataset[prefix + "copy"] if prefix + "copy" in dataset.column_names else [False] * n
    return _scores(dataset, column), [bool(v) and not c for v, c in zip(verdicts, copies)]


def describe_pairs(dataset: "Dataset", *, prefix: str = "pluie_") -> dict[str, Any]:
    """What a (kept) set of scored pairs holds: ``pairs``, mean ``pluie`` (log-ratio), ``accept_rate``
    (verdicts), and, when :func:`score_dataset` added them, ``copy_rate``, mean ``novelty`` and mean
    ``copy_proof`` (None otherwise).

    Args:
        dataset: rows scored by :func:`score_dataset`.
        prefix: the prefix its columns were given.

    Returns:
        The statistics (None for a mean over no rows).

    Example:
        >>> from datasets import Dataset
        >>> kept = Dataset.from_dict({"pluie_logratio": [4.0, 2.0], "pluie_verdict": [True, True],
        ...                           "pluie_novelty": [0.0, 0.5], "pluie_copy": [True, False], "pluie_copy_proof": [0.0, 0.85]})
        >>> describe_pairs(kept)
        {'pairs': 2, 'pluie': 3.0, 'accept_rate': 1.0, 'copy_rate': 0.5, 'novelty': 0.25, 'copy_proof': 0.425}
    """
    n = dataset.num_rows

    def mean(name: str) -> float | None:
        column = prefix + name
        if column not in dataset.column_names or not n:
            return None
        return math.fsum(float(v) for v in dataset[column]) / n

    return {"pairs": n, "pluie": mean("logratio"), "accept_rate": mean("verdict"), "copy_rate": mean("copy"),
            "novelty": mean("novelty"), "copy_proof": mean("copy_proof")}
