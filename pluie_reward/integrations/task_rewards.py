"""Generation rewards a copy cannot win: :class:`ParaphraseReward`, :class:`TranslationReward` and
:class:`RevisionReward`, one per task, for TRL's online trainers (``GRPOTrainer``, ``RLOOTrainer``).

Each is the judge's probability of "Yes" gated by how far the completion is from its source::

    reward = p_yes × min(1, novelty / target) × (1 − excess repetition) × min(1, length ratio / min_length)

``p_yes = sigmoid(PLUIE)``; ``novelty`` (0 for any copy) and the task's ``target`` and ``min_length`` are
:mod:`~pluie_reward.integrations.novelty`'s (:meth:`~pluie_reward.integrations.novelty.Task.batch`, shared
with the judge server and its clients; docs/rewards.md). A copy scores exactly 0, whatever the judge gives it.
The judge reads each completion's reading (:meth:`~pluie_reward.integrations.novelty.Task.read`: no label,
preamble, wrapping quotes, emphasis or repeated sentence; final punctuation as the task says), and novelty and
length count it, so no such edit raises a reward; a judge with ``clean_text=False`` reads completions as given.

Example:
    >>> reward = ParaphraseReward(judge)                # the dataset's "source" column is the source
    >>> reward(prompts=["Paraphrase: The cat sleeps."] * 3, completions=["The cat sleeps.", "A cat is asleep.", ""],
    ...        source=["The cat sleeps."] * 3)          # a copy and an empty completion score 0
    [0.0, ..., 0.0]
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from ..core.calibration import sigmoid
from ..core.judge import Judge
from ..core.template import load_template
from .novelty import Task, check_min_length, check_sources, check_target, resolve_task
from .reward_base import Batch, Scores
from .rewards import PluieReward

__all__ = ["CopyProofReward", "ParaphraseReward", "TranslationReward", "RevisionReward"]


class CopyProofReward(PluieReward):
    """The copy-proof reward of a task (see the module docstring): one float in [0, 1) per completion. The
    task's class (:class:`ParaphraseReward`...) is this one with the task given.

    Args:
        judge: a :class:`~pluie_reward.Judge`, or a zero-argument factory returning one (built on first
            call, dropped when pickled).
        task: ``"paraphrase"``, ``"translation"``, ``"revision"`` (:data:`~pluie_reward.integrations.novelty.TASKS`) or a
            :class:`~pluie_reward.integrations.novelty.Task`.
        template: the judge's Yes/No template (default: the task's; it must have the task's source field).
        fields: template field -> dataset column, as :class:`~pluie_reward.PluieReward` (unmapped fields
            read the column of the same name; the completion is the ``hypothesis``).
        target: the novelty that earns full credit (default: the task's).
        min_length: the length floor, a share of the source's words in (0, 1] (``"task"``, the default:
            the task's, 0.67 for paraphrase, none for translation and revision; None: no floor; see
            :class:`~pluie_reward.integrations.novelty.Task`).
        threshold: acceptance cut on PLUIE for the logged accept rate (default: the judge's).
        name: the name TRL logs under (default: the task's name).

    Raises:
        ValueError: an unknown task, a bad target, a template with N answers or without the source field.

    It logs :meth:`~pluie_reward.integrations.novelty.Task.batch`'s metrics as ``<name>/<metric>`` and the
    ``<name>/logratio`` and ``<name>/novelty`` columns.

    Example:
        >>> reward = CopyProofReward(judge, "revision", fields={"original": "paragraph"})
        >>> reward(completions=["We propose a method.", "We propose a metod."], paragraph=["We propose a metod."] * 2,
        ...        instruction=["Fix the spelling."] * 2)   # the unrevised paragraph scores 0
        [..., 0.0]
    """

    def __init__(self, judge: "Judge | Callable[[], Judge]", task: "str | Task" = "paraphrase", template: Any = None,
                 fields: Mapping[str, str] | None = None, *, target: float | None = None,
                 min_length: "float | None | str" = "task", threshold: float | None = None, name: str | None = None) -> None:
        task = resolve_task(task)
        # the task as this reward scores it: its target and floor, overridden where asked
        self.task = task = replace(task, target=check_target(task.target if target is None else target),
                                   min_length=check_min_length(task.min_length if min_length == "task" else min_length))
        name = task.name if name is None else name
        template = load_template(task.template if template is None else template)
        task.check_template(template, who=f"{name}: ")
        super().__init__(judge, template, fields, threshold=threshold, name=name, output="prob")

    def score_batch(self, batch: Batch) -> Scores:
        """One reward in [0, 1) per completion (see the class docstring), the task's metrics
        (:meth:`~pluie_reward.integrations.novelty.Task.batch`) and the ``logratio`` and ``novelty`` columns."""
        name = self.__name__
        sources = batch.fields[self.task.source_field]
        check_sources(sources, f"{name}: ", f"(field {self.task.source_field!r})")
        read = self.judge.clean_text  # the judge reads each completion's reading (Task.read), as novelty counts it
        logratios, cut = self.logratios(replace(batch, texts=self.task.readings(sources, batch.texts, read)))
        scores = self.task.batch([sigmoid(x) for x in logratios], [x > cut for x in logratios], sources, batch.texts, read)
        return Scores(scores.rewards, {f"{name}/{metric}": value for metric, value in scores.metrics.items()},
                      {f"{name}/logratio": [round(x, 4) for x in logratios], f"{name}/novelty": [round(v, 4) for v in scores.novelty]})

    @property
    def target(self) -> float:
        """The novelty that earns full credit (the task's unless overridden)."""
        return self.task.target

    @property
    def min_length(self) -> float | None:
        """The length floor (the task's unless overridden; None: no floor)."""
        return self.task.min_length

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.__name__!r}, template={self.template.name!r}, fields={self.fields}, "
                f"target={self.target}, min_length={self.min_length})")


class ParaphraseReward(CopyProofReward):
    """The copy-proof paraphrase reward (template ``para-fs``, source field ``source``, target 0.3, length
    floor 0.67): ``p_yes × min(1, novelty / 0.3) × (1 − excess repetition) × min(1, length ratio / 0.67)``;
    see :class:`CopyProofReward`.

    Example:
        >>> reward = ParaphraseReward(judge, fields={"source": "sentence"})
        >>> reward.__name__, reward.target, reward.min_length
        ('paraphrase', 0.3, 0.67)
    """

    def __init__(self, judge: "Judge | Callable[[], Judge]", template: Any = None, fields: Mapping[str, str] | None = None,
                 *, target: float | None = None, min_length: "float | None | str" = "task", threshold: float | None = None,
                 name: str | None = None) -> None:
        super().__init__(judge, "paraphrase", template, fields, target=target, min_length=min_length, threshold=threshold,
                         name=name)


class TranslationReward(CopyProofReward):
    """The copy-proof translation reward (template ``net``, source field ``source``, target 0.3): an
    untranslated source, or one followed by anything, scores 0; see :class:`CopyProofReward`.

    Example:
        >>> TranslationReward(judge)(completions=["Guests cannot use SSH.", "for endpoint('guests') block service('ssh')"],
        ...                          source=["for endpoint('guests') block service('ssh')"] * 2)
        [..., 0.0]
    """

    def __init__(self, judge: "Judge | Callable[[], Judge]", template: Any = None, fields: Mapping[str, str] | None = None,
                 *, target: float | None = None, threshold: float | None = None, name: str | None = None) -> None:
        super().__init__(judge, "translation", template, fields, target=target, threshold=threshold, name=name)


class RevisionReward(CopyProofReward):
    """The copy-proof revision reward (template ``rev``, source field ``original``, target 0.05): an
    unrevised original scores 0; text added around an unchanged original is judged, not zeroed (adding
    a sentence can be the instruction); see :class:`CopyProofReward`.

    Example:
        >>> RevisionReward(judge).__name__
        'revision'
    """

    def __init__(self, judge: "Judge | Callable[[], Judge]", template: Any = None, fields: Mapping[str, str] | None = None,
                 *, target: float | None = None, threshold: float | None = None, name: str | None = None) -> None:
        super().__init__(judge, "revision", template, fields, target=target, threshold=threshold, name=name)
