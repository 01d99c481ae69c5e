"""A scoring call as a first-class plan: bound, normalised and checked once, run by any driver.

:meth:`Judge.plan <pluie_reward.Judge.plan>` binds the template to the judge's tokenizer and
normalises the fields: bad input fails there, before anything is queued. :meth:`Judge.run
<pluie_reward.Judge.run>` and :meth:`Judge.arun <pluie_reward.Judge.arun>` drive the *same* steps: each
resolves the cache hits, asks the engine for what is left (an :class:`EngineCall`: answer
log-probabilities, or the judge's own turn) and finishes into results. The server coalesces several requests' plans with
:meth:`ScoringPlan.concat` and hands each caller its slice with :meth:`ScoringPlan.split`.

Example:
    >>> from pluie_reward.core.template import load_template
    >>> options = ScoreOptions(details=True, threshold=1.0)
    >>> options.max_new_tokens is None, options.truncate
    (True, True)
    >>> ScoreOptions(max_new_tokens=0)
    Traceback (most recent call last):
    ...
    ValueError: max_new_tokens must be a positive integer, got 0.
"""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..engines.base import Engine
from .template import normalize_fields


def finite(number: int | float) -> bool:
    """Whether a number is finite as a float (an int too large for a float is not).

    Example:
        >>> finite(1), finite(float("nan")), finite(10**400)
        (True, False, False)
    """
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def check_threshold(threshold: Any) -> None:
    """Refuse a threshold that is not ``None`` or a finite number (a verdict against NaN is always False).

    Args:
        threshold: a scoring call's ``threshold``.

    Raises:
        TypeError: not a number (a string, a bool...). ValueError: NaN, infinite, or too large for a float.

    Example:
        >>> check_threshold(1), check_threshold(None)
        (None, None)
        >>> check_threshold(float("nan"))
        Traceback (most recent call last):
        ...
        ValueError: threshold must be a finite number (the verdict is score > threshold), got nan.
    """
    if threshold is None:
        return
    message = f"threshold must be a finite number (the verdict is score > threshold), got {str(threshold)[:40]!s}."
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):  # numpy's floats are Real too
        raise TypeError(message[:-1] + f" ({type(threshold).__name__}).")
    if not finite(threshold):
        raise ValueError(message)


@dataclass(frozen=True)
class ScoreOptions:
    """How one scoring call reads and reports (the keyword options of :meth:`Judge.score`).

    Checked once, when the plan is made.
    """

    details: bool = field(default=False, metadata={"help": "one record per item instead of a float"})
    threshold: float | None = field(default=None, metadata={"help": "verdict = score > threshold (None: the judge's)"})
    truncate: bool = field(default=True, metadata={"help": "cut over-long fields from the middle instead of raising"})
    use_cache: bool = field(default=True, metadata={"help": "reuse results of identical prompts (same weights)"})
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "length limit of a judge-generated turn (None: the template's)"}
    )

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        limit = self.max_new_tokens
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise ValueError(f"max_new_tokens must be a positive integer, got {limit!r}.")


@dataclass(frozen=True)
class EngineCall:
    """One request of a plan to its engine: its method ``method`` (``"answer_logprobs"``, or ``"generate"`` for
    the judge's own turn) with these arguments. :meth:`Judge.run <pluie_reward.Judge.run>` calls ``call.run(engine)``,
    :meth:`Judge.arun <pluie_reward.Judge.arun>` awaits ``call.arun(engine)``, the method's async twin."""

    method: str
    args: tuple
    options: Mapping[str, Any] = field(default_factory=dict)

    def run(self, engine: Engine) -> list:
        return getattr(engine, self.method)(*self.args, **self.options)

    async def arun(self, engine: Engine) -> list:
        return await getattr(engine, "a" + self.method)(*self.args, **self.options)


@dataclass
class CacheStep:
    """One step of a scoring call: each item's cache key, the cached values resolved when the step
    is planned (an eviction by a concurrent call while the engine runs cannot lose them), and the
    distinct keys the engine must still compute, in order.

    Example:
        >>> step = CacheStep(keys=[("a",), ("b",), ("a",)], hits={("b",): 2.0}, todo=[("a",)])
        >>> step.resolve({("a",): 1.0})
        [1.0, 2.0, 1.0]
    """

    keys: list[tuple]
    hits: dict[tuple, Any]
    todo: list[tuple]

    def resolve(self, computed: Mapping[tuple, Any]) -> list[Any]:
        """Each item's value: computed now, or resolved at planning time."""
        return [computed[k] if k in computed else self.hits[k] for k in self.keys]


