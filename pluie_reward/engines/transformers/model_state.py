"""Putting a model in scoring state (eval, no autograd, adapters off) and restoring it exactly."""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any, Iterator

import torch


_ROWS_PER_CHUNK = 4096
_PROBES: dict[tuple, torch.Tensor] = {}


def _probe(length: int, device: torch.device) -> torch.Tensor:
    """A fixed pseudo-random float32 vector in [0.5, 1.5) (cached per length and device)."""
    key = (length, str(device))
    if key not in _PROBES:
        generator = torch.Generator().manual_seed(length)
        _PROBES[key] = (torch.rand(length, generator=generator) + 0.5).to(device)
    return _PROBES[key]


def weights_digest(parameters: "list[tuple[str, torch.Tensor]]") -> torch.Tensor:
    """A fingerprint of the parameters' values: changes whenever any value changes, however it was written.

    Each parameter, seen as a (rows, columns) matrix, is multiplied by a fixed random vector in
    float32 (one read of the weights, in chunks of rows, on the parameter's device) and the row
    results are combined with a second random vector in float64. Optimizer steps, ``.data``
    writes (EMA, ``mul_``, TRL's reference-model sync), replaced Parameters and
    ``load_state_dict(assign=True)`` all change it; moving the weights to another device does not
    (up to the last bits of float32 sums on the other device). Names, shapes and dtypes are part of it.

    Args:
        parameters: ``(name, tensor)`` pairs, e.g. ``model.named_parameters()``.

    Returns:
        A float64 CPU tensor; compare two digests with ``torch.equal``.

    Example:
        >>> p = torch.nn.Parameter(torch.ones(3, 2)); before = weights_digest([("w", p)])
        >>> _ = p.data.mul_(1.5)            # a .data write: invisible to version counters
        >>> torch.equal(weights_digest([("w", p)]), before)
        False
    """
    values = []
    with torch.no_grad():
        for _, tensor in parameters:
            matrix = tensor.detach().reshape(tensor.shape[0] if tensor.dim() > 1 else 1, -1)
            rows, columns = matrix.shape
            if rows == 0 or columns == 0:
                values.append(torch.zeros((), dtype=torch.float64, device=tensor.device))
                continue
            columns_probe = _probe(columns, matrix.device)
            row_sums = [
                torch.mv(matrix[start : start + _ROWS_PER_CHUNK].float(), columns_probe)
                for start in range(0, rows, _ROWS_PER_CHUNK)
            ]
            values.append(torch.dot(torch.cat(row_sums).double(), _probe(rows, matrix.device).double()))
    digest = torch.stack(values).cpu() if values else torch.zeros(0, dtype=torch.float64)
    layout = hash(tuple((name, tuple(t.shape), str(t.dtype)) for name, t in parameters))
    return torch.cat([digest, torch.tensor([float(layout % (1 << 52))], dtype=torch.float64)])


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


class SharedModelBusy(RuntimeError):
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
    base = model.get_base_model() if hasattr(model, "get_base_model") else model

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

