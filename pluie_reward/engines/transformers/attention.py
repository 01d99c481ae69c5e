"""Shared-prefix attention: many right-padded suffix rows attend one prefix key/value cache that is
stored once (batch 1), never copied per row.

The prefix part folds the batch into the query length (one key/value set for every row), the
suffix part runs causally within each row, and the two softmaxes are merged exactly through
their log-sum-exps.

:func:`register` adds ``pluie_prefix_<name>`` (e.g. ``pluie_prefix_sdpa``) to transformers'
``AttentionInterface`` (and the original's mask function to ``AttentionMaskInterface``): it runs
shared-prefix attention when the forward call carries a ``pluie_prefix`` keyword argument, the original
function unchanged otherwise. The engine selects it on its own model for a scoring call only
(:func:`selected`); other models never see it.

Example:
    >>> q = k = v = torch.randn(1, 2, 3, 4)
    >>> out, lse = partial_attention(q, k, v, 0.5, causal=True)
    >>> out.shape, lse.shape
    (torch.Size([1, 2, 3, 4]), torch.Size([1, 2, 3]))
"""

from __future__ import annotations

import inspect
import os
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from ...common.errors import PluieError
from .compat import base_model

KV = list[tuple[torch.Tensor, torch.Tensor]]

# Keyword arguments the shared-prefix function understands (allow-list). Any other keyword a model
# passes to its attention with a value (a bias, sinks, varlen sequence lengths...) makes the
# function refuse with AttentionUnsupported instead of silently ignoring it.
HANDLED_KWARGS = frozenset({"scaling", "dropout", "sliding_window", "softcap", "is_causal", "position_ids", "cache_position",
                            "use_cache", "output_attentions"})
# PyTorch's fused flash-attention kernels return the log-sum-exp we need: on CPU (any float dtype) and on
# CUDA (float16/bfloat16, head size <= 256, a multiple of 8). They are private ops (tests/test_attention_registry.py
# breaks if they move); the CUDA one was chosen over the memory-efficient kernel and one SDPA over the broadcast
# prefix by issue 45's per-layer measurements on an H200 (0.32 ms against 0.52 and 0.49 for 128-token rows over
# a 512-token prefix). Other inputs (a softcap, float32 on CUDA, values narrower than the keys, other devices)
# materialise the scores in float32.
# PLUIE_FUSED_ATTENTION=0 turns both kernels off in a process, fused_attention(False) within a block.
FUSED_OPS = {"cpu": "_scaled_dot_product_flash_attention_for_cpu", "cuda": "_scaled_dot_product_flash_attention"}
_FUSED = {"on": os.environ.get("PLUIE_FUSED_ATTENTION", "1") != "0"}
_BROKEN: dict[str, str] = {}  # device type -> why its fused kernel failed (then the float32 path, with one warning)
_NO_GQA: set[str] = set()  # device types whose fused kernel refused fewer key/value heads (then they are repeated)


class AttentionUnsupported(PluieError, RuntimeError):
    """The shared-prefix function cannot compute this attention exactly (the engine then runs full rows)."""


class WindowExceeded(AttentionUnsupported):
    """This prompt is longer than the model's sliding window: only this prompt must run whole."""


@dataclass
class SharedPrefix:
    """Per-forward state of :func:`shared_prefix_attention`.

    ``kv``: the prefix keys/values of every layer, each (1, kv_heads, prefix, dim), or ``None``
    for rows without a prefix. ``collect``: keep each layer's own keys/values (to build longer
    prefixes from these rows).
    """

    kv: KV | None
    prefix_length: int = 0
    softcap_applies: bool = True  # set by the dispatcher from the wrapped implementation
    calls: int = 0
    collect: bool = False
    collected: KV = field(default_factory=list)


