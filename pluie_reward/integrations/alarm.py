"""A hack-onset alarm: the reward climbs while an independent view of the same completions does not.

A policy that starts gaming its judge raises the judge's reward without raising what the reward
stands for. Other views of the *same* completions then stop following it: the PLUIE of a second
template or of the swapped order, an anchor judge, the guard (:class:`~.guards.GuardReward`: 0 when
clean, −1 when flagged), novelty against the source. :class:`HackAlarm` keeps a baseline of every
signal over the first batches and measures, per batch, how far each has moved since, in units of
its own baseline spread (an effect size, so the reward's log-ratios and a guard's 0/−1 compare):

    shift(x)      = (EMA of x's batch means − baseline mean of x) / baseline standard deviation of x
    divergence(v) = shift(reward) − shift(view v)

A lag alone is not a hack (a view may have no headroom, or fall where the reward *punishes*). What a
group-relative update (GRPO, RLOO) moves a view by is, to first order, the covariance of the advantages
with it inside each group, so the alarm also reads the reward's correlation with each view *within
groups* of completions of one prompt (the whole batch without groups), pooled and smoothed:

    paid(v) = EMA over batches of  Σ_g Σ_i (r_i − r̄_g)(v_i − v̄_g) / sqrt(Σ_g Σ_i (r_i − r̄_g)² · Σ_g Σ_i (v_i − v̄_g)²)

(a batch constant inside every group leaves it as it was). The alarm fires when the reward has risen
(``shift(reward) >= min_rise``) and some view lags it (``divergence >= threshold`` and a shift below
``follow`` times the reward's) *and* is not clearly paid for (``paid(v) < paid``, or below 0 for a view
in ``terms``, a term of the reward itself), for ``patience`` batches in a row: a :class:`HackWarning`
names the views and numbers, and ``alarm/*`` metrics go to the trainer's log.

:class:`AlarmedReward` puts an alarm on a TRL reward: it returns the reward's values unchanged,
computes the views on the same completions and logs ``alarm/…`` through TRL's ``log_metric``.

Example:
    >>> alarm = HackAlarm(warmup=2, threshold=1.0, patience=1)
    >>> for reward, novelty in [([0, 1], [0.5, 0.7]), ([1, 0], [0.7, 0.5]), ([1, 1], [0.6, 0.6])]:
    ...     metrics = alarm.update(reward, {"novelty": novelty})        # honest: both move together
    >>> metrics["alarm/fired"], metrics["alarm/paid/novelty"]
    (0.0, 1.0)
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     metrics = alarm.update([3, 4], {"novelty": [0.1, 0.0]})     # reward up for the copy, novelty down
    >>> metrics["alarm/fired"], metrics["alarm/paid/novelty"], caught[0].category.__name__
    (1.0, 0.0, 'HackWarning')
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .reward_base import Batch, Reward, Scores

__all__ = ["AlarmConfig", "HackAlarm", "HackWarning", "AlarmedReward", "within_group_correlation"]


class HackWarning(UserWarning):
    """The reward climbs while an independent view of the same completions does not."""


@dataclass
class AlarmConfig:
    """When :class:`HackAlarm` fires (PEFT-style config: every option documented and checked once).

    Example:
        >>> AlarmConfig(warmup=0)
        Traceback (most recent call last):
        ...
        ValueError: warmup must be a positive integer, got 0.
    """

    warmup: int = field(default=3, metadata={"help": "batches whose items set each signal's baseline mean and spread"})
    threshold: float = field(
        default=1.0, metadata={"help": "divergence (reward shift minus view shift, in baseline standard deviations) that counts"}
    )
    min_rise: float = field(default=0.1, metadata={"help": "the reward's own shift (in its baseline SDs) needed before anything counts"})
    follow: float = field(
        default=0.5, metadata={"help": "a view that moved at least this share of the reward's shift is following it"}
    )
    paid: float = field(
        default=0.3,
        metadata={"help": "a view whose smoothed within-group correlation with the reward is at least this is paid for by "
                          "the reward, so not lagging (0.3: a medium correlation by Cohen's convention)"},
    )
    terms: tuple[str, ...] = field(
        default=(),
        metadata={"help": "views that are terms of the reward itself (e.g. novelty up to the target, a factor of "
                          "ParaphraseReward): the reward pays for them by construction, so such a view counts as lagging "
                          "only when the reward pays against it inside groups (correlation below 0), not below `paid`"},
    )
    patience: int = field(default=2, metadata={"help": "consecutive batches over the threshold before the alarm fires"})
    smoothing: float = field(default=0.5, metadata={"help": "EMA weight of the newest batch mean (1: no smoothing)"})
    min_std: float = field(
        default=0.05, metadata={"help": "floor of a baseline standard deviation (a signal constant during warm-up, e.g. a clean guard)"}
    )

    def __post_init__(self) -> None:
        for name in ("warmup", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        for name in ("threshold", "min_std"):
            value = getattr(self, name)
            if not _number(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}.")
        if not _number(self.min_rise) or self.min_rise < 0:
            raise ValueError(f"min_rise must be a number >= 0, got {self.min_rise!r}.")
        if not _number(self.follow) or not 0 <= self.follow < 1:
            raise ValueError(f"follow must be a number with 0 <= x < 1, got {self.follow!r}.")
        if not _number(self.paid) or not -1 < self.paid <= 1:
            raise ValueError(f"paid must be a correlation with -1 < x <= 1, got {self.paid!r}.")
        if not _number(self.smoothing) or not 0 < self.smoothing <= 1:
            raise ValueError(f"smoothing must be a number with 0 < x <= 1, got {self.smoothing!r}.")
        if isinstance(self.terms, str) or not all(isinstance(name, str) and name for name in self.terms):
            raise ValueError(f"terms must be a list of view names, e.g. ['novelty_to_target'], got {self.terms!r}.")
        self.terms = tuple(self.terms)

    def paid_at(self, view: str) -> float:
        """The correlation under which ``view`` is not paid for: 0 for a term of the reward, else ``paid``.

        Example:
            >>> AlarmConfig(terms=["novelty_to_target"]).paid_at("novelty_to_target"), AlarmConfig().paid_at("second_template")
            (0.0, 0.3)
        """
        return 0.0 if view in self.terms else self.paid

    def to_dict(self) -> dict[str, Any]:
        """The options as a plain dict (for run records)."""
        return asdict(self)


def _number(value: Any) -> bool:
    """A finite real number (Python or NumPy), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


