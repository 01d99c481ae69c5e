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

from ..core.text import content_words, edit_distance, normalize_text, same_words
from ..core.judge import Judge, sigmoid
from ..core.template import load_template

TRANSFORMS = ("logratio", "prob", "clip")
# keyword arguments TRL adds to the dataset columns; not columns themselves
_TRAINER_KWARGS = {"trainer_state", "log_extra", "log_metric", "completion_ids", "environments"}


def completion_text(completion: Any, index: int = 0) -> str:
    """The text of one completion: a string, or the content of a conversational completion's messages.

    Example:
        >>> completion_text([{"role": "assistant", "content": "A cat is asleep."}])
        'A cat is asleep.'
        >>> completion_text([{"role": "assistant", "content": [{"type": "text", "text": "Hi"}]}])
        'Hi'
    """
    if isinstance(completion, str):
        return completion
    if completion is None:
        raise TypeError(
            f"completion {index} is None; a reward needs the generated text (a string, or a list of chat "
            "messages for conversational datasets)."
        )
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence) and all(isinstance(m, Mapping) for m in completion):
        parts = [_content_text(m.get("content"), index) for m in completion if m.get("role", "assistant") == "assistant"]
        return "".join(parts)
    raise TypeError(
        f"completion {index}: expected a string or a list of chat messages, got {type(completion).__name__}."
    )


def _content_text(content: Any, index: int) -> str:
    if content is None:
        return ""  # e.g. an assistant turn holding only tool calls
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(block.get("text", "") for block in content if isinstance(block, Mapping) and block.get("type") == "text")
    raise TypeError(f"completion {index}: message content must be a string or a list of blocks, got {type(content).__name__}.")


def _prompt_text(prompt: Any, index: int) -> str:
    """A standard prompt, or the last user message of a conversational prompt."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and prompt and all(isinstance(m, Mapping) for m in prompt):
        users = [m for m in prompt if m.get("role") == "user"]
        return _content_text((users or list(prompt))[-1].get("content"), index)
    raise TypeError(f"prompt {index}: expected a string or a list of chat messages, got {type(prompt).__name__}.")


def _available(kwargs: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in kwargs if k not in _TRAINER_KWARGS) + ["prompt"]


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
        fields = dict(fields or {})
        unknown = sorted(set(fields) - set(self.template.all_fields) - {"hypothesis"})
        if unknown or "hypothesis" in fields:
            raise ValueError(
                f"fields maps template fields to dataset columns; template {self.template.name!r} takes "
                f"{[f for f in self.template.all_fields if f != 'hypothesis']} (the completion is the hypothesis), "
                f"got {sorted(fields)}."
            )
        self.fields = {f: fields.get(f, f) for f in self.template.fields if f != "hypothesis"}
        self.optional = {f: fields[f] for f in self.template.optional_fields if f in fields}
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
        values = {f: self._column(f, column, prompts, kwargs, n) for f, column in self.fields.items()}
        for f, column in self.optional.items():
            values[f] = self._column(f, column, prompts, kwargs, n)
        judge = self.judge
        logratios = judge.score(self.template, hypothesis=hypotheses, **values)  # in the judge's own dtype
        cut = judge.threshold if self.threshold is None else self.threshold
        if log_metric is not None and n:
            log_metric(f"{self.__name__}/accept_rate", sum(s > cut for s in logratios) / n)
        if log_extra is not None:
            log_extra(f"{self.__name__}/logratio", [round(s, 4) for s in logratios])
        return [self._transform(s) for s in logratios]

    def _column(
        self, field: str, column: str, prompts: Any, kwargs: Mapping[str, Any], n: int
    ) -> list[Any]:
        if column in kwargs:
            values = list(kwargs[column])
        elif column == "prompt" and prompts is not None:
            values = [_prompt_text(p, i) for i, p in enumerate(prompts)]
        else:
            raise KeyError(
                f"{self.__name__}: template field {field!r} reads the dataset column {column!r}, which is not in "
                f"the batch. Available columns: {_available(kwargs)}. Pass fields={{{field!r}: '<column>'}} "
                "to PluieReward, or add the column to the dataset."
            )
        if len(values) != n:
            raise ValueError(f"{self.__name__}: column {column!r} has {len(values)} values for {n} completions.")
        return values

    def _transform(self, logratio: float) -> float:
        if self.transform == "prob":
            return sigmoid(logratio)
        if self.transform == "clip":
            return max(-self.clip, min(self.clip, logratio))
        return logratio

    def __repr__(self) -> str:
        return f"PluieReward(name={self.__name__!r}, template={self.template.name!r}, fields={self.fields}, transform={self.transform!r})"


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

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        """One novelty in [0, 1] per completion."""
        if completions is None:
            raise TypeError(f"{self.__name__}: call it with completions=[...] (TRL's reward contract).")
        hypotheses = [completion_text(c, i) for i, c in enumerate(completions)]
        if self.column in kwargs:
            sources = list(kwargs[self.column])
        elif self.column == "prompt" and prompts is not None:
            sources = [_prompt_text(p, i) for i, p in enumerate(prompts)]
        else:
            raise KeyError(
                f"{self.__name__}: the source column {self.column!r} is not in the batch. Available columns: "
                f"{_available(kwargs)}. Use NoveltyReward('<column>')."
            )
        if len(sources) != len(hypotheses):
            raise ValueError(f"{self.__name__}: {len(sources)} sources for {len(hypotheses)} completions.")
        for i, source in enumerate(sources):
            if not isinstance(source, str):
                raise TypeError(f"{self.__name__}: source {i} in column {self.column!r} must be a string, got {type(source).__name__}.")
        return [novelty_score(s, h) for s, h in zip(sources, hypotheses)]

    def __repr__(self) -> str:
        return f"NoveltyReward(column={self.column!r}, name={self.__name__!r})"


novelty = NoveltyReward("source", "novelty")
"""The novelty reward on the ``source`` column: ``reward_funcs=[pluie, novelty]``."""
