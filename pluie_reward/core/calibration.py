"""A fitted calibration of PLUIE: ``p_calibrated = sigmoid(a * PLUIE + b)`` (Platt scaling).

``a`` and ``b`` are fitted on labelled scores (``pluie-reward calibrate``); a :class:`~pluie_reward.Judge`
given one adds ``p_calibrated`` to its ``details=True`` records (verdicts and floats stay raw). Saved as
``calibration.json``. Standard library only.

Example:
    >>> c = Calibration(a=0.5, b=-1.0, template="para-fs")
    >>> round(c(2.0), 4)   # sigmoid(0.5 * 2 - 1) = sigmoid(0)
    0.5
    >>> Calibration.from_dict(c.to_dict()) == c
    True
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

FILE_NAME = "calibration.json"
FORMAT = "pluie-calibration/1"
_WARNED: set[tuple[str | None, str]] = set()  # (fitted template, scored template) pairs already warned about


def sigmoid(x: float) -> float:
    """Numerically safe logistic function.

    Example:
        >>> sigmoid(0.0)
        0.5
    """
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"calibration: {name} must be a finite number, got {value!r}.")
    return float(value)


@dataclass(frozen=True)
class Calibration:
    """Platt scaling of a Yes/No judge's PLUIE: ``p = sigmoid(a * logratio + b)``.

    ``a = 1, b = 0`` is the identity (``p = p_yes``); ``1 / a`` acts as a temperature and ``-b / a``
    is the log-ratio where ``p = 0.5``.

    Example:
        >>> Calibration(a=float("nan"))
        Traceback (most recent call last):
        ...
        ValueError: calibration: a must be a finite number, got nan.
    """

    a: float = field(default=1.0, metadata={"help": "slope on PLUIE (1 / temperature); 1 keeps the raw sharpness"})
    b: float = field(default=0.0, metadata={"help": "bias added to a * PLUIE; 0 keeps the raw 0.5 point at PLUIE = 0"})
    template: str | None = field(default=None, metadata={"help": "the template whose scores it was fitted on"})
    judge: str | None = field(default=None, metadata={"help": "the judge whose scores it was fitted on"})
    n_fit: int = field(default=0, metadata={"help": "labelled items the fit used"})
    n_heldout: int = field(default=0, metadata={"help": "labelled items kept out of the fit, for the before/after metrics"})
    heldout_fraction: float = field(default=0.0, metadata={"help": "share of the items held out"})
    seed: int | None = field(default=None, metadata={"help": "seed of the held-out split"})
    n_bins: int = field(default=10, metadata={"help": "equal-width bins of the expected calibration error in `metrics`"})
    metrics: Mapping[str, Any] = field(default_factory=dict, metadata={
        "help": "{'heldout': {'before': {...}, 'after': {...}}, 'fit': {...}}: ECE, Brier score and log loss of "
                "p_yes (before) and of the calibrated p (after)"})

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", _finite("a", self.a))
        object.__setattr__(self, "b", _finite("b", self.b))
        for name in ("n_fit", "n_heldout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"calibration: {name} must be an integer >= 0, got {value!r}.")
        if isinstance(self.n_bins, bool) or not isinstance(self.n_bins, int) or self.n_bins < 1:
            raise ValueError(f"calibration: n_bins must be a positive integer, got {self.n_bins!r}.")

    # applying --------------------------------------------------------------------------------
    def logit(self, logratio: float) -> float:
        """The calibrated log-odds ``a * logratio + b``.

        Example:
            >>> Calibration(a=2.0, b=1.0).logit(0.5)
            2.0
        """
        return self.a * float(logratio) + self.b

    def __call__(self, logratio: float) -> float:
        """The calibrated probability of Yes, ``sigmoid(a * logratio + b)``.

        Example:
            >>> Calibration()(0.0)
            0.5
        """
        return sigmoid(self.logit(logratio))

    def threshold(self, p: float = 0.5) -> float:
        """The raw log-ratio where the calibrated probability equals ``p``: ``(logit(p) - b) / a``; pass it
        as ``Judge(threshold=...)`` for verdicts that mean ``p_calibrated > p`` (verdicts stay on the raw
        log-ratio otherwise). Needs ``a > 0`` (a judge whose scores rank the labels the right way).

        Example:
            >>> Calibration(a=0.5, b=1.0).threshold()   # sigmoid(0.5 * s + 1) = 0.5 at s = -2
            -2.0
        """
        if not 0 < p < 1:
            raise ValueError(f"p must lie strictly between 0 and 1, got {p!r}.")
        if self.a <= 0:
            raise ValueError(f"a = {self.a:.4g} <= 0: the calibrated probability does not increase with PLUIE, so no "
                             "threshold on PLUIE means 'p_calibrated > p'; this judge ranks the labels the wrong way.")
        return (math.log(p) - math.log1p(-p) - self.b) / self.a

    def annotate(self, records: list[dict[str, Any]], template: str | None = None) -> list[dict[str, Any]]:
        """Add ``p_calibrated`` to Yes/No records (those with a ``logratio``), in place; records of
        templates with N answers are left as they are. Warns once when ``template`` is not the
        template the calibration was fitted on.

        Args:
            records: ``Judge.score(..., details=True)`` records.
            template: the name of the template they were scored with.

        Returns:
            The same records.

        Example:
            >>> Calibration(a=2.0, b=0.0).annotate([{"logratio": 0.0, "p_yes": 0.5, "verdict": False}])
            [{'logratio': 0.0, 'p_yes': 0.5, 'verdict': False, 'p_calibrated': 0.5}]
        """
        if template is not None and self.template is not None and template != self.template and records \
                and "logratio" in records[0] and (self.template, template) not in _WARNED:
            _WARNED.add((self.template, template))
            warnings.warn(f"the judge's calibration was fitted on template {self.template!r}; p_calibrated of template "
                          f"{template!r} applies it anyway. Fit one per template (pluie-reward calibrate -t {template}).",
                          stacklevel=3)
        for record in records:
            if "logratio" in record:
                record["p_calibrated"] = self(record["logratio"])
        return records

    # saving and loading ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with a ``format`` tag).

        Example:
            >>> Calibration(a=0.5).to_dict()["a"]
            0.5
        """
        return {"format": FORMAT, **asdict(self), "metrics": json.loads(json.dumps(dict(self.metrics)))}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Calibration":
        """A calibration from :meth:`to_dict`'s dict; unknown keys are an error naming them.

        Example:
            >>> Calibration.from_dict({"a": 2, "b": 0, "temperature": 3})  # doctest: +NORMALIZE_WHITESPACE
            Traceback (most recent call last):
            ...
            ValueError: calibration: unknown key(s) ['temperature']; known: ['a', 'b', 'template', 'judge', 'n_fit', 'n_heldout',
            'heldout_fraction', 'seed', 'n_bins', 'metrics'].
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"calibration: expected a JSON object with 'a' and 'b', got {type(data).__name__}.")
        known = [f.name for f in fields(cls)]
        values = {k: v for k, v in data.items() if k != "format"}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"calibration: unknown key(s) {unknown}; known: {known}.")
        if "a" not in values or "b" not in values:
            raise ValueError("calibration: the file needs both 'a' and 'b' (p = sigmoid(a * logratio + b)).")
        return cls(**values)

    def save(self, path: str | Path) -> Path:
        """Write ``calibration.json``: ``path`` is a file name, or a folder (created if needed) to
        write ``calibration.json`` into (e.g. an adapter folder, beside its ``template.yaml``).

        Returns:
            The written file.
        """
        target = Path(path)
        if target.is_dir() or (not target.suffix and not target.exists()):
            target = target / FILE_NAME
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return target

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        """Read a calibration file, or the ``calibration.json`` of a folder.

        Raises:
            FileNotFoundError: no such file (or no ``calibration.json`` in the folder).
            ValueError: the file is not a calibration (says why).
        """
        target = Path(path)
        if target.is_dir():
            target = target / FILE_NAME
        if not target.is_file():
            raise FileNotFoundError(f"no calibration file at {str(target)!r}; write one with `pluie-reward calibrate` "
                                    "or fit_calibration(...).save(path).")
        try:
            data = json.loads(target.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{target}: not a JSON calibration file ({err}).") from None
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{target}: {err}") from None

    @classmethod
    def resolve(cls, value: "Calibration | str | Path | Mapping[str, Any] | None") -> "Calibration | None":
        """What ``Judge(calibration=...)`` accepts: a :class:`Calibration`, a file or folder path, a
        dict of its fields, or ``None``.

        Example:
            >>> Calibration.resolve({"a": 1.5, "b": 0.0}).a
            1.5
        """
        if value is None or isinstance(value, Calibration):
            return value
        if isinstance(value, (str, Path)):
            return cls.load(value)
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        raise TypeError(f"calibration must be a Calibration, a path to calibration.json (or its folder) or a dict, "
                        f"not {type(value).__name__}.")

    def __repr__(self) -> str:
        where = "".join(f", {k}={getattr(self, k)!r}" for k in ("template", "judge") if getattr(self, k))
        return f"Calibration(a={self.a:.4g}, b={self.b:.4g}{where}, n_fit={self.n_fit})"
