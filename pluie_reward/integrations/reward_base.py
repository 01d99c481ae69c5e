"""The reward contract of TRL's online trainers, implemented once: :class:`Reward` (and its async twin
:class:`AsyncReward`), the base of every reward of the package.

TRL (``GRPOTrainer``, ``RLOOTrainer``) calls a reward as ``reward(prompts=..., completions=...,
**columns)`` (plus ``log_metric`` and ``log_extra``) and takes one float per completion.
``Reward.__call__`` does what every reward does around its own score:

1. :meth:`Reward.gather`: the completions' texts and the template fields read from the columns
   (:attr:`Reward.field_map`), as one :class:`Batch`;
2. :meth:`Reward.score_batch`: the subclass's hook, the rewards and what to log, as :class:`Scores`;
3. :meth:`Reward.finish`: the metrics through ``log_metric``, the columns through ``log_extra``, the
   rewards returned.

Wrappers (a guard, an alarm) read :attr:`Reward.template`, :attr:`Reward.field_map` and
:attr:`Reward.lowest`. TRL logs a reward under its ``__name__``. Standard library only.

Example:
    >>> class Length(Reward):
    ...     '''The completion's word count.'''
    ...     __name__ = "length"
    ...     def score_batch(self, batch):
    ...         counts = [float(len(text.split())) for text in batch.texts]
    ...         return Scores(counts, metrics={"length/max": max(counts)})
    >>> logged = {}
    >>> Length()(completions=["A cat.", [{"role": "assistant", "content": "Dogs bark loudly."}]],
    ...          log_metric=logged.__setitem__)
    [2.0, 3.0]
    >>> logged
    {'length/max': 3.0}
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pluie_reward.integrations.fields import FieldMap, completion_texts

__all__ = ["Reward", "AsyncReward", "Batch", "Scores"]


@dataclass
class Batch:
    """One call of a reward, as its hooks read it.

    Attributes:
        prompts: TRL's prompts (None when not given).
        completions: TRL's completions as given (strings or chat messages).
        texts: the text of each completion.
        fields: template field -> one value per completion, read from the columns by the reward's
            :attr:`~Reward.field_map` (empty without one).
        columns: the other keyword arguments of the call (the dataset columns and TRL's own), as given.
        log_metric, log_extra: TRL's logging callbacks (None when not given); a wrapper hands them on.
    """

    prompts: Sequence[Any] | None
    completions: Sequence[Any]
    texts: list[str]
    fields: dict[str, list[Any]]
    columns: dict[str, Any]
    log_metric: Callable[[str, float], None] | None = None
    log_extra: Callable[[str, list], None] | None = None


@dataclass
class Scores:
    """What :meth:`Reward.score_batch` returns.

    Attributes:
        rewards: one reward per completion.
        metrics: metric name (``<name>/accept_rate``...) -> value, logged through ``log_metric``.
        columns: column name (``<name>/logratio``...) -> one value per completion, logged through
            ``log_extra`` (a column of TRL's completions table).
    """

    rewards: list[float]
    metrics: dict[str, float] = field(default_factory=dict)
    columns: dict[str, list[Any]] = field(default_factory=dict)


class Reward:
    """A TRL reward: ``reward(prompts=..., completions=..., **columns)`` returns one float per completion.

    A subclass sets ``self.__name__`` (the name TRL logs under) and implements :meth:`score_batch`;
    it sets :attr:`field_map` when it reads template fields from the columns.

    Attributes:
        field_map: template field -> column, read into :attr:`Batch.fields` (None: no fields).
        template: the template the judge reads the completion in, as its ``hypothesis`` (None: none);
            a guard reads its answer words and delimiters from it.
    """

    field_map: FieldMap | None = None
    template: Any = None

    @property
    def lowest(self) -> float | None:
        """The lowest value the reward gives (a guard's default for a flagged completion), or None
        when it has none (unbounded, or not known)."""
        return None

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None,
                 log_metric: Callable[[str, float], None] | None = None,
                 log_extra: Callable[[str, list], None] | None = None, **columns: Any) -> list[float]:
        """One reward per completion: :meth:`gather`, :meth:`score_batch`, :meth:`finish`."""
        batch = self.gather(prompts, completions, columns, log_metric=log_metric, log_extra=log_extra)
        return self.finish(batch, self.score_batch(batch))

    def gather(self, prompts: Sequence[Any] | None, completions: Sequence[Any] | None, columns: Mapping[str, Any], *,
               log_metric: Callable[[str, float], None] | None = None,
               log_extra: Callable[[str, list], None] | None = None) -> Batch:
        """The call's texts and fields.

        Args:
            prompts: TRL's prompts (None when not given).
            completions: TRL's completions.
            columns: the other keyword arguments of the call.
            log_metric, log_extra: TRL's logging callbacks.

        Returns:
            The :class:`Batch`.

        Raises:
            TypeError: no completions, or a completion or column of the wrong type.
            KeyError: a column :attr:`field_map` reads is missing (the message lists those present).
        """
        texts = completion_texts(completions, self.__name__)
        fields = {} if self.field_map is None else self.field_map.gather(columns, len(texts), prompts=prompts)
        return Batch(prompts, completions, texts, fields, dict(columns), log_metric, log_extra)

    def score_batch(self, batch: Batch) -> Scores:
        """The subclass's hook: the rewards of a batch and what to log.

        Args:
            batch: the call's texts, fields and columns (:meth:`gather`).

        Returns:
            One reward per completion, with the metrics and completions-table columns to log.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement score_batch(batch).")

    def finish(self, batch: Batch, scores: Scores) -> list[float]:
        """Log ``scores``' metrics and columns through the batch's callbacks (those given).

        Args:
            batch: the call (its ``log_metric`` and ``log_extra``).
            scores: what :meth:`score_batch` returned.

        Returns:
            The rewards.
        """
        if batch.log_metric is not None:
            for name, value in scores.metrics.items():
                batch.log_metric(name, value)
        if batch.log_extra is not None:
            for name, values in scores.columns.items():
                batch.log_extra(name, values)
        return scores.rewards


class AsyncReward(Reward):
    """A :class:`Reward` TRL awaits (TRL runs async rewards concurrently on its event loop): the same
    :meth:`~Reward.gather` and :meth:`~Reward.finish` around :meth:`ascore_batch`. Needs TRL >= 1.14,
    which awaits async callable classes (``trl.trainer.utils.is_async_callable``)."""

    async def __call__(self, prompts: Sequence[Any] | None = None,  # type: ignore[override]
                       completions: Sequence[Any] | None = None,
                       log_metric: Callable[[str, float], None] | None = None,
                       log_extra: Callable[[str, list], None] | None = None, **columns: Any) -> list[float]:
        """One reward per completion: :meth:`~Reward.gather`, :meth:`ascore_batch`, :meth:`~Reward.finish`."""
        batch = self.gather(prompts, completions, columns, log_metric=log_metric, log_extra=log_extra)
        return self.finish(batch, await self.ascore_batch(batch))

    async def ascore_batch(self, batch: Batch) -> Scores:
        """The async hook: by default :meth:`~Reward.score_batch` in a worker thread, off the event loop.

        Args:
            batch: the call's texts, fields and columns.

        Returns:
            As :meth:`~Reward.score_batch`.
        """
        return await asyncio.to_thread(self.score_batch, batch)