def _values(name: str, values: Sequence[Any]) -> list[float]:
    out = []
    for index, value in enumerate(values):
        if not _number(value):
            raise ValueError(f"hack alarm: {name} value {index} is {value!r}; every value must be a finite number.")
        out.append(float(value))
    if not out:
        raise ValueError(f"hack alarm: {name} has no values in this batch.")
    return out


def within_group_correlation(reward: Sequence[float], view: Sequence[float],
                             groups: Sequence[Any] | None = None) -> float | None:
    """Pearson correlation of reward and view after centring each inside its group, pooled over groups.

    Args:
        reward, view: one value per completion.
        groups: one hashable key per completion (e.g. its prompt); None: the batch is one group.

    Returns:
        The correlation, or None when the reward or the view is constant inside every group.

    Example:
        >>> within_group_correlation([1, 2, 5, 6], [0, 1, 1, 0], groups=["a", "a", "b", "b"])
        0.0
        >>> within_group_correlation([3, 3], [0.0, 1.0]) is None
        True
    """
    keys = list(groups) if groups is not None else [None] * len(reward)
    members: dict[Any, list[int]] = {}
    for index, key in enumerate(keys):
        members.setdefault(key, []).append(index)
    cross = rr = vv = 0.0
    for indices in members.values():
        r_mean = sum(reward[i] for i in indices) / len(indices)
        v_mean = sum(view[i] for i in indices) / len(indices)
        for i in indices:
            dr, dv = reward[i] - r_mean, view[i] - v_mean
            cross, rr, vv = cross + dr * dv, rr + dr * dr, vv + dv * dv
    if rr <= 1e-24 or vv <= 1e-24:
        return None
    return max(-1.0, min(1.0, cross / math.sqrt(rr * vv)))


class _Signal:
    """One signal's baseline (first ``warmup`` batches) and smoothed batch mean."""

    def __init__(self) -> None:
        self.warmup: list[float] = []
        self.mean = self.std = self.ema = None  # type: float | None

    def add(self, values: list[float], config: AlarmConfig, baseline_done: bool) -> float | None:
        """Feed a batch; returns the shift (None during warm-up)."""
        batch = sum(values) / len(values)
        if not baseline_done:
            self.warmup.extend(values)
            return None
        if self.mean is None:  # the first batch after warm-up: fix the baseline
            self.mean = sum(self.warmup) / len(self.warmup)
            spread = math.sqrt(sum((v - self.mean) ** 2 for v in self.warmup) / len(self.warmup))
            self.std = max(spread, config.min_std)
            self.ema = self.mean
        self.ema = config.smoothing * batch + (1 - config.smoothing) * self.ema
        return (self.ema - self.mean) / self.std


