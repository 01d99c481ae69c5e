"""Judge-annotated datasets: score a :class:`datasets.Dataset` with PLUIE, filter it, and keep the
best teacher candidates per source (best-of-n) to build distillation data.

Example:
    >>> from datasets import Dataset
    >>> ds = Dataset.from_dict({"source": ["The cat sleeps."] * 2, "hypothesis": ["A cat is asleep.", "Dogs bark."]})
    >>> ds = score_dataset(ds, judge)  # adds pluie_logratio, pluie_p_yes, pluie_verdict
    >>> ds.column_names
    ['source', 'hypothesis', 'pluie_logratio', 'pluie_p_yes', 'pluie_verdict']
    >>> best_of_n(ds, group_by="source", k=1).num_rows  # the best hypothesis of each source
    1
"""

from __future__ import annotations

import math
import uuid
from typing import TYPE_CHECKING, Any, Mapping

from ..core.fields import map_fields
from ..core.template import load_template

if TYPE_CHECKING:  # pragma: no cover
    from datasets import Dataset

    from ..core.judge import Judge

SCORE_COLUMNS = ("logratio", "p_yes", "verdict")


def _field_columns(dataset: "Dataset", template: Any, columns: Mapping[str, str] | None) -> dict[str, str]:
    """Map each template field to a dataset column (same name unless ``columns`` says otherwise;
    optional fields only when their column exists), with :mod:`pluie_reward.core.fields`."""
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
) -> "Dataset":
    """Add ``{prefix}logratio``, ``{prefix}p_yes`` and ``{prefix}verdict`` columns with a batched ``map``
    that calls :meth:`Judge.score` (the map shows a progress bar; ``desc=None`` keeps its default).

    Args:
        columns: template field -> dataset column, for columns not named like the fields.
        threshold: verdict is ``logratio > threshold`` (default: the judge's).

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
    mapping = _field_columns(dataset, template, columns)

    def annotate(batch: dict[str, list]) -> dict[str, list]:
        values = {field: batch[column] for field, column in mapping.items()}
        results = judge.score(template, details=True, threshold=threshold, truncate=truncate, **values)
        return {prefix + key: [r[key] for r in results] for key in SCORE_COLUMNS}

    # The judge (a whole model) is not hashed for the fingerprint; a fresh one avoids stale caches.
    return dataset.map(
        annotate,
        batched=True,
        batch_size=batch_size,
        load_from_cache_file=False,
        new_fingerprint=uuid.uuid4().hex,
        desc=desc,
    )


def _scores(dataset: "Dataset", score_column: str) -> list[float]:
    if score_column not in dataset.column_names:
        raise ValueError(
            f"the dataset has no column {score_column!r} (columns: {dataset.column_names}); "
            "score it first with score_dataset(dataset, judge) or pass judge=."
        )
    scores = dataset[score_column]
    for i, s in enumerate(scores):
        if s is None or not math.isfinite(s):
            raise ValueError(f"{score_column}[{i}] is {s!r}; every row needs a finite score.")
    return list(scores)


def filter_dataset(
    dataset: "Dataset",
    judge: "Judge | None" = None,
    template: Any = None,
    *,
    threshold: float = 0.0,
    score_column: str = "pluie_logratio",
    **score_kwargs: Any,
) -> "Dataset":
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
    if judge is not None:
        dataset = score_dataset(dataset, judge, template, **score_kwargs)
    scores = _scores(dataset, score_column)
    return dataset.select([i for i, s in enumerate(scores) if s > threshold])


def best_of_n(
    dataset: "Dataset",
    *,
    group_by: str = "source",
    score_column: str = "pluie_logratio",
    k: int = 1,
    threshold: float | None = None,
) -> "Dataset":
    """For each value of ``group_by`` keep the ``k`` highest-scoring rows, only those ``> threshold``
    when one is given (a group with none left disappears). Groups stay in order of first
    appearance; inside a group rows are sorted by decreasing score (equal scores: input order).

    Example:
        >>> from datasets import Dataset
        >>> scored = Dataset.from_dict({"source": ["s1", "s1", "s2"], "hypothesis": ["a", "b", "c"],
        ...                             "pluie_logratio": [1.5, 2.5, -0.3]})
        >>> best = best_of_n(scored, group_by="source", k=1, threshold=0.0)
        >>> list(best["hypothesis"])  # s2's only candidate is not above the threshold
        ['b']
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    if group_by not in dataset.column_names:
        raise ValueError(f"the dataset has no column {group_by!r} to group by (columns: {dataset.column_names}).")
    scores = _scores(dataset, score_column)
    groups: dict[Any, list[int]] = {}
    for i, key in enumerate(dataset[group_by]):
        groups.setdefault(key, []).append(i)
    keep: list[int] = []
    for rows in groups.values():
        ranked = sorted(rows, key=lambda i: -scores[i])  # stable: ties keep input order
        if threshold is not None:
            ranked = [i for i in ranked if scores[i] > threshold]
        keep.extend(ranked[:k])
    return dataset.select(keep)
