"""Where the judge lives: shared with a PEFT policy, offloaded to CPU between calls, or on its own device.

* :class:`SharedJudge` (``Judge.from_peft``): the judge IS the policy's base model, scored with the
  adapters disabled (or with a frozen, named judge adapter active) -- no second copy of the weights.
* :class:`OffloadedJudge`: a separate judge kept on CPU and moved to the accelerator only while scoring.
* Separate device: ``Judge.load(name, device="cuda:1")``; with ``accelerate launch`` use
  ``Judge.load(name, device=process_device())`` so each process scores its own slice on its own device.

All of them score through :meth:`Judge.score`; they only add a context around it.
"""

from __future__ import annotations

import warnings
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from ..core.judge import Judge
from ..engines.transformers.loading import EMBEDDED_NAME, load_model_and_tokenizer, resolve_device
from ..engines.transformers.model_state import weights_fingerprint


def process_device() -> torch.device:
    """This process's accelerator under ``accelerate launch`` (or the best local device otherwise).

    Example:
        >>> judge = Judge.load("Qwen/Qwen2.5-7B-Instruct", device=process_device())  # doctest: +SKIP
    """
    from accelerate import PartialState

    return PartialState().device


def adapter_names(model: Any) -> list[str]:
    """Names of the PEFT adapters loaded on ``model`` (empty for a plain model).

    Example:
        >>> adapter_names(peft_model)  # doctest: +SKIP
        ['default', 'judge']
    """
    return list(getattr(model, "peft_config", None) or {})


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
        >>> with gathered_parameters(model):  # doctest: +SKIP
        ...     logits = model(ids).logits
    """
    sharded = [p for p in model.parameters() if hasattr(p, "ds_id")]
    if sharded:
        import deepspeed

        with deepspeed.zero.GatheredParameters(sharded, modifier_rank=None):
            yield
        return
    roots = _fsdp1_roots(wrapped if wrapped is not None else model)
    if not roots:
        yield
        return
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with ExitStack() as stack:
        for root in roots:
            stack.enter_context(FSDP.summon_full_params(root, recurse=True, writeback=False))
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
        >>> with active_adapter(policy, "judge"):  # doctest: +SKIP
        ...     logits = policy(ids).logits
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


class SharedJudge(Judge):
    """A judge that shares the policy's weights: the PEFT policy with its adapters disabled (the base
    model) or with a frozen judge adapter active, while scoring.

    Each call remembers the training flags, the active adapter and ``requires_grad`` flags, switches
    to eval + ``torch.inference_mode`` + judge weights in their own dtype (no mixed-precision
    autocast), scores, and restores them exactly. Gradient checkpointing stays configured (it only
    acts in training mode). Caches are invalidated only when the judge's own weights change (the
    base, and the judge adapter), not on every policy update.

    Example:
        >>> policy = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM"))  # doctest: +SKIP
        >>> judge = Judge.from_peft(policy, tokenizer)                        # doctest: +SKIP
        >>> judge.score("para-fs", source=["S"], hypothesis=["H"])             # doctest: +SKIP
    """

    def __init__(self, policy_model: Any, tokenizer: Any, *, adapter_name: str | None = None, **judge_kwargs: Any) -> None:
        if not hasattr(policy_model, "disable_adapter") or not hasattr(policy_model, "peft_config"):
            raise TypeError(
                f"Judge.from_peft needs a PEFT model (peft.PeftModel, e.g. from get_peft_model); got "
                f"{type(policy_model).__name__}. For a plain model use Judge.from_model (a separate judge)."
            )
        adapters = adapter_names(policy_model)
        if adapter_name is not None and adapter_name not in adapters:
            raise ValueError(
                f"adapter {adapter_name!r} is not loaded on the policy (adapters: {adapters}); load it with "
                f"policy.load_adapter(path, adapter_name={adapter_name!r}, is_trainable=False)."
            )
        others = tuple(a for a in adapters if a != adapter_name)
        self.adapter_name = adapter_name
        self.wrapped_model: Any = None
        judge_kwargs.setdefault("name", f"shared:{adapter_name or 'base'}")
        super().__init__(
            policy_model,
            tokenizer,
            disable_adapters=adapter_name is None,
            weight_filter=lambda n: not belongs_to_adapter(n, others),
            **judge_kwargs,
        )
        if adapter_name is not None:
            for n, p in policy_model.named_parameters():
                if belongs_to_adapter(n, (adapter_name,)):
                    p.requires_grad_(False)
        if any(p.requires_grad for p in self._watched):
            warnings.warn(
                "Judge.from_peft: some of the judge's weights (the policy's base model) are trainable, so the "
                "judge changes as the policy trains. Train only adapters (e.g. LoRA) to keep the judge frozen.",
                stacklevel=3,
            )

    def attach(self, trainer: Any) -> "SharedJudge":
        """Remember ``trainer.model_wrapped`` so FSDP v1 full parameters can be summoned for scoring.

        Example:
            >>> judge.attach(trainer)  # doctest: +SKIP
        """
        self.wrapped_model = trainer.model_wrapped
        return self

    def score(self, template: Any = None, **kwargs: Any) -> Any:
        """:meth:`Judge.score` on the shared weights (see the class docstring)."""
        with ExitStack() as stack:
            stack.enter_context(gathered_parameters(self.model, self.wrapped_model))
            if self.adapter_name is not None:
                stack.enter_context(active_adapter(self.model, self.adapter_name))
            return super().score(template, **kwargs)


class OffloadedJudge(Judge):
    """A separate judge kept on ``offload_device`` (CPU) and moved to ``device`` only while scoring.

    The prefix key/value cache lives on the scoring device, so it is cleared after each call;
    cached results are kept.

    Example:
        >>> judge = OffloadedJudge.load("Qwen/Qwen2.5-7B-Instruct", device="cuda", dtype="bfloat16")  # doctest: +SKIP
        >>> judge.score("para-fs", source=["S"], hypothesis=["H"])                                 # doctest: +SKIP
    """

    def __init__(
        self, model: Any, tokenizer: Any, *, device: Any = None, offload_device: Any = "cpu", **judge_kwargs: Any
    ) -> None:
        self.device = resolve_device(device)
        self.offload_device = torch.device(offload_device)
        model.to(self.offload_device)
        super().__init__(model, tokenizer, **judge_kwargs)

    @classmethod
    def load(  # type: ignore[override]
        cls,
        model: "str | Path | None" = None,
        *,
        device: Any = None,
        offload_device: Any = "cpu",
        dtype: Any = None,
        model_kwargs: dict | None = None,
        **judge_kwargs: Any,
    ) -> "OffloadedJudge":
        """Load a judge straight onto ``offload_device``; it visits ``device`` only while scoring."""
        lm, tokenizer = load_model_and_tokenizer(model, device=offload_device, dtype=dtype, **(model_kwargs or {}))
        judge_kwargs.setdefault("name", EMBEDDED_NAME if model is None else str(model))
        return cls(lm, tokenizer, device=device, offload_device=offload_device, **judge_kwargs)

    def _move(self, device: torch.device) -> None:
        """Move the weights; moving changes storage, not values, so keep the result cache valid."""
        self.model.to(device)
        self._fingerprint = weights_fingerprint(self._watched)

    def score(self, template: Any = None, **kwargs: Any) -> Any:
        """:meth:`Judge.score` with the model on ``device`` for the duration of the call."""
        self._invalidate_if_weights_changed()  # real weight changes are detected before the move
        self._move(self.device)
        try:
            return super().score(template, **kwargs)
        finally:
            self.scorer.clear()
            self._move(self.offload_device)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()


def move_judge(judge: Judge, device: Any) -> Judge:
    """Put a (separate) judge on another device, e.g. a second GPU, dropping its prefix cache.

    Example:
        >>> judge = move_judge(Judge.load(), "cuda:1")  # doctest: +SKIP
    """
    judge.model.to(resolve_device(device))
    judge.scorer.clear()
    return judge
