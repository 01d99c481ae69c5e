"""Training pairs for a judge adapter (template fields, labels and/or teacher log-ratios), their split, teacher
targets through any :meth:`Judge.score <pluie_reward.Judge.score>`, and the prompt ids the loss and ``Judge.score`` read.

Example:
    >>> data = PairData.build("para-direct", {"source": ["a", "b", "c"], "hypothesis": ["a", "x", "c"]},
    ...                       labels=[True, False, True])
    >>> len(data), data.labels.tolist()
    (3, [True, False, True])
    >>> train, heldout = data.split(0.34, seed=0)
    >>> len(train), len(heldout)
    (2, 1)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from ...core.prompt import BoundTemplate
from ...core.template import Template, load_template, normalize_fields
from ..evaluation.calibration import heldout_split
from ..evaluation.metrics import as_labels, as_scores
from ..evaluation.scoring import score_in_chunks

LABEL, TARGET, CONTRAST = "pluie_label", "pluie_target", "pluie_contrast_ids"


@dataclass(frozen=True)
class PairData:
    """Items to tune on or to evaluate: field columns plus optional binary ``labels``, teacher log-ratios ``targets``
    and ``contrast`` items (per item, the fields of one that must score higher, or ``None``); made by :meth:`build`."""

    columns: dict[str, list[str | None]]
    labels: np.ndarray | None = None
    targets: np.ndarray | None = None
    contrast: list[dict[str, str | None] | None] | None = None

    @classmethod
    def build(
        cls,
        template: "str | Template | None",
        fields: Mapping[str, Any],
        labels: Sequence[Any] | None = None,
        targets: Sequence[float] | None = None,
        contrast: Sequence[Mapping[str, str] | None] | None = None,
    ) -> "PairData":
        """Check and normalise items given as template fields (lists of strings, one per item).

        Args:
            template: the template whose fields the columns fill.
            fields: ``{field: [value per item]}``, e.g. ``{"source": [...], "hypothesis": [...]}``.
            labels: booleans (or 1/0, "yes"/"no", "true"/"false"), one per item.
            targets: teacher log-ratios, finite floats, one per item.
            contrast: per item ``None`` or the fields of an item that should score higher (e.g. the honest
                paraphrase a meaning flip was made from): :func:`~pluie_reward.tools.tune.loss.contrast_loss`.

        Returns:
            The checked data.

        Example:
            >>> PairData.build("para-fs", {"source": ["s"], "hypothesis": ["h"]}, targets=[float("nan")])
            Traceback (most recent call last):
            ...
            ValueError: targets has 1 NaN/infinite value(s), first at index 0; drop or fix them first.
        """
        t = load_template(template)
        columns, n = normalize_fields(t, dict(fields))
        if n == 0:
            raise ValueError("no items: pass at least one pair.")
        y = as_labels(labels, "labels") if labels is not None else None
        z = as_scores(targets, "targets") if targets is not None else None
        for name, values in (("labels", y), ("targets", z)):
            if values is not None and len(values) != n:
                raise ValueError(f"{name} has {len(values)} values for {n} items; give one per item.")
        if contrast is not None:
            if len(contrast) != n:
                raise ValueError(f"contrast has {len(contrast)} entries for {n} items; give one per item (None: no contrast).")
            contrast = [None if c is None else _one_item(t, c) for c in contrast]
        return cls(columns, y, z, contrast)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def subset(self, indices: Sequence[int]) -> "PairData":
        """The items at ``indices`` (in that order)."""
        index = list(indices)
        return PairData(
            {k: [v[i] for i in index] for k, v in self.columns.items()},
            None if self.labels is None else self.labels[index],
            None if self.targets is None else self.targets[index],
            None if self.contrast is None else [self.contrast[i] for i in index],
        )

    def with_targets(self, targets: Sequence[float]) -> "PairData":
        """The same items with teacher log-ratios ``targets`` (checked: finite, one per item)."""
        z = as_scores(targets, "targets")
        if len(z) != len(self):
            raise ValueError(f"targets has {len(z)} values for {len(self)} items.")
        return replace(self, targets=z)

    def split(self, fraction: float, seed: int = 0) -> tuple["PairData", "PairData"]:
        """A random ``(train, held-out)`` split: ``round(fraction * n)`` held out (at least 1 if ``fraction > 0``).

        Example:
            >>> data = PairData.build("para-fs", {"source": list("abcd"), "hypothesis": list("abcd")})
            >>> [len(part) for part in data.split(0.5, seed=1)]
            [2, 2]
        """
        train, heldout = heldout_split(len(self), fraction, seed, parts="training", items="pairs")
        return self.subset(train), self.subset(heldout)


def _one_item(template: Template, fields: Mapping[str, str]) -> dict[str, str | None]:
    """One item's fields, checked as :func:`normalize_fields` checks columns (missing, unknown, not text)."""
    columns, _ = normalize_fields(template, {k: [v] for k, v in dict(fields).items()})
    return {k: v[0] for k, v in columns.items()}


def check_student_template(bound: BoundTemplate) -> None:
    """The student's template must be a Yes/No template read in one forward pass.

    Raises:
        ValueError: for templates with N answers, a judge-generated turn or multi-token answers.
    """
    t = bound.template
    if t.kind != "binary":
        raise ValueError(
            f"template {t.name!r} has {len(t.answers)} answers ({t.kind}); a judge adapter is tuned on a Yes/No "
            "template (PLUIE = logit[yes] - logit[no])."
        )
    if t.generates:
        raise ValueError(
            f"template {t.name!r} lets the judge write a turn before answering; tune on a template read in one "
            "forward pass (e.g. para-direct or para-fs). A teacher may use such a template."
        )
    if not bound.single_token:
        raise ValueError(f"template {t.name!r}: an answer is several tokens for this tokenizer; tuning needs one token per answer.")


