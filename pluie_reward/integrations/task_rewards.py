"""Generation rewards a copy cannot win: :class:`ParaphraseReward`, :class:`TranslationReward` and
:class:`RevisionReward`, one per task, for TRL's online trainers (``GRPOTrainer``, ``RLOOTrainer``).

Each is the judge's probability of "Yes" gated by how far the completion is from its source::

    reward = p_yes × min(1, novelty / target) × (1 − excess repetition) × min(1, length ratio / min_length)

* ``p_yes = sigmoid(PLUIE)``, in (0, 1): the judge's "is this a paraphrase / a translation / a
  revision that follows the instruction?";
* ``novelty`` is :func:`~pluie_reward.integrations.rewards.novelty_score` against the source (1 −
  normalised word edit similarity; 0 for the source itself and every disguised copy it normalises:
  case, spacing, punctuation, invisible characters, accents, homoglyphs; 0 for a completion without a
  word), and also 0, for paraphrase and translation, when the completion holds the whole source with
  more around it (the source repeated, or followed by anything: :func:`~pluie_reward.core.text.contains_words`);
* ``target`` is the novelty that earns full credit (:data:`TASKS`: 0.3 for paraphrase and translation,
  0.05 for revision; see docs/rewards.md for how they were chosen);
* the excess repetition is the share of the completion's word trigrams repeating an earlier one, less
  the source's own (:func:`~pluie_reward.core.text.repetition`): a completion that says the same thing
  twice gets about half;
* the length ratio is the completion's word count over the source's (paraphrase only, ``min_length``
  0.67; translation and revision: no floor): a paraphrase says everything its source says, so a
  completion with half the source's words (a fragment, a dropped clause: what the 135M default judge
  accepts, and what a 64-step GRPO run learned to write) gets 0.75 of its reward, one at two thirds or more gets it all.

So a copy scores exactly 0, and any completion the judge accepts (p_yes > 0.5) with novelty at or
above the target, no repetition and (paraphrase) at least ``min_length`` of the source's words scores above 0.5: copying cannot win, whatever the judge gives the
copy. The reward is bounded ([0, 1)), so it composes with other rewards through
``GRPOConfig(reward_weights=...)``, and pickles like :class:`~pluie_reward.PluieReward` (a judge
factory is dropped and rebuilt).

Example:
    >>> reward = ParaphraseReward(judge)                # the dataset's "source" column is the source
    >>> reward(prompts=["Paraphrase: The cat sleeps."] * 3, completions=["The cat sleeps.", "A cat is asleep.", ""],
    ...        source=["The cat sleeps."] * 3)          # a copy and an empty completion score 0
    [0.0, ..., 0.0]
    >>> copy_proof_score(0.99, "The cat sleeps.", "THE CAT SLEEPS!"), copy_proof_score(0.6, "The cat sleeps.", "A cat is asleep.")
    (0.0, 0.6)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from ..core.fields import completion_texts
from ..core.judge import Judge, sigmoid
from ..core.template import load_template
from ..core.text import contains_words, content_words, repetition, same_words
from .rewards import PluieReward, check_target, novelty_score

__all__ = ["Task", "TASKS", "TEMPLATE_TASKS", "task_of", "CopyProofReward", "ParaphraseReward", "TranslationReward", "RevisionReward",
           "copy_proof_novelty", "copy_proof_score", "is_copy", "length_factor"]


@dataclass(frozen=True)
class Task:
    """What a copy-proof reward needs to know about a generation task.

    Attributes:
        name: the task, and the reward's default name (TRL logs ``rewards/<name>/mean``).
        template: the default judge template (a Yes/No template with a ``hypothesis`` field).
        source_field: the template field holding the text the completion must not copy.
        target: the novelty that earns full credit, in (0, 1].
        source_inside_is_copy: a completion holding the whole source with more around it counts as a
            copy (paraphrase, translation: the source repeated, or an untranslated source followed by
            anything); not for revision, where adding a sentence to an unchanged text can be the task.
        min_length: the share of the source's word count at or above which a completion's length costs
            nothing (below: the reward times ratio / min_length); None: no floor (translation, where
            languages differ in length, and revision, where simplifying shortens).
    """

    name: str
    template: str
    source_field: str
    target: float
    source_inside_is_copy: bool = True
    min_length: float | None = None

    def novelty(self, source: str, hypothesis: str) -> float:
        """:func:`copy_proof_novelty` with this task's copy rule."""
        return copy_proof_novelty(source, hypothesis, source_inside_is_copy=self.source_inside_is_copy)

    def is_copy(self, source: str, hypothesis: str) -> bool:
        """:func:`is_copy` with this task's copy rule."""
        return is_copy(source, hypothesis, source_inside_is_copy=self.source_inside_is_copy)

    def score(self, p_yes: float, source: str, hypothesis: str) -> float:
        """:func:`copy_proof_score` with this task's target, copy rule and length floor: the one place
        a task's fields become the score (rewards, judge-filtered data and the probe use it).

        Example:
            >>> TASKS["paraphrase"].score(0.9, "The cat sleeps on the mat.", "On the mat, the cat sleeps.")
            0.9
            >>> TASKS["paraphrase"].score(0.9, "The cat sleeps on the mat.", "The cat sleeps.")  # 3 of 6 words: 0.9 × (0.5 / 0.67)
            0.6716417910447761
        """
        return copy_proof_score(p_yes, source, hypothesis, target=self.target,
                                source_inside_is_copy=self.source_inside_is_copy, min_length=self.min_length)


