"""What a PLUIE reward returns: :class:`RewardConfig`, its options in one dataclass, checked once.
:class:`~pluie_reward.PluieReward` (async, remote) take them as keyword arguments or as one
``config=RewardConfig(...)``. One ``output`` vocabulary covers both kinds of template:

* Yes/No templates (``para-fs``, ``rev``, ``net``...): ``"logratio"`` (PLUIE, log p(yes) - log
  p(no), the default), ``"prob"`` (``p_yes = sigmoid(PLUIE)``), ``"clip"`` (PLUIE clipped to
  ``[-clip, clip]``), ``"calibrated"`` (the judge's ``p_calibrated``) or ``"verdict"`` (1.0 when
  PLUIE > threshold, else 0.0);
* templates with N answers (choices, rating scales; :class:`~pluie_reward.integrations.outputs.AnswerOutput`):
  ``"expected"`` (the expected rating of a scale), ``"prob"`` or ``"logprob"`` of ``answer``.

The reward checks what needs the template when it loads it. Standard library only (the HTTP client imports it).

Example:
    >>> RewardConfig(output="clip", clip=5.0)
    RewardConfig(output='clip', clip=5.0, threshold=None, answer=None, normalize=False, both_orders=False, scale=None)
    >>> RewardConfig(output="prob", answer="A").reads_answers   # p(A) of a choice template
    True
    >>> RewardConfig(output="prob").reads_answers is None       # p_yes, or p(answer) once the template says
    True
    >>> RewardConfig(output="logratio", answer="A")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    ValueError: answer=, normalize=, both_orders= and scale= go with output='prob', 'logprob' or 'expected' (templates with N answers);
    output='logratio' reads a Yes/No template.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pluie_reward.integrations.outputs import READS, AnswerOutput

YES_NO_OUTPUTS = ("logratio", "prob", "clip", "calibrated", "verdict")
"""Outputs of a Yes/No template (PLUIE and what is computed from it)."""
N_ANSWER_OUTPUTS = READS
"""Outputs of a template with N answers (``"prob"`` is in both: p_yes, or p(answer) with ``answer=``)."""
OUTPUTS = tuple(dict.fromkeys(YES_NO_OUTPUTS + N_ANSWER_OUTPUTS))
"""Every ``output`` a reward takes."""


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class RewardConfig:
    """The options of a PLUIE reward (:class:`~pluie_reward.PluieReward`,
    :class:`~pluie_reward.serving.client.RemotePluieReward`), checked when it is made.

    Raises:
        ValueError: an unknown ``output``, ``clip <= 0`` with ``output="clip"``, ``answer``/
            ``normalize``/``both_orders``/``scale`` with a Yes/No output, ``threshold`` with an
            answer's probability, or an N-answer read :class:`~pluie_reward.integrations.outputs.AnswerOutput` refuses.

    Example:
        >>> config = RewardConfig(output="expected", normalize=True)
        >>> config.reads_answers, config.answer_output()
        (True, AnswerOutput(read='expected', answer=None, normalize=True, both_orders=False, scale=None))
        >>> RewardConfig(output="clip", clip=0)
        Traceback (most recent call last):
        ...
        ValueError: clip must be a positive number (rewards are clipped to [-clip, clip]), got 0.
    """

    output: str = field(default="logratio", metadata={
        "help": "what the reward is. Yes/No templates: 'logratio' (PLUIE, log p(yes) - log p(no)), 'prob' (p_yes = "
                "sigmoid(PLUIE), in [0, 1]), 'clip' (PLUIE clipped to [-clip, clip]), 'calibrated' (the judge's "
                "p_calibrated = sigmoid(a * PLUIE + b); the judge needs a calibration) or 'verdict' (1.0 if PLUIE > "
                "threshold, else 0.0). Templates with N answers: 'expected' (the expected rating of a scale), 'prob' "
                "or 'logprob' (of the answer `answer`, renormalised over the template's answers)."})
    clip: float = field(default=10.0, metadata={
        "help": "output='clip' only: the bound of the clipped PLUIE (> 0); also the default floor of a guarded reward."})
    threshold: float | None = field(default=None, metadata={
        "help": "acceptance cut: PLUIE > threshold (default: the judge's) for output='verdict' and the logged accept "
                "rate; for a scale, expected rating > threshold (default: the middle of the scale)."})
    answer: str | None = field(default=None, metadata={
        "help": "templates with N answers, output='prob'/'logprob': the answer's label (e.g. 'A': the completion, in "
                "the first slot, is preferred)."})
    normalize: bool = field(default=False, metadata={
        "help": "output='expected' only: (rating - lowest) / (highest - lowest), in [0, 1]."})
    both_orders: bool = field(default=False, metadata={
        "help": "choice templates only: also score each completion in the second slot and average the two orders "
                "(removes position bias; two judge passes per completion)."})
    scale: tuple[float, float] | None = field(default=None, metadata={
        "help": "(lowest, highest) rating for normalize=True when the template is not known here (a remote judge "
                "whose /health does not say); a local template gives its own."})

    def __post_init__(self) -> None:
        output = self.output
        if output not in OUTPUTS:
            raise ValueError(f"unknown output {output!r}; use one of {list(YES_NO_OUTPUTS)} for a Yes/No template "
                             f"('logratio', PLUIE, is the default) or {list(N_ANSWER_OUTPUTS)} for a template with N answers.")
        if not _real(self.clip) or (output == "clip" and self.clip <= 0):
            raise ValueError(f"clip must be a positive number (rewards are clipped to [-clip, clip]), got {self.clip!r}.")
        object.__setattr__(self, "clip", float(self.clip))
        if self.threshold is not None:
            if not _real(self.threshold):
                raise ValueError(f"threshold must be a finite number (the acceptance cut) or None, got {self.threshold!r}.")
            object.__setattr__(self, "threshold", float(self.threshold))
        for name in ("normalize", "both_orders"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        if self.answer is not None and not isinstance(self.answer, str):
            raise ValueError(f"answer must be an answer's label (a string such as 'A' or '5'), got {self.answer!r}.")
        if self.reads_answers is False and self._answer_options():
            raise ValueError(f"answer=, normalize=, both_orders= and scale= go with output='prob', 'logprob' or 'expected' "
                             f"(templates with N answers); output={output!r} reads a Yes/No template.")
        if self.reads_answers:
            reading = self.answer_output()  # AnswerOutput's own checks (an answer to read, normalize with 'expected'...)
            object.__setattr__(self, "scale", reading.scale)
            if self.threshold is not None and output != "expected":
                raise ValueError(f"threshold= is the acceptance cut of PLUIE or of an expected rating; with "
                                 f"output={output!r} the accept rate counts the judge's picks of answer {self.answer!r}: "
                                 "leave it out.")

    def _answer_options(self) -> bool:
        return self.answer is not None or self.normalize or self.both_orders or self.scale is not None

    @property
    def reads_answers(self) -> bool | None:
        """True for a read of a template with N answers (``"expected"``, ``"logprob"``, or ``"prob"``
        with ``answer=`` and the like), False for a Yes/No output, None for a bare ``"prob"``
        (p_yes of a Yes/No template, or an error asking for ``answer=`` on a template with N answers)."""
        if self.output in ("expected", "logprob"):
            return True
        if self.output == "prob":
            return True if self._answer_options() else None
        return False

    def answer_output(self) -> AnswerOutput:
        """The read of a template with N answers these options describe.

        Returns:
            An :class:`~pluie_reward.integrations.outputs.AnswerOutput` (not yet checked against a template).

        Raises:
            ValueError: the options do not make one (e.g. ``output="prob"`` without ``answer=``).
        """
        return AnswerOutput(self.output, self.answer, self.normalize, self.both_orders, self.scale)

    def to_dict(self) -> dict[str, Any]:
        """The options as a dict of keyword arguments (``PluieReward(judge, **config.to_dict())``).

        Example:
            >>> RewardConfig(output="verdict", threshold=1.0).to_dict()["threshold"]
            1.0
        """
        return asdict(self)


def reward_config(config: RewardConfig | None, who: str, **options: Any) -> RewardConfig:
    """A reward's options: ``config`` as given, or a :class:`RewardConfig` of its keyword arguments.

    Args:
        config: the ``config=`` argument (None: build one from ``options``).
        who: the reward's name, prefixed to messages.
        options: the keyword arguments named like :class:`RewardConfig`'s fields.

    Returns:
        The checked options.

    Raises:
        TypeError: ``config=`` together with keyword options that differ from their defaults, or a
            ``config`` that is not a :class:`RewardConfig`.
        ValueError: a check of :class:`RewardConfig` failed (the message starts with ``who``).

    Example:
        >>> reward_config(None, "pluie", output="clip", clip=2.0) == RewardConfig(output="clip", clip=2.0)
        True
    """
    defaults = {f.name: f.default for f in fields(RewardConfig)}
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"{who}: unexpected option(s) {unknown}; RewardConfig has {list(defaults)}.")
    if config is not None:
        if not isinstance(config, RewardConfig):
            raise TypeError(f"{who}: config must be a RewardConfig, not {type(config).__name__}.")
        given = [k for k, v in options.items() if v is not defaults[k] and v != defaults[k]]
        if given:
            raise TypeError(f"{who}: pass the options either in config= or as keywords, not both (got config= and {given}).")
        return config
    try:
        return RewardConfig(**options)
    except ValueError as err:
        raise ValueError(f"{who}: {err}") from None