def teacher_targets(
    teacher: Any,
    template: "str | Template | None",
    data: PairData,
    *,
    chunk_size: int = 128,
    progress: bool = True,
    desc: str = "teacher",
) -> np.ndarray:
    """Teacher log-ratios for every item, through ``teacher.score`` (any :class:`~pluie_reward.Judge`).

    Args:
        teacher: the teacher judge.
        template: the teacher's template (Yes/No or a choice: the score is a log-ratio; not a scale).
        data: the items (their columns).
        chunk_size: items per scoring call (progress granularity).
        progress: show a progress bar.

    Returns:
        One float per item.

    Example:
        >>> data = PairData.build("para-fs", {"source": ["The cat sleeps.", "Prices rose."],
        ...                                   "hypothesis": ["A cat is asleep.", "Prices fell."]})
        >>> teacher_targets(judge, "para-fs", data, progress=False)  # e.g. a big judge
        array([..., ...])
    """
    t = load_template(template)
    if t.kind == "scale":
        raise ValueError(f"teacher template {t.name!r} is a rating scale (its score is an expected grade, not a log-ratio).")
    missing = [f for f in t.fields if f not in data.columns]
    if missing:
        raise ValueError(f"teacher template {t.name!r} needs the field(s) {missing}; the data has {sorted(data.columns)}.")
    columns = {f: v for f, v in data.columns.items() if f in t.all_fields}
    out = score_in_chunks(teacher, t, columns, len(data), chunk_size=chunk_size, desc=desc, progress=progress, units="pairs")
    return as_scores([float(x) for x in out], "teacher scores")


def encode(bound: BoundTemplate, data: PairData, truncate: bool = True) -> Any:
    """A ``datasets.Dataset`` of the prompt ids :meth:`Judge.score` reads (``input_ids``) and the supervision
    (``pluie_label`` 0/1, ``pluie_target``, ``pluie_contrast_ids``: the contrast item's prompt ids or empty).

    Example:
        >>> data = PairData.build("para-direct", {"source": ["The cat sleeps.", "Prices rose."],
        ...                                       "hypothesis": ["A cat is asleep.", "Prices fell."]}, labels=[True, False])
        >>> encode(judge.bind("para-direct"), data)
        Dataset({
            features: ['input_ids', 'pluie_label'],
            num_rows: 2
        })
    """
    from datasets import Dataset

    check_student_template(bound)
    items = bound.encode_items(data.columns, len(data), truncate=truncate)
    rows: dict[str, list] = {"input_ids": [list(item.ids) for item in items]}
    if data.labels is not None:
        rows[LABEL] = [float(v) for v in data.labels]
    if data.targets is not None:
        rows[TARGET] = [float(v) for v in data.targets]
    if data.contrast is not None:
        which = [i for i, c in enumerate(data.contrast) if c is not None]
        fields = {f: [data.contrast[i].get(f) for i in which] for f in data.columns}
        ids = iter(bound.encode_items(fields, len(which), truncate=truncate))
        rows[CONTRAST] = [list(next(ids).ids) if c is not None else [] for c in data.contrast]
    return Dataset.from_dict(rows)


@dataclass
class PairCollator:
    """Right-pads ``input_ids`` with an attention mask and stacks the supervision as float tensors; contrast items
    go to ``contrast_input_ids``/``contrast_attention_mask`` with ``contrast_rows``, the rows they belong to.

    Example:
        >>> batch = PairCollator(pad_id=0)([{"input_ids": [5, 6, 7], "pluie_label": 1.0}, {"input_ids": [8], "pluie_label": 0.0}])
        >>> batch["input_ids"].tolist(), batch["attention_mask"].tolist(), batch["pluie_label"].tolist()
        ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]], [1.0, 0.0])
        >>> batch = PairCollator(pad_id=0)([{"input_ids": [5], "pluie_contrast_ids": []}, {"input_ids": [8], "pluie_contrast_ids": [8, 9]}])
        >>> batch["contrast_input_ids"].tolist(), batch["contrast_rows"].tolist()
        ([[8, 9]], [1])
    """

    pad_id: int

    def pad(self, rows: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        """``(ids, mask)``: the rows right-padded to the longest."""
        import torch
        from torch.nn.utils.rnn import pad_sequence

        ids = pad_sequence([torch.as_tensor(r, dtype=torch.long) for r in rows], batch_first=True, padding_value=self.pad_id)
        mask = (torch.arange(ids.shape[1]) < torch.tensor([len(r) for r in rows])[:, None]).long()
        return ids, mask

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        import torch

        ids, mask = self.pad([f["input_ids"] for f in features])
        batch: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        for key in (LABEL, TARGET):
            if key in features[0]:
                batch[key] = torch.tensor([float(f[key]) for f in features], dtype=torch.float32)
        rows = [i for i, f in enumerate(features) if f.get(CONTRAST)]
        if rows:
            batch["contrast_input_ids"], batch["contrast_attention_mask"] = self.pad([features[i][CONTRAST] for i in rows])
            batch["contrast_rows"] = torch.tensor(rows, dtype=torch.long)
        return batch