@dataclass
class ScoringPlan:
    """One scoring call, bound and checked: what :meth:`Judge.run <pluie_reward.Judge.run>` executes.

    Make one with :meth:`Judge.plan <pluie_reward.Judge.plan>` (or :meth:`build`).

    Attributes:
        bound: the template bound to the judge's tokenizer.
        columns: the normalised fields, one list of ``n`` values per field.
        n: the number of items.
        options: the call's :class:`ScoreOptions`.
        sizes: the item counts of the plans :meth:`concat` joined (``(n,)`` for a single plan).
    """

    bound: Any
    columns: dict[str, list]
    n: int
    options: ScoreOptions = field(default_factory=ScoreOptions)
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.sizes:
            self.sizes = (self.n,)

    @classmethod
    def build(cls, bound: Any, fields: Mapping[str, Any], options: ScoreOptions | None = None, *,
              clean: bool = True) -> "ScoringPlan":
        """Normalise ``fields`` against the bound template (raises ``TypeError``/``ValueError``/``KeyError``
        with what to do on bad input).

        Args:
            bound: a :class:`~pluie_reward.core.prompt.BoundTemplate`.
            fields: the template's fields, each a list (one value per item) or one shared string.
            options: the call's options (default: :class:`ScoreOptions`).
            clean: read each value as :func:`~pluie_reward.core.template.clean_text` gives it (the
                judge's ``clean_text`` option); False: exactly as given.

        Returns:
            The plan.
        """
        columns, n = normalize_fields(bound.template, fields, clean=clean)
        return cls(bound, columns, n, options or ScoreOptions())

    @property
    def template(self) -> Any:
        """The (unbound) template."""
        return self.bound.template

    @property
    def max_new_tokens(self) -> int:
        """The judge-generated turn's length limit (the option, else the template's)."""
        limit = self.options.max_new_tokens
        return self.bound.template.max_new_tokens if limit is None else limit

    def rows(self) -> list[dict[str, Any]]:
        """The items as ``{field: value}`` dicts."""
        return [{name: column[i] for name, column in self.columns.items()} for i in range(self.n)]

    @classmethod
    def concat(cls, plans: Sequence["ScoringPlan"]) -> "ScoringPlan":
        """One plan scoring several plans' items in one engine pass (same template and options);
        :meth:`split` hands each its results. A field missing from one plan (optional) is ``None`` there.

        Example:
            >>> from pluie_reward.core.template import load_template
            >>> class Bound: template = load_template("para-fs")
            >>> a = ScoringPlan.build(Bound, {"source": ["s1", "s2"], "hypothesis": ["h1", "h2"]})
            >>> b = ScoringPlan.build(Bound, {"source": "s3", "hypothesis": ["h3"]})
            >>> both = ScoringPlan.concat([a, b])
            >>> both.n, both.columns["source"], both.split(["r1", "r2", "r3"])
            (3, ['s1', 's2', 's3'], [['r1', 'r2'], ['r3']])
        """
        if not plans:
            raise ValueError("concat needs at least one plan.")
        first = plans[0]
        for plan in plans[1:]:
            if plan.bound is not first.bound or plan.options != first.options:
                raise ValueError("only plans of one bound template with the same options can be joined.")
        names = [f for f in first.template.all_fields if any(f in plan.columns for plan in plans)]
        columns = {f: [v for plan in plans for v in plan.columns.get(f, [None] * plan.n)] for f in names}
        return cls(first.bound, columns, sum(p.n for p in plans), first.options, tuple(p.n for p in plans))

    def part(self, start: int, stop: int) -> "ScoringPlan":
        """The plan of items ``start:stop`` only (same bound template and options): a large call cut
        into pieces that are scored one at a time (the server interleaves them with other requests).

        Example:
            >>> from pluie_reward.core.template import load_template
            >>> class Bound: template = load_template("para-fs")
            >>> plan = ScoringPlan.build(Bound, {"source": "s", "hypothesis": ["h1", "h2", "h3"]})
            >>> piece = plan.part(1, 3)
            >>> piece.n, piece.columns["hypothesis"], piece.options == plan.options
            (2, ['h2', 'h3'], True)
        """
        columns = {name: column[start:stop] for name, column in self.columns.items()}
        return type(self)(self.bound, columns, len(range(start, min(stop, self.n))), self.options)

    def split(self, results: Sequence[Any]) -> list[list[Any]]:
        """The results of a joined plan, cut back into one list per plan given to :meth:`concat`."""
        if len(results) != self.n:
            raise ValueError(f"expected {self.n} results, got {len(results)}.")
        ends = list(itertools.accumulate(self.sizes))
        return [list(results[end - size : end]) for size, end in zip(self.sizes, ends)]