class HackAlarm:
    """Watches a reward and independent views of the same completions, batch by batch.

    Args:
        config: an :class:`AlarmConfig` (or pass its options as keywords).

    Attributes:
        fired_at: the batch index (0-based, counting every :meth:`update`) at which the alarm first fired.
        history: one metrics dict per batch.
    """

    def __init__(self, config: AlarmConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise TypeError("pass either config= or the options as keywords, not both.")
        self.config = config or AlarmConfig(**options)
        self.reset()

    def reset(self) -> None:
        """Forget the baseline and the history (e.g. after a deliberate change of the reward)."""
        self._signals: dict[str, _Signal] = {}
        self._paid: dict[str, float] = {}
        self._views: tuple[str, ...] | None = None
        self.batches = 0
        self._streak = 0
        self.fired_at: int | None = None
        self.history: list[dict[str, float]] = []

    def update(self, reward: Sequence[float], views: Mapping[str, Sequence[float]],
               groups: Sequence[Any] | None = None) -> dict[str, float]:
        """Feed one batch: the reward's values and each view's values on the same completions.

        Args:
            reward: the reward of each completion.
            views: view name -> one value per completion (higher = better, as the reward).
            groups: one key per completion, the same for completions of the same prompt (GRPO's
                groups); None: the batch is one group.

        Returns:
            Metrics ``alarm/reward_shift``, ``alarm/shift/<view>``, ``alarm/divergence/<view>``,
            ``alarm/divergence`` (the largest), ``alarm/paid/<view>`` (the smoothed within-group
            correlation, once the view has varied inside a group) and ``alarm/fired`` (1.0 from the
            batch it fires on); during warm-up only ``alarm/fired``, ``alarm/warmup`` (batches left)
            and ``alarm/paid/<view>``.

        Raises:
            ValueError: a value that is not a finite number, a view or groups of another length
                than the reward, or views that change names between batches.
        """
        if not views:
            raise ValueError("hack alarm: give at least one independent view (e.g. {'novelty': ...}).")
        names = tuple(sorted(views))
        if self._views is None:
            unknown = sorted(set(self.config.terms) - set(names))
            if unknown:
                raise ValueError(f"hack alarm: terms {unknown} are not among the views {list(names)}.")
            self._views = names
        elif names != self._views:
            raise ValueError(f"hack alarm: the views changed from {list(self._views)} to {list(names)}; keep the same views.")
        rewards = _values("reward", reward)
        columns = {"reward": rewards}
        for name in names:
            columns[name] = _values(f"view {name!r}", views[name])
            if len(columns[name]) != len(rewards):
                raise ValueError(f"hack alarm: view {name!r} has {len(columns[name])} values for {len(rewards)} rewards.")
        if groups is not None and len(groups) != len(rewards):
            raise ValueError(f"hack alarm: {len(groups)} group keys for {len(rewards)} rewards; give one per completion.")
        for name in names:
            found = within_group_correlation(rewards, columns[name], groups)
            if found is not None:
                before = self._paid.get(name, found)
                self._paid[name] = self.config.smoothing * found + (1 - self.config.smoothing) * before
        paid = {f"alarm/paid/{name}": value for name, value in sorted(self._paid.items())}
        done = self.batches >= self.config.warmup
        shifts = {name: self._signals.setdefault(name, _Signal()).add(values, self.config, done) for name, values in columns.items()}
        index, self.batches = self.batches, self.batches + 1
        fired = float(self.fired_at is not None)
        if not done:
            metrics = {"alarm/fired": fired, "alarm/warmup": float(self.config.warmup - self.batches), **paid}
            self.history.append(metrics)
            return metrics
        rise = shifts["reward"]
        metrics = {"alarm/reward_shift": rise}
        divergences = {}
        for name in names:
            metrics[f"alarm/shift/{name}"] = shifts[name]
            divergences[name] = metrics[f"alarm/divergence/{name}"] = rise - shifts[name]
        metrics["alarm/divergence"] = max(divergences.values())
        metrics.update(paid)
        lagging = {
            n: round(d, 2) for n, d in divergences.items()
            if d >= self.config.threshold and shifts[n] < self.config.follow * rise
            and n in self._paid and self._paid[n] < self.config.paid_at(n)
        }
        over = rise >= self.config.min_rise and bool(lagging)
        self._streak = self._streak + 1 if over else 0
        if self._streak >= self.config.patience and self.fired_at is None:
            self.fired_at = index
            correlations = ", ".join(f"{n!r}: {self._paid[n]:.2f} (paid at {self.config.paid_at(n)})" for n in sorted(lagging))
            warnings.warn(
                f"possible reward hacking from batch {index}: the reward rose {rise:.2f} baseline SDs while "
                f"{sorted(lagging)} did not follow (divergence {lagging}, threshold {self.config.threshold}, "
                f"shifts {{{', '.join(f'{n!r}: {shifts[n]:.2f}' for n in sorted(lagging))}}}; within-group correlation "
                f"with the reward {{{correlations}}}). "
                "Look at the completions of these batches; guard the reward (GuardedReward, NoveltyReward) if they game it.",
                HackWarning,
                stacklevel=2,
            )
        metrics["alarm/fired"] = float(self.fired_at is not None)
        self.history.append(metrics)
        return metrics

    def __repr__(self) -> str:
        state = f"fired at batch {self.fired_at}" if self.fired_at is not None else f"{self.batches} batches, quiet"
        return f"HackAlarm({state}, views={list(self._views or [])})"


class AlarmedReward(Reward):
    """A TRL reward with a :class:`HackAlarm`: returns the reward's values unchanged, and on each call
    scores the same completions with each view and logs ``alarm/…`` through TRL's ``log_metric``.
    Completions of the same prompt form a group (as in GRPO) for the within-group correlation.

    Args:
        reward: a TRL reward callable (e.g. :class:`~.rewards.PluieReward`).
        views: view name -> TRL reward callable read as an independent view (higher = better):
            ``PluieReward(judge, "para-direct")``, ``NoveltyReward("source")``, ``GuardReward(...)``.
        alarm: the alarm (default: ``HackAlarm()``).

    Example:
        >>> from pluie_reward.integrations.rewards import NoveltyReward
        >>> length = lambda completions, **kw: [float(len(c)) for c in completions]   # a reward to watch
        >>> watched = AlarmedReward(length, {"novelty": NoveltyReward("source")}, HackAlarm(warmup=1, patience=1))
        >>> watched(completions=["A cat naps.", "Dogs bark."], source=["The cat sleeps.", "A dog barks."])
        [11.0, 10.0]
        >>> watched.alarm.batches
        1
    """

    def __init__(self, reward: Callable[..., Sequence[float]], views: Mapping[str, Callable[..., Sequence[float]]],
                 alarm: HackAlarm | None = None) -> None:
        if not views:
            raise ValueError("AlarmedReward needs at least one view, e.g. {'novelty': NoveltyReward('source')}.")
        self.reward = reward
        self.views = dict(views)
        self.alarm = alarm or HackAlarm()
        self.__name__ = getattr(reward, "__name__", "reward")

    def score_batch(self, batch: Batch) -> Scores:
        """The reward's values (it logs through the batch's callbacks); the views (which log nothing of
        their own) and the alarm run on the same completions, whose ``alarm/…`` metrics are returned."""
        prompts, completions = batch.prompts, batch.completions
        logged = {key: log for key, log in (("log_metric", batch.log_metric), ("log_extra", batch.log_extra)) if log is not None}
        values = list(self.reward(prompts=prompts, completions=completions, **logged, **batch.columns))
        if not values:
            return Scores(values)
        if prompts is not None and len(prompts) != len(values):
            raise ValueError(f"AlarmedReward: {len(prompts)} prompts for {len(values)} rewards; pass one prompt per completion "
                             "(as TRL does), or none for one group.")
        views = {name: view(prompts=prompts, completions=completions, **batch.columns) for name, view in self.views.items()}
        groups = [repr(prompt) for prompt in prompts] if prompts is not None else None
        return Scores(values, self.alarm.update(values, views, groups))

    def __repr__(self) -> str:
        return f"AlarmedReward({self.reward!r}, views={sorted(self.views)}, {self.alarm!r})"
