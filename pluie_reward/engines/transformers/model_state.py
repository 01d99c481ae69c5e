"""Putting a model in scoring state (eval, no autograd, adapters off) and restoring it exactly."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager, nullcontext
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


def no_autocast(device_type: str) -> Any:
    """A context switching autocast off for ``device_type`` (a no-op where autocast does not exist).

    Example:
        >>> with no_autocast("cpu"):
        ...     torch.is_autocast_enabled("cpu")
        False
    """
    try:
        return torch.autocast(device_type=device_type, enabled=False)
    except RuntimeError:  # a device type without autocast support
        return nullcontext()


@contextmanager
def weights_precision(model: Any) -> Iterator[None]:
    """Run ``model`` in its weights' dtype: no ambient autocast, and without the autocast wrapper that
    ``accelerate`` puts around ``forward`` for mixed-precision training (restored afterwards).

    The judge then scores the same under bf16/fp16 mixed-precision training as in evaluation.

    Example:
        >>> with weights_precision(policy):  # doctest: +SKIP
        ...     logits = policy(ids).logits
    """
    device = next(model.parameters()).device.type
    patched = model.__dict__.get("forward")
    original = model.__dict__.get("_original_forward")
    if patched is not None and original is not None:
        model.forward = original
    try:
        with no_autocast(device):
            yield
    finally:
        if patched is not None and original is not None:
            model.forward = patched


@contextmanager
def scoring_state(model: Any, disable_adapters: bool = False) -> Iterator[None]:
    """Eval mode, ``torch.inference_mode``, the weights' own dtype (no ambient or accelerate autocast)
    and (optionally) PEFT adapters disabled; every module's training flag and the active adapter are
    restored afterwards, even on error.

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
            stack.enter_context(weights_precision(model))
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