TASKS: dict[str, Task] = {
    "paraphrase": Task("paraphrase", "para-fs", "source", 0.3, min_length=0.67),
    "translation": Task("translation", "net", "source", 0.3),
    "revision": Task("revision", "rev", "original", 0.05, source_inside_is_copy=False),
}
"""The tasks and their defaults. Targets were chosen from human-written references before any GRPO
run: 0.3 is the 10th percentile of novelty of PARAPHRASUS' 167 true paraphrases (TRUE: 0.27; 89 % are
at or above 0.3); translation shares it (a real translation shares only names, numbers and cognates
with its source: the NEAT sample's are at 0.85 or more); 0.05 is the 5th–10th percentile of the 600
OneStopEnglish simplifications (SIMP, a revision task: 0.045–0.056; 93 % at or above 0.05), one word
changed in twenty. The paraphrase length floor, 0.67, is the 5th percentile of the word-count ratio
(shorter over longer) of the 338 STS Benchmark test pairs rated 4 or more (PARAPHRASUS'
``stsbenchmark-test-sts.json``): 95 % of those paraphrases keep at least two thirds of the other's words.
It was added on 2026-11-26 after GRPO runs learned fragments the judge accepted (docs/rewards.md)."""


TEMPLATE_TASKS: dict[str, str] = {"para-fs": "paraphrase", "para-direct": "paraphrase", "para-indirect": "paraphrase",
                                   "para-fs-fr": "paraphrase", "net": "translation", "rev": "revision"}
"""The task of each built-in Yes/No template that judges a generation against a source."""


def task_of(template: Any) -> Task | None:
    """The :class:`Task` a built-in template judges (:data:`TEMPLATE_TASKS`), or None.

    Example:
        >>> task_of("rev").source_field, task_of("net-likert")
        ('original', None)
    """
    name = template if isinstance(template, str) else getattr(template, "name", None)
    return TASKS[TEMPLATE_TASKS[name]] if name in TEMPLATE_TASKS else None


def is_copy(source: str, hypothesis: str, *, source_inside_is_copy: bool = True) -> bool:
    """Whether ``hypothesis`` is a copy of ``source``: the same words up to case, spacing,
    punctuation, invisible characters, accents and homoglyphs (:func:`~pluie_reward.core.text.same_words`)
    or, with ``source_inside_is_copy``, the whole source with more around it.

    Example:
        >>> is_copy("The cat sleeps.", "the cat  sleeps"), is_copy("The cat sleeps.", "The cat sleeps. The cat sleeps.")
        (True, True)
        >>> is_copy("The cat sleeps.", "The cat sleeps. The cat sleeps.", source_inside_is_copy=False)
        False
    """
    return same_words(source, hypothesis) or (source_inside_is_copy and contains_words(source, hypothesis))


def copy_proof_novelty(source: str, hypothesis: str, *, source_inside_is_copy: bool = True) -> float:
    """:func:`~pluie_reward.integrations.rewards.novelty_score`, and 0 for every copy :func:`is_copy` finds.

    Example:
        >>> copy_proof_novelty("The cat sleeps.", "The cat sleeps. Dogs bark."), copy_proof_novelty("The cat sleeps.", "A cat is asleep.")
        (0.0, 0.6)
    """
    if source_inside_is_copy and contains_words(source, hypothesis):
        return 0.0
    return novelty_score(source, hypothesis)


