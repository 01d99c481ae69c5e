"""Where a transformers judge lives, and the contexts that make its weights usable for scoring.

* Shared with a PEFT policy (``Judge.from_peft``): the judge IS the policy's base model, scored
  with the adapters disabled (or with a frozen, named judge adapter active, :func:`active_adapter`)
  -- no second copy of the weights; sharded weights are gathered while scoring
  (:func:`gathered_parameters`).
* Offloaded (``Judge.load(..., offload_device="cpu")``): kept on CPU, moved to the accelerator only
  while scoring.
* Separate device: ``Judge.load(name, device="cuda:1")``; with ``accelerate launch`` use
  ``Judge.load(name, device=process_device())`` so each process scores its own slice on its own device.

The :class:`~pluie_reward.engines.transformers.engine.TransformersEngine` applies these around
each scoring call.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

import torch


def process_device() -> torch.device:
    """This process's accelerator under ``accelerate launch`` (or the best local device otherwise).

    Example:
        >>> from pluie_reward import Judge
        >>> judge = Judge.load(device=process_device())  # each process scores on its own GPU (here: CPU)
    """
    from accelerate import PartialState

    return PartialState().device


def belongs_to_adapter(parameter_name: str, adapters: "list[str] | tuple[str, ...]") -> bool:
    """Whether a parameter name is one of the given PEFT adapters' weights.

    PEFT names adapter weights ``....<tuner>.<adapter>.weight`` (``lora_A.default.weight``,
    ``modules_to_save.default.weight``), so an adapter's name appears as a dotted segment.

    Example:
        >>> belongs_to_adapter("base_model.model.layers.0.q_proj.lora_A.default.weight", ["default"])
        True
        >>> belongs_to_adapter("base_model.model.layers.0.q_proj.base_layer.weight", ["default"])
        False
    """
    segments = parameter_name.split(".")
    return any(adapter in segments[:-1] for adapter in adapters)


@contextmanager
def gathered_parameters(model: Any, wrapped: Any = None) -> Iterator[None]:
    """Make a sharded model's full weights available for a forward pass outside the training step.

    DeepSpeed ZeRO-3 parameters (they carry ``ds_id``) are gathered with
    ``deepspeed.zero.GatheredParameters``, as TRL does for generation; FSDP v1 modules (``model``
    itself, its submodules, or ``wrapped``, e.g. ``trainer.model_wrapped``) with
    ``FSDP.summon_full_params(writeback=False)``. FSDP v2 (``fully_shard``) and unsharded models need
    nothing: their forward gathers by itself.

    Example:
        >>> with gathered_parameters(model):  # unsharded here: nothing to gather
        ...     logits = model(ids).logits
    """
    sharded = [p for p in model.parameters() if hasattr(p, "ds_id")]
    with ExitStack() as stack:
        if sharded:
            import deepspeed

            stack.enter_context(deepspeed.zero.GatheredParameters(sharded, modifier_rank=None))
        for root in [] if sharded else _fsdp1_roots(wrapped if wrapped is not None else model):
            stack.enter_context(type(root).summon_full_params(root, recurse=True, writeback=False))  # FSDP v1's static method
        yield


def _fsdp1_roots(model: Any) -> list[Any]:
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:  # pragma: no cover - torch without distributed
        return []
    roots, seen = [], set()
    for module in model.modules():
        if isinstance(module, FSDP) and id(module) not in seen:
            roots.append(module)
            seen.update(id(m) for m in module.modules())
    return roots


@contextmanager
def active_adapter(model: Any, name: str) -> Iterator[None]:
    """Activate PEFT adapter ``name`` (frozen) and restore the previous adapter and every ``requires_grad``.

    Example:
        >>> with active_adapter(policy, "judge"):
        ...     logits = policy(ids).logits
        ...     policy.active_adapter
        'judge'
        >>> policy.active_adapter  # the policy's own again
        'default'
    """
    previous = model.active_adapter
    flags = [(p, p.requires_grad) for p in model.parameters()]
    model.set_adapter(name, inference_mode=True)
    try:
        yield
    finally:
        model.set_adapter(previous)
        for parameter, flag in flags:
            parameter.requires_grad_(flag)
