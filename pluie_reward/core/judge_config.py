"""The options of a :class:`~pluie_reward.Judge` itself, as one dataclass checked once: :class:`JudgeConfig`.
The constructors hand each keyword argument to the judge or to its engine by the dataclasses' field
names (:func:`split_options`).

Example:
    >>> JudgeConfig(threshold=1.5).cache_size
    4096
    >>> split_options(JudgeConfig, {"threshold": 1.0, "tensor_parallel_size": 2})
    ({'threshold': 1.0}, {'tensor_parallel_size': 2})
    >>> JudgeConfig(cache_size=-1)
    Traceback (most recent call last):
    ...
    ValueError: cache_size must be a non-negative integer, got -1.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .calibration import Calibration
from .plan import finite
from .template import check_chat_template_kwargs


def option_names(config: type) -> tuple[str, ...]:
    """The names of a config dataclass's fields (the keyword arguments it takes).

    Args:
        config: a dataclass type, e.g. :class:`JudgeConfig`.

    Returns:
        Its field names, in order.

    Example:
        >>> option_names(JudgeConfig)
        ('cache_size', 'threshold', 'allow_multi_token', 'name', 'chat_template_kwargs', 'clean_text', 'calibration')
    """
    return tuple(f.name for f in dataclasses.fields(config))


def split_options(config: type, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split keyword arguments into those named like ``config``'s fields and the rest.

    Args:
        config: a dataclass type.
        options: keyword arguments.

    Returns:
        ``(own, rest)``: two dicts, in the order of ``options``.
    """
    names = set(option_names(config))
    own = {k: v for k, v in options.items() if k in names}
    return own, {k: v for k, v in options.items() if k not in names}


@dataclass(frozen=True)
class JudgeConfig:
    """The options of a :class:`~pluie_reward.Judge` (not of its engine), checked when it is made.

    ``Judge(model, tokenizer, **options)`` and ``Judge.load(..., **options)`` take them as keyword
    arguments; :func:`split_options` tells them from the engine's.

    Raises:
        ValueError: ``cache_size`` not an integer >= 0, a non-finite ``threshold``, or a
            ``chat_template_kwargs`` that is not a mapping of keyword names.
        TypeError: ``allow_multi_token`` or ``clean_text`` not a bool, ``name`` not a string, a ``calibration`` that
            is not a :class:`~pluie_reward.core.calibration.Calibration`, a path or a dict.
        FileNotFoundError: no calibration file at the path.
    """

    cache_size: int = field(default=4096, metadata={
        "help": "how many recent results to keep, keyed on the judge's weights and the prompt ids (0: no cache)."})
    threshold: float = field(default=0.0, metadata={
        "help": "the verdict is score > threshold (PLUIE for Yes/No templates); a scoring call may override it."})
    allow_multi_token: bool = field(default=False, metadata={
        "help": "accept answers of several tokens (their log-probabilities are summed, the seeds' eq. 4)."})
    name: str | None = field(default=None, metadata={
        "help": "a label for reprs, logs and reports (default: the model's name or path)."})
    chat_template_kwargs: Mapping[str, Any] | None = field(default=None, metadata={
        "help": "keywords for the judge's chat template in every rendering (Qwen3's enable_thinking, gpt-oss's "
                "reasoning_effort, strftime_now); a template's own keywords override them."})
    clean_text: bool = field(default=True, metadata={
        "help": "read every field value without its surrounding whitespace and with inner runs of whitespace made "
                "one (core.template.clean_text), on every path, so layout a policy adds at no cost cannot move a "
                "score; False: read values exactly as given."})
    calibration: Calibration | str | Path | Mapping[str, Any] | None = field(default=None, metadata={
        "help": "a Calibration, the path of a calibration.json (or its folder) or a dict of its fields (read "
                "into a Calibration here): details records of Yes/No templates then add p_calibrated = "
                "sigmoid(a * logratio + b); floats and verdicts stay raw."})

    def __post_init__(self) -> None:
        size = self.cache_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"cache_size must be a non-negative integer, got {size!r}.")
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not finite(t):
            raise ValueError(f"threshold must be a finite number (the verdict is score > threshold), got {t!r}.")
        if not isinstance(self.allow_multi_token, bool):
            raise TypeError(f"allow_multi_token must be True or False, got {self.allow_multi_token!r}.")
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"name must be a string (a label for reprs and logs), got {type(self.name).__name__}.")
        if not isinstance(self.clean_text, bool):
            raise TypeError(f"clean_text must be True or False, got {self.clean_text!r}.")
        if self.chat_template_kwargs is not None:
            check_chat_template_kwargs(self.chat_template_kwargs, "Judge")
        object.__setattr__(self, "calibration", Calibration.resolve(self.calibration))  # a file is read once, here

    def to_kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of ``Judge(...)`` (a shallow copy: the calibration is kept as is).

        Example:
            >>> JudgeConfig(threshold=1.0).to_kwargs()["threshold"]
            1.0
        """
        return {name: getattr(self, name) for name in option_names(type(self))}