def check_min_length(min_length: float | None) -> float | None:
    """A length floor (a share of the source's words) as a float, checked to be in (0, 1], or None.

    Example:
        >>> check_min_length(0.67), check_min_length(None)
        (0.67, None)
    """
    if min_length is None:
        return None
    if isinstance(min_length, bool) or not isinstance(min_length, (int, float)) or not 0 < min_length <= 1:
        raise ValueError(f"min_length must be a share of the source's words in (0, 1], or None, got {min_length!r}.")
    return float(min_length)


def length_factor(source: str, hypothesis: str, min_length: float | None) -> float:
    """``min(1, (words of hypothesis / words of source) / min_length)``: what a completion shorter than
    ``min_length`` of its source keeps of its reward (1 with no floor or a source without a word).

    Example:
        >>> length_factor("The chef cooks every dish with vegetables from his garden.", "With vegetables from his garden.", 0.67)
        0.746...
        >>> length_factor("The cat sleeps.", "Cats sleep.", None), length_factor("The cat sleeps.", "A cat is asleep.", 0.67)
        (1.0, 1.0)
    """
    min_length = check_min_length(min_length)
    if min_length is None:
        return 1.0
    n = len(content_words(source))
    return 1.0 if n == 0 else min(1.0, len(content_words(hypothesis)) / n / min_length)


def copy_proof_score(p_yes: float, source: str, hypothesis: str, *, target: float = TASKS["paraphrase"].target,
                     source_inside_is_copy: bool = True, min_length: float | None = None) -> float:
    """The copy-proof reward of one completion: ``p_yes × min(1, novelty / target) × (1 − excess repetition)``,
    times :func:`length_factor` with a ``min_length`` (the paraphrase task's is 0.67: :data:`TASKS`).

    Args:
        p_yes: the judge's probability of "Yes" (``sigmoid(PLUIE)``), in [0, 1].
        source: the text the completion must not copy.
        hypothesis: the completion.
        target: the novelty that earns full credit, in (0, 1].
        source_inside_is_copy: see :class:`Task`.
        min_length: see :class:`Task` (default None: no length floor).

    Returns:
        The reward, in [0, 1]: 0 for a copy (:func:`is_copy`) and for a completion without a word;
        ``p_yes`` for a completion at or above the target that does not repeat itself more than the
        source (and is at least ``min_length`` of its length).

    Raises:
        ValueError: ``p_yes`` outside [0, 1] or not a number, a bad ``target`` or ``min_length``.

    Example:
        >>> copy_proof_score(0.9, "The cat sleeps on the mat.", "On the mat, the cat sleeps.")  # novelty 0.5 >= 0.3
        0.9
        >>> round(copy_proof_score(0.9, "The cat sleeps on the mat.", "The cat sleeps on a mat."), 3)  # novelty 1/7 (words and the period): 0.9 × 0.476
        0.429
    """
    if isinstance(p_yes, bool) or not isinstance(p_yes, (int, float)) or not 0.0 <= p_yes <= 1.0:
        raise ValueError(f"p_yes must be a probability in [0, 1], got {p_yes!r}.")
    target = check_target(target)
    check_min_length(min_length)
    novelty = copy_proof_novelty(source, hypothesis, source_inside_is_copy=source_inside_is_copy)
    if novelty == 0.0:
        return 0.0
    excess = max(0.0, repetition(hypothesis) - repetition(source))
    return p_yes * min(1.0, novelty / target) * (1.0 - excess) * length_factor(source, hypothesis, min_length)


def resolve_task(task: "str | Task") -> "Task":
    """A :class:`Task` from its name in :data:`TASKS`, or the Task itself.

    Raises:
        ValueError: an unknown name. TypeError: neither a name nor a Task.

    Example:
        >>> resolve_task("revision").name
        'revision'
    """
    if isinstance(task, str):
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; use one of {list(TASKS)} or a Task(...).")
        return TASKS[task]
    if not isinstance(task, Task):
        raise TypeError(f"task must be a task name ({list(TASKS)}) or a Task, not {type(task).__name__}.")
    return task


