"""The options of the transformers engine, as one dataclass (PEFT style) checked once:
:class:`TransformersEngineConfig`. Standard library only, so :class:`~pluie_reward.Judge` tells
its engine's keyword arguments from its own without importing torch.

Example:
    >>> TransformersEngineConfig(batch_tokens=2048).check_weights
    True
    >>> TransformersEngineConfig(batch_tokens=0)
    Traceback (most recent call last):
    ...
    ValueError: batch_tokens must be a positive integer or None (device default), got 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")


@dataclass(frozen=True)
class TransformersEngineConfig:
    """The options of :class:`~pluie_reward.engines.transformers.engine.TransformersEngine`
    (``Judge(model, tokenizer, **options)`` passes them on), checked when it is made.

    Raises:
        ValueError: ``batch_tokens`` not a positive integer or None, ``min_shared_tokens`` or
            ``max_cached_prefixes`` not a positive integer, ``adapter_name`` not a non-empty string.
        TypeError: ``disable_adapters``, ``check_weights`` or ``keep_group_prefixes`` not a bool.
    """

    batch_tokens: int | None = field(default=None, metadata={
        "help": "token budget (rows x longest row) of one forward batch; None: 512 on CPU, 4096 elsewhere."})
    disable_adapters: bool = field(default=False, metadata={
        "help": "score the base model of a PEFT model (its adapters off while scoring): a judge sharing a policy."})
    adapter_name: str | None = field(default=None, metadata={
        "help": "score with this (frozen) PEFT adapter of the model active instead, e.g. a tuned judge adapter."})
    device: Any = field(default=None, metadata={
        "help": "where to score when offload_device is set (default: the best available)."})
    offload_device: Any = field(default=None, metadata={
        "help": "keep the weights there (e.g. 'cpu') and move them to device only while scoring."})
    check_weights: bool = field(default=True, metadata={
        "help": "read the weights' values at each call so that caches never outlive a weight change (False only if "
                "nothing ever writes to them)."})
    min_shared_tokens: int = field(default=8, metadata={
        "help": "a group of requests gets its own cached prefix when it shares at least this many tokens beyond the "
                "template prefix."})
    max_cached_prefixes: int = field(default=16, metadata={"help": "how many prefixes' keys and values are kept."})
    keep_group_prefixes: bool = field(default=False, metadata={
        "help": "keep a call's group prefixes (a source shared by several candidates) for later calls; by default "
                "they are dropped when the call ends (GRPO never scores a group twice) and only template prefixes stay."})

    def __post_init__(self) -> None:
        if self.batch_tokens is not None and (isinstance(self.batch_tokens, bool) or not isinstance(self.batch_tokens, int)
                                              or self.batch_tokens < 1):
            raise ValueError(f"batch_tokens must be a positive integer or None (device default), got {self.batch_tokens!r}.")
        for name in ("disable_adapters", "check_weights", "keep_group_prefixes"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        if self.adapter_name is not None and (not isinstance(self.adapter_name, str) or not self.adapter_name):
            raise ValueError(f"adapter_name must be the name of a PEFT adapter on the model, got {self.adapter_name!r}.")
        _positive_int("min_shared_tokens", self.min_shared_tokens)
        _positive_int("max_cached_prefixes", self.max_cached_prefixes)