def fused_kernel(device_type: str, dtype: torch.dtype, head_dim: int, softcap: float | None) -> str | None:
    """The fused kernel :func:`partial_attention` uses for these inputs (a key of :data:`FUSED_OPS`), or ``None``
    for the float32 scores.

    Example:
        >>> fused_kernel("cpu", torch.float32, 64, None), fused_kernel("cuda", torch.bfloat16, 128, None)
        ('cpu', 'cuda')
        >>> fused_kernel("cuda", torch.float32, 128, None), fused_kernel("cuda", torch.bfloat16, 128, 50.0)
        (None, None)
    """
    if not _FUSED["on"] or softcap is not None or device_type in _BROKEN or not hasattr(torch.ops.aten, FUSED_OPS.get(device_type, "?")):
        return None
    if device_type == "cuda" and not (dtype in (torch.float16, torch.bfloat16) and head_dim <= 256 and head_dim % 8 == 0):
        return None
    return device_type


@contextmanager
def fused_attention(enabled: bool) -> Iterator[None]:
    """Turn the fused kernels on or off in this process for the block (then back as they were), so that one
    run can time the float32 path beside them (``python -m pluie_reward.tools.bench.gpu`` does). Not for
    concurrent scoring calls: the switch is global.

    Example:
        >>> with fused_attention(False):
        ...     fused_kernel("cpu", torch.float32, 64, None)
        >>> fused_kernel("cpu", torch.float32, 64, None)
        'cpu'
    """
    was, _FUSED["on"] = _FUSED["on"], enabled
    try:
        yield
    finally:
        _FUSED["on"] = was