class CopyProofReward(PluieReward):
    """The copy-proof reward of a task (see the module docstring), a TRL reward: ``reward(prompts=...,
    completions=..., **columns)`` returns one float in [0, 1) per completion.

    Use the task's class (:class:`ParaphraseReward`, :class:`TranslationReward`,
    :class:`RevisionReward`); this one takes the task as an argument.

    Args:
        judge: a :class:`~pluie_reward.Judge`, or a zero-argument factory returning one (built on first
            call, dropped when pickled).
        task: ``"paraphrase"``, ``"translation"``, ``"revision"`` (:data:`TASKS`) or a :class:`Task`.
        template: the judge's Yes/No template (default: the task's; it must have the task's source field).
        fields: template field -> dataset column, as :class:`~pluie_reward.PluieReward` (unmapped fields
            read the column of the same name; the completion is the ``hypothesis``).
        target: the novelty that earns full credit (default: the task's).
        min_length: the length floor, a share of the source's words in (0, 1] (``"task"``, the default:
            the task's, 0.67 for paraphrase, none for translation and revision; None: no floor; see :class:`Task`).
        threshold: acceptance cut on PLUIE for the logged accept rate (default: the judge's).
        name: the name TRL logs under (default: the task's name).

    Raises:
        ValueError: an unknown task, a bad target, a template with N answers or without the source field.

    When TRL passes ``log_metric``, it logs ``<name>/accept_rate`` (PLUIE > threshold),
    ``<name>/copy_rate`` (:func:`is_copy`), ``<name>/novelty`` (mean :func:`copy_proof_novelty`) and
    ``<name>/accepted_novel_rate`` (accepted and at or above the target: what the generator is for);
    with ``log_extra``, the ``<name>/logratio`` and ``<name>/novelty`` columns of the completions table.

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
        if template.kind != "binary":
            raise ValueError(f"{name}: template {template.name!r} does not answer Yes/No; a copy-proof reward "
                             "reads p_yes of a Yes/No template (e.g. 'para-fs', 'net', 'rev').")
        if task.source_field not in template.fields:
            raise ValueError(f"{name}: template {template.name!r} has no field {task.source_field!r} (the "
                             f"{task.name} source the completion must not copy); its fields are "
                             f"{list(template.fields)}: use a template with it, or a Task(...) naming its source field.")
        super().__init__(judge, template, fields, threshold=threshold, name=name, output="prob")

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """One reward in [0, 1) per completion (see the class docstring)."""
        hypotheses = completion_texts(completions, self.__name__)
        n = len(hypotheses)
        values = self.field_map.gather(kwargs, n, prompts=prompts)
        sources = values[self.task.source_field]
        for i, source in enumerate(sources):
            if not isinstance(source, str):
                raise TypeError(f"{self.__name__}: source {i} (field {self.task.source_field!r}) must be a string, "
                                f"got {type(source).__name__}.")
        judge = self.judge
        logratios = judge.score(self.template, hypothesis=hypotheses, **values)
        task = self.task
        novelty = [task.novelty(s, h) for s, h in zip(sources, hypotheses)]
        rewards = [task.score(sigmoid(x), s, h) for x, s, h in zip(logratios, sources, hypotheses)]
        if log_metric is not None and n:
            cut = judge.threshold if self.threshold is None else self.threshold
            accepted = [x > cut for x in logratios]
            log_metric(f"{self.__name__}/accept_rate", sum(accepted) / n)
            log_metric(f"{self.__name__}/copy_rate", sum(task.is_copy(s, h) for s, h in zip(sources, hypotheses)) / n)
            log_metric(f"{self.__name__}/novelty", math.fsum(novelty) / n)
            log_metric(f"{self.__name__}/accepted_novel_rate",
                       sum(a and v >= task.target for a, v in zip(accepted, novelty)) / n)
            if task.min_length is not None:
                log_metric(f"{self.__name__}/short_rate",
                           sum(length_factor(s, h, task.min_length) < 1 for s, h in zip(sources, hypotheses)) / n)
        if log_extra is not None:
            log_extra(f"{self.__name__}/logratio", [round(x, 4) for x in logratios])
            log_extra(f"{self.__name__}/novelty", [round(v, 4) for v in novelty])
        return rewards

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
