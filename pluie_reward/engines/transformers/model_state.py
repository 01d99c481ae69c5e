"""Putting a model in scoring state (eval, no autograd, adapters off) and restoring it exactly."""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any, Iterator

import torch

from ...common.errors import PluieError
from .compat import base_model


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
        >>> with torch.autocast("cpu", dtype=torch.bfloat16), weights_precision(model):
        ...     logits = model(ids).logits
        >>> logits.dtype  # the weights' float32, not the ambient bf16
        torch.float32
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
        >>> _ = model.train()  # e.g. a policy in the middle of training
        >>> with scoring_state(model):
        ...     logits = model(ids).logits
        ...     model.training, torch.is_inference_mode_enabled()
        (False, True)
        >>> model.training  # restored
        True
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


class SharedModelBusy(PluieError, RuntimeError):
    """A forward of a model entered from another thread while a judge sharing its weights was scoring."""


@contextmanager
def this_thread_only(model: Any, who: str = "the judge") -> Iterator[None]:
    """While the block runs, a forward of ``model`` (its base model under PEFT) entered from another
    thread raises :class:`SharedModelBusy` instead of running with the judge's modes and adapters.

    A judge sharing a policy's weights switches the shared modules to eval mode and disables (or
    swaps) the policy's adapters while it scores, so a policy forward in another thread at that
    moment would compute the wrong thing. The check is a forward pre-hook registered for the block
    only; a forward that started before the block is not seen.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(2, 2)
        >>> with this_thread_only(layer):
        ...     _ = layer(torch.zeros(1, 2))                   # the scoring thread itself: fine
        >>> seen = []
        >>> def forward_elsewhere():
        ...     try:
        ...         layer(torch.zeros(1, 2)); seen.append("ran")
        ...     except SharedModelBusy:
        ...         seen.append("refused")
        >>> with this_thread_only(layer):
        ...     t = threading.Thread(target=forward_elsewhere); t.start(); t.join()
        >>> t = threading.Thread(target=forward_elsewhere); t.start(); t.join()   # after scoring: runs
        >>> seen
        ['refused', 'ran']
    """
    owner = threading.get_ident()
    base = base_model(model)

    def check(module: Any, args: Any) -> None:
        if threading.get_ident() != owner:
            raise SharedModelBusy(
                f"this model's weights are shared with {who}, which is scoring in another thread (eval mode, policy "
                "adapters off): run the policy's forwards and the judge's scoring in one thread (as TRL does: rewards "
                "are computed between generation and the training forward), or give the judge its own copy "
                "(Judge.from_model / Judge.load)."
            )

    handle = base.register_forward_pre_hook(check)
    try:
        yield
    finally:
        handle.remove()