def partial_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float,
    causal: bool,
    fused: bool | None = None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of ``query`` over ``key``/``value`` and the log-sum-exp of its scores (float32, or
    float64 for float64 inputs).

    Args:
        query, key, value: (batch, heads, length, dim); key/value may have fewer heads, a divisor of the
            query's (grouped-query attention: query head h reads key/value head h // (heads / kv_heads), as
            transformers' ``repeat_kv``; no copy of keys or values per query head).
        scale: the factor on the scores.
        causal: query i sees keys j <= i (mask aligned top-left). A causal call with queries and keys of two lengths
            takes the float32 scores: CUDA's flash kernel aligns such a mask bottom-right (``torch.nn.attention.
            bias``: "for this particular op it means lower right"), the CPU one top-left.
        fused: use PyTorch's fused kernel of the device (default: :func:`fused_kernel`'s choice).
        softcap: Gemma-2 style logit soft-capping ``softcap * tanh(scores / softcap)``.

    Returns:
        ``(output, lse)``: output (batch, heads, q_length, the values' dim) in the query's dtype, lse (batch,
        heads, q_length).

    Example:
        >>> q, k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
        >>> out, lse = partial_attention(q, k, v, 0.5, causal=False, fused=False)
        >>> torch.allclose(out, torch.softmax(q @ k.transpose(-1, -2) * 0.5, -1) @ v, atol=1e-6)
        True
    """
    exact = torch.promote_types(query.dtype, torch.float32)  # float32, or float64 for a float64 model
    device = query.device.type
    if fused is None:  # the fused kernels want one head size for queries, keys and values (not MLA's narrower
        # values), and a causal mask only where its alignment does not matter (as many queries as keys)
        square = not causal or query.shape[-2] == key.shape[-2]
        fused = square and value.shape[-1] == query.shape[-1] and fused_kernel(device, query.dtype, query.shape[-1], softcap) is not None
    if fused:
        kernel = getattr(torch.ops.aten, FUSED_OPS[device])
        gqa = key.shape[1] != query.shape[1]
        if gqa and device in _NO_GQA:
            key, value = (x.repeat_interleave(query.shape[1] // x.shape[1], dim=1) for x in (key, value))
        try:
            out, lse = kernel(query, key, value, dropout_p=0.0, is_causal=causal, scale=scale)[:2]
            return out, lse[..., : query.shape[-2]].to(exact)
        except torch.cuda.OutOfMemoryError:  # (torch.OutOfMemoryError from torch 2.5)
            raise
        except RuntimeError as error:
            if gqa and device not in _NO_GQA:  # a kernel without grouped-query attention: repeat the heads from now on
                _NO_GQA.add(device)
                return partial_attention(query, key, value, scale, causal, fused, softcap)
            # a GPU without the kernel (flash needs sm80+): float32 from now on, said once
            _BROKEN[device] = str(error).splitlines()[0]
            warnings.warn(f"the fused {device} attention kernel failed ({_BROKEN[device]}); shared-prefix attention "
                          "materialises float32 scores instead (slower, the same scores)", RuntimeWarning, stacklevel=2)
    batch, heads, length_q, dim = query.shape
    kv_heads = key.shape[1]  # the query heads of a group share one key/value head: broadcast, not copied
    grouped = query.to(exact).reshape(batch, kv_heads, heads // kv_heads, length_q, dim)
    scores = torch.matmul(grouped, key.to(exact)[:, :, None].transpose(-1, -2)) * scale
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    if causal:
        future = torch.ones(length_q, key.shape[-2], dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse[..., None]), value.to(exact)[:, :, None])
    return out.reshape(batch, heads, length_q, value.shape[-1]).to(query.dtype), lse.reshape(batch, heads, length_q)


def _check_kwargs(module: Any, width: int, state: SharedPrefix, dropout: float, kwargs: dict[str, Any]) -> float | None:
    """Refuse what the shared-prefix function cannot compute exactly; return the softcap to apply.

    Soft-capping is applied only when the wrapped implementation applies it (transformers' SDPA
    function ignores it, its flash and flex functions apply it): the fast path computes what the
    model's own forward computes.
    """
    unknown = sorted(k for k, v in kwargs.items() if k not in HANDLED_KWARGS and v is not None and v is not False)
    if unknown:
        raise AttentionUnsupported(f"the model passes attention arguments {unknown} the shared-prefix path does not handle")
    if dropout:
        raise AttentionUnsupported("attention dropout is active")
    if kwargs.get("output_attentions"):
        raise AttentionUnsupported("attention weights were requested")
    window = kwargs.get("sliding_window")
    if window is not None and state.prefix_length + width > window:
        raise WindowExceeded(f"prompts of {state.prefix_length + width} tokens are longer than the sliding window ({window})")
    if getattr(module, "layer_idx", None) is None:
        raise AttentionUnsupported("attention modules do not carry their layer index")
    return (kwargs.get("softcap") or None) if state.softcap_applies else None


def shared_prefix_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    *,
    pluie_prefix: SharedPrefix,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of right-padded suffix rows over the shared prefix ``pluie_prefix.kv`` plus their own causal past.

    ``query``/``key``/``value`` are the suffix rows, (batch, heads, width, dim); the prefix
    keys/values of this layer are (1, kv_heads, prefix, dim). The attention mask is not used: with
    right padding, real tokens never see a pad (causal), and every real token sees the whole prefix.

    Returns:
        ``(output (batch, width, heads, dim), None)``, the shape transformers' attention functions return.
    """
    batch, heads, width, dim = query.shape
    softcap = _check_kwargs(module, width, pluie_prefix, dropout, kwargs)
    layer = module.layer_idx
    pluie_prefix.calls += 1
    if pluie_prefix.collect:
        if len(pluie_prefix.collected) != layer:
            raise AttentionUnsupported("attention layers ran out of order")
        pluie_prefix.collected.append((key, value))
    kv_heads = key.shape[1]
    if heads % kv_heads:
        raise AttentionUnsupported("unexpected key/value head layout")
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    # suffix part: causal within each row (grouped-query attention without a copy per query head)
    out_suffix, lse_suffix = partial_attention(query, key, value, scale, causal=True, softcap=softcap)
    if pluie_prefix.kv is None:
        return out_suffix.transpose(1, 2).contiguous(), None
    if layer >= len(pluie_prefix.kv):
        raise AttentionUnsupported("more attention layers than cached prefix layers")
    prefix_key, prefix_value = pluie_prefix.kv[layer]
    if prefix_key.shape[1] != kv_heads or prefix_key.shape[0] != 1:
        raise AttentionUnsupported("unexpected prefix key/value layout")
    # prefix part: query head h uses key/value head h // group (as transformers' repeat_kv); the
    # batch and the query heads of a group are folded into the query length
    folded = query.reshape(batch, kv_heads, group, width, dim).transpose(0, 1).reshape(1, kv_heads, -1, dim)
    out_prefix, lse_prefix = partial_attention(folded, prefix_key, prefix_value, scale, causal=False, softcap=softcap)
    out_prefix = out_prefix.reshape(kv_heads, batch, group, width, dim).transpose(0, 1).reshape(batch, heads, width, dim)
    lse_prefix = lse_prefix.reshape(kv_heads, batch, group, width).transpose(0, 1).reshape(batch, heads, width)
    lse = torch.logaddexp(lse_prefix, lse_suffix)
    out = out_prefix * torch.exp(lse_prefix - lse)[..., None].to(out_prefix.dtype)
    out = out + out_suffix * torch.exp(lse_suffix - lse)[..., None].to(out_suffix.dtype)
    return out.transpose(1, 2).contiguous(), None


_INSTALL_LOCK = threading.Lock()


def _wrap(original: Callable) -> Callable:
    try:
        softcap_applies = "softcap" in inspect.signature(original).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        softcap_applies = True

    def pluie_dispatch(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *args: Any, **kwargs: Any) -> Any:
        state = kwargs.pop("pluie_prefix", None)
        if state is None:
            return original(module, query, key, value, attention_mask, *args, **kwargs)
        state.softcap_applies = softcap_applies
        return shared_prefix_attention(module, query, key, value, attention_mask, *args, pluie_prefix=state, **kwargs)

    pluie_dispatch.__wrapped__ = original  # type: ignore[attr-defined]
    pluie_dispatch.pluie_dispatch = True  # type: ignore[attr-defined]
    return pluie_dispatch


PREFIX = "pluie_prefix_"


def register(implementation: str | None) -> str | None:
    """Register the shared-prefix version of attention implementation ``implementation``.

    Adds ``pluie_prefix_<implementation>`` to transformers' ``AttentionInterface`` (the original
    function for calls without ``pluie_prefix``, shared-prefix attention with it) and the original's
    mask function under the same name to ``AttentionMaskInterface``. Nothing registered before is
    replaced. ``"eager"`` has no registered function (each model has its own), so it cannot be
    wrapped: returns ``None`` and the engine runs full rows.

    Args:
        implementation: the model's attention implementation (``config._attn_implementation``).

    Returns:
        The registered name, or ``None`` when it cannot be registered.

    Example:
        >>> register("sdpa")
        'pluie_prefix_sdpa'
        >>> register("eager") is None
        True
    """
    try:
        from transformers import AttentionInterface, AttentionMaskInterface
    except ImportError:  # pragma: no cover - transformers without the attention interfaces
        return None
    if not implementation:
        return None
    if implementation.startswith(PREFIX):
        return implementation
    name = PREFIX + implementation
    with _INSTALL_LOCK:
        functions, masks = AttentionInterface(), AttentionMaskInterface()
        if implementation not in functions or implementation not in masks:
            return None
        if name not in functions:
            AttentionInterface.register(name, _wrap(functions[implementation]))
            AttentionMaskInterface.register(name, masks[implementation])
    return name


@contextmanager
def selected(model: Any, name: str | None) -> Iterator[bool]:
    """Select attention implementation ``name`` on ``model`` for the block (``set_attn_implementation``,
    public) and restore the model's own after. Yields whether the selection took (a model that cannot
    switch implementations keeps its own: the engine then runs full rows).

    Example:
        >>> state = SharedPrefix(None, collect=True)  # no prefix yet: collect these rows' keys/values
        >>> with selected(model, register("sdpa")) as took:
        ...     logits = model(ids, pluie_prefix=state, use_cache=False).logits
        ...     took, model.config._attn_implementation
        (True, 'pluie_prefix_sdpa')
        >>> state.calls, len(state.collected)  # one call per attention layer
        (2, 2)
        >>> model.config._attn_implementation  # restored
        'sdpa'
    """
    base = base_model(model)
    own = getattr(base.config, "_attn_implementation", None)
    if name is None or own == name or not hasattr(base, "set_attn_implementation"):
        yield name is not None and own == name
        return
    base.set_attn_implementation(name)
    try:
        yield getattr(base.config, "_attn_implementation", None) == name
    finally:
        base.set_attn_implementation(own)
