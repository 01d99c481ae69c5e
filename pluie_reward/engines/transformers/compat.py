"""Names that transformers changed between releases, read the way the installed release has them.

Checkpointing: transformers 5.20 renamed ``gradient_checkpointing*`` to ``activation_checkpointing*`` on
models and on ``TrainingArguments`` (the old names warn); these helpers use the installed release's name, and
:func:`quiet_renames` hides the warnings of PEFT's and TRL's own reads of the old name.

Key/value cache: transformers 5.24 renamed the forward argument and output field ``past_key_values``
to ``cache`` (the old name warns and goes in 5.40).

Example:
    >>> from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer
    >>> model = make_tiny_causal_lm(make_tiny_tokenizer())
    >>> checkpointing_on(model)
    False
    >>> enable_checkpointing(model); checkpointing_on(model)
    True
    >>> disable_checkpointing(model); checkpointing_on(model)
    False
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from typing import Any, Iterator, Mapping

_NEW, _OLD = "activation_checkpointing", "gradient_checkpointing"


def base_model(model: Any) -> Any:
    """The transformers model under its (Distributed)DataParallel (``.module``) and PEFT wrappers (the model itself
    otherwise): what every reader of a model's forward, attention, modules or config here unwraps, one way.

    Example:
        >>> import torch
        >>> inner = torch.nn.Linear(1, 1)
        >>> base_model(torch.nn.DataParallel(inner)) is inner, base_model(inner) is inner
        (True, True)
    """
    model = getattr(model, "module", model)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def forward_parameters(model: Any) -> Mapping[str, inspect.Parameter]:
    """The parameters of the transformers model's ``forward`` under its PEFT and (Distributed)DataParallel wrappers.

    Example:
        >>> from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer
        >>> "input_ids" in forward_parameters(make_tiny_causal_lm(make_tiny_tokenizer()))
        True
    """
    return inspect.signature(type(base_model(model)).forward).parameters


def checkpointing_on(model: Any) -> bool:
    """Whether checkpointing is configured on a transformers model (or the base of a PEFT model).

    Args:
        model: a ``PreTrainedModel`` or a PEFT model around one.

    Returns:
        ``is_activation_checkpointing`` (transformers >= 5.20) or ``is_gradient_checkpointing``.

    Raises:
        AttributeError: the model has neither flag (not a transformers model).
    """
    base = base_model(model)
    for name in (f"is_{_NEW}", f"is_{_OLD}"):
        if hasattr(base, name):
            return bool(getattr(base, name))
    raise AttributeError(f"{type(base).__name__} has no gradient checkpointing flag")


def enable_checkpointing(model: Any, use_reentrant: bool = False) -> None:
    """Turn checkpointing on under the method name this transformers has.

    Args:
        model: a ``PreTrainedModel`` or a PEFT model around one.
        use_reentrant: passed to ``torch.utils.checkpoint`` (non-reentrant by default, as TRL does).
    """
    base = base_model(model)
    name = _NEW if hasattr(base, f"{_NEW}_enable") else _OLD
    getattr(base, f"{name}_enable")(**{f"{name}_kwargs": {"use_reentrant": use_reentrant}})


def disable_checkpointing(model: Any) -> None:
    """Turn checkpointing off under the method name this transformers has (no-op without one)."""
    base = base_model(model)
    method = getattr(base, f"{_NEW}_disable", None) or getattr(base, f"{_OLD}_disable", None)
    if method is not None:
        method()


@contextlib.contextmanager
def quiet_renames() -> Iterator[None]:
    """No FutureWarning about the old checkpointing names while the block runs: PEFT 0.21 reads
    ``is_gradient_checkpointing`` when it wraps a model (``get_peft_model``, ``PeftModel.from_pretrained``) and TRL
    1.16 at each generation of ``GRPOTrainer``, which transformers >= 5.20 reports as deprecated: calls of theirs
    that no user can change.

    Example:
        >>> with warnings.catch_warnings(record=True) as seen:
        ...     warnings.simplefilter("always")
        ...     with quiet_renames():
        ...         warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning)
        ...     warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning)
        >>> len(seen)  # only the one outside the block
        1
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=f"`(is_)?{_OLD}` is deprecated", category=FutureWarning)
        yield


def training_arguments(enabled: bool, use_reentrant: bool = False) -> dict[str, Any]:
    """The ``TrainingArguments`` keywords that switch checkpointing on or off, by this release's names.

    Args:
        enabled: checkpointing on or off.
        use_reentrant: passed to ``torch.utils.checkpoint`` when enabled.

    Returns:
        ``{"activation_checkpointing": ..., "activation_checkpointing_kwargs": ...}`` on transformers
        >= 5.20, the ``gradient_checkpointing`` names before.

    Example:
        >>> sorted(training_arguments(False).values(), key=str)
        [False, None]
    """
    from transformers import TrainingArguments

    name = _NEW if _NEW in inspect.signature(TrainingArguments).parameters else _OLD
    return {name: enabled, f"{name}_kwargs": {"use_reentrant": use_reentrant} if enabled else None}


def cache_argument(model: Any) -> str:
    """The name of the key/value cache argument of ``model.forward``: ``"cache"`` (transformers >=
    5.24) or ``"past_key_values"``.

    Example:
        >>> from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer
        >>> cache_argument(make_tiny_causal_lm(make_tiny_tokenizer())) in ("cache", "past_key_values")
        True
    """
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


def output_cache(output: Any) -> Any:
    """The key/value cache of a forward's output, under either name."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
