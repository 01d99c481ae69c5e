"""Reward functions for TRL's online trainers (GRPOTrainer, RLOOTrainer): PLUIE and novelty.

Both follow TRL 1.x's reward contract: ``reward(prompts=..., completions=..., **columns)`` returns
one float per completion; completions are strings (standard datasets) or lists of chat messages
(conversational datasets); dataset columns arrive as keyword arguments.

Example:
    >>> from trl import GRPOConfig, GRPOTrainer                                     # doctest: +SKIP
    >>> reward = PluieReward(judge, template="para-fs", fields={"source": "source"})  # doctest: +SKIP
    >>> trainer = GRPOTrainer(model=policy, reward_funcs=[reward, novelty],         # doctest: +SKIP
    ...                       args=GRPOConfig(reward_weights=[1.0, 0.5]), train_dataset=ds)
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Callable, Mapping, Sequence

from ..core.fields import FieldMap, completion_text, map_fields
from ..core.text import content_words, edit_distance, normalize_text, same_words
from ..core.judge import Judge, sigmoid
from ..core.template import load_template

TRANSFORMS = ("logratio", "prob", "clip")

__all__ = ["PluieReward", "AsyncPluieReward", "NoveltyReward", "novelty", "novelty_score", "words", "completion_text"]


class PluieReward:
    """PLUIE of each completion as a TRL reward: the completion is the template's ``hypothesis``,
    the other fields come from dataset columns (``fields`` maps field -> column; ``"prompt"`` is the
    prompt itself, its last user message when conversational).

    Args:
        judge: a :class:`Judge`, or a zero-argument factory returning one (built on first call, and
            dropped when pickled so the reward pickles without model weights).
        template: template name, YAML path or :class:`~pluie_reward.Template`.
        fields: field -> dataset column; unmapped template fields read the column of the same name.
        transform: ``"logratio"`` (PLUIE, default), ``"prob"`` (p_yes in [0, 1]) or ``"clip"``
            (PLUIE clipped to ``[-clip, clip]``).
        threshold: acceptance is ``PLUIE > threshold`` (default: the judge's).
        name: the name TRL logs under (``rewards/<name>/mean``); default ``"pluie"``.

    When TRL passes ``log_metric``/``log_extra``, it logs ``<name>/accept_rate`` and the
    per-completion ``<name>/logratio`` column of the completions table.

    Example:
        >>> reward = PluieReward(make_tiny_judge(), fields={"source": "src"})  # doctest: +SKIP
        >>> reward(prompts=["Paraphrase: The cat sleeps."], completions=["A cat is asleep."], src=["The cat sleeps."])  # doctest: +SKIP
        [-0.73]
    """

    def __init__(
        self,
        judge: "Judge | Callable[[], Judge]",
        template: Any = "para-fs",
        fields: Mapping[str, str] | None = None,
        transform: str = "logratio",
        clip: float = 10.0,
        threshold: float | None = None,
        name: str = "pluie",
    ) -> None:
        if transform not in TRANSFORMS:
            raise ValueError(f"unknown transform {transform!r}; use one of {list(TRANSFORMS)}.")
        if transform == "clip" and not clip > 0:
            raise ValueError(f"clip must be positive, got {clip}.")
        self.template = load_template(template)
        if "hypothesis" not in self.template.fields:
            raise ValueError(
                f"template {self.template.name!r} has no 'hypothesis' field for the completion; "
                f"its fields are {list(self.template.fields)}."
            )
        # the one field -> column mapping (pluie_reward.core.fields), checked now against the template
        self.field_map = map_fields(
            self.template.fields, fields, optional=self.template.optional_fields, fixed={"hypothesis"},
            template=self.template.name, setting="fields", who=f"{name}: ",
        )
        self.transform = transform
        self.clip = float(clip)
        self.threshold = threshold
        self.__name__ = name
        if isinstance(judge, Judge):
            self._judge, self._factory = judge, None
        elif callable(judge):
            self._judge, self._factory = None, judge
        else:
            raise TypeError(f"judge must be a Judge or a zero-argument factory returning one, not {type(judge).__name__}.")

    @property
    def judge(self) -> Judge:
        """The judge (built by the factory on first use)."""
        if self._judge is None:
            self._judge = self._factory()
        return self._judge

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self._factory is not None:
            state["_judge"] = None  # rebuilt lazily in the unpickled copy
        return state

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """One reward per completion (see the class docstring)."""
        if completions is None:
            raise TypeError(f"{self.__name__}: call it with completions=[...] (TRL's reward contract).")
        hypotheses = [completion_text(c, i) for i, c in enumerate(completions)]
        n = len(hypotheses)
        values = self.field_map.gather(kwargs, n, prompts=prompts)
        judge = self.judge
        logratios = judge.score(self.template, hypothesis=hypotheses, **values)  # in the judge's own dtype
        cut = judge.threshold if self.threshold is None else self.threshold
        if log_metric is not None and n:
            log_metric(f"{self.__name__}/accept_rate", sum(s > cut for s in logratios) / n)
        if log_extra is not None:
            log_extra(f"{self.__name__}/logratio", [round(s, 4) for s in logratios])
        return [self._transform(s) for s in logratios]

    def _transform(self, logratio: float) -> float:
        if self.transform == "prob":
            return sigmoid(logratio)
        if self.transform == "clip":
            return max(-self.clip, min(self.clip, logratio))
        return logratio

    def __repr__(self) -> str:
        return f"PluieReward(name={self.__name__!r}, template={self.template.name!r}, fields={self.fields}, transform={self.transform!r})"

    @property
    def fields(self) -> dict[str, str]:
        """Template field -> dataset column (the completion fills ``hypothesis``)."""
        return dict(self.field_map.columns)


class AsyncPluieReward(PluieReward):
    """:class:`PluieReward` as an ``async`` reward: TRL runs async rewards concurrently on its event
    loop, so a judge on its own device scores while other (e.g. remote) rewards wait on I/O.

    Scoring runs in a worker thread. Give each model at most one async reward (a shared judge must not
    score concurrently with itself).

    Example:
        >>> reward = AsyncPluieReward(Judge.load("<model>", device="cuda:1"), fields={"source": "source"})  # doctest: +SKIP
    """

    async def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:  # type: ignore[override]
        """One reward per completion, computed off the event loop."""
        return await asyncio.to_thread(PluieReward.__call__, self, prompts, completions, **kwargs)


# --- novelty --------------------------------------------------------------------------------------
_WORD = re.compile(r"\w+|[^\w\s]")


def words(text: str) -> list[str]:
    """Lower-cased word and punctuation tokens.

    Example:
        >>> words("The cat, asleep.")
        ['the', 'cat', ',', 'asleep', '.']
    """
    return _WORD.findall(text.lower())


def novelty_score(source: str, hypothesis: str) -> float:
    """1 - normalised word-level edit similarity: 0 for a copy of the source, 1 when nothing is kept.

    Both texts are normalised first (:func:`~pluie_reward.core.text.normalize_text`), so a copy
    with case, spacing, punctuation, invisible-character (zero-width space, soft hyphen...), accent
    or homoglyph changes scores 0 like a plain copy. A hypothesis without any word (empty,
    whitespace, punctuation only) scores 0: generating nothing is not novelty.

    Example:
        >>> novelty_score("The cat sleeps.", "The cat sleeps.")
        0.0
        >>> novelty_score("The cat sleeps.", "A cat is asleep.")
        0.6
        >>> novelty_score("The cat sleeps.", "T\u200bh\u200be \u0441at sleeps")  # zero-width spaces, Cyrillic с
        0.0
    """
    if not content_words(hypothesis) or same_words(source, hypothesis):
        return 0.0
    a, b = words(normalize_text(source)), words(normalize_text(hypothesis))
    longest = max(len(a), len(b))
    return edit_distance(a, b) / longest if longest else 0.0


class NoveltyReward:
    """Novelty of each completion against a source column, as a TRL reward (picklable).

    Copying the source scores 0; combine it with PLUIE through ``GRPOConfig(reward_weights=...)`` so
    that copying the source does not win. ``column="prompt"`` reads the prompt itself.

    Example:
        >>> reward = NoveltyReward("sentence1")
        >>> reward(completions=["The cat sleeps."], sentence1=["The cat sleeps."])
        [0.0]
    """

    def __init__(self, column: str = "source", name: str = "novelty") -> None:
        self.column = column
        self.__name__ = name
        self._map = FieldMap.explicit({"source": column}, who=f"{name}: ", hint="NoveltyReward('<column>')")

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        """One novelty in [0, 1] per completion."""
        if completions is None:
            raise TypeError(f"{self.__name__}: call it with completions=[...] (TRL's reward contract).")
        hypotheses = [completion_text(c, i) for i, c in enumerate(completions)]
        sources = self._map.gather(kwargs, len(hypotheses), prompts=prompts)["source"]
        for i, source in enumerate(sources):
            if not isinstance(source, str):
                raise TypeError(f"{self.__name__}: source {i} in column {self.column!r} must be a string, got {type(source).__name__}.")
        return [novelty_score(s, h) for s, h in zip(sources, hypotheses)]

    def __repr__(self) -> str:
        return f"NoveltyReward(column={self.column!r}, name={self.__name__!r})"


novelty = NoveltyReward("source", "novelty")
"""The novelty reward on the ``source`` column: ``reward_funcs=[pluie, novelty]``."""
