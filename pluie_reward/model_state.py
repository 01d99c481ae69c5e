"""Putting a model in scoring state (eval, no autograd, adapters off) and restoring it exactly."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

import torch


def weights_fingerprint(parameters: "list[torch.nn.Parameter]") -> int:
    """A number that changes whenever a parameter is replaced or modified in place (optimizer steps).

    Example:
        >>> p = torch.nn.Parameter(torch.zeros(2)); before = weights_fingerprint([p])
        >>> with torch.no_grad(): _ = p.add_(1)
        >>> weights_fingerprint([p]) != before
        True
    """
    return hash(tuple((p.data_ptr(), p._version) for p in parameters))


@contextmanager
def scoring_state(model: Any, disable_adapters: bool = False) -> Iterator[None]:
    """Eval mode, ``torch.inference_mode`` and (optionally) PEFT adapters disabled; every module's
    training flag and the active adapter are restored afterwards, even on error.

    Gradient checkpointing in transformers only acts in training mode, so it is inactive while
    scoring (KV caches work) and left configured as it was.

    Example:
        >>> with scoring_state(model):  # doctest: +SKIP
        ...     logits = model(ids).logits
    """
    modes = [(module, module.training) for module in model.modules()]
    active = getattr(model, "active_adapter", None) if disable_adapters else None
    model.eval()
    try:
        with ExitStack() as stack:
            stack.enter_context(torch.inference_mode())
            if disable_adapters:
                if not hasattr(model, "disable_adapter"):
                    raise TypeError(
                        "disable_adapters=True needs a PEFT model (peft.PeftModel); got "
                        f"{type(model).__name__}. Use Judge.from_model for a plain model."
                    )
                stack.enter_context(model.disable_adapter())
            yield
    finally:
        for module, mode in modes:
            module.training = mode
        if active is not None and getattr(model, "active_adapter", None) != active:
            model.set_adapter(active)
