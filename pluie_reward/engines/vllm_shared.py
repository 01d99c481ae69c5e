"""The judge inside a vLLM engine somebody else owns: a trainer's rollout ``vllm.LLM`` (TRL's
colocate mode keeps one per process), read with the base weights or with a judge LoRA adapter
through vLLM's multi-LoRA. No second copy of the weights, no second KV cache.

The answers are read exactly as :class:`~pluie_reward.engines.vllm.VLLMEngine` reads them
(:func:`~pluie_reward.engines.vllm.reading_jobs`: one greedy step, ``logprob_token_ids`` = the
answers' ids).

**Whose weights?** When the trainer syncs the policy's weights into the rollout engine (TRL's colocate
and server modes push the *merged* policy before each generation), the engine *is* the policy. So the
engine reads a fixed *canary* at binding (a prompt shorter than a KV block, never served from the prefix
cache, and the log-probabilities of 16 fixed tokens after it) and again before each scoring call.

* ``weights="base"`` (default): the judge is the model as it was when bound (with ``lora``, the
  adapter on that model). If the canary moved, scoring raises :class:`EngineWeightsChanged`
  instead of returning the policy's opinion as the judge's.
* ``weights="current"``: the judge is whatever the engine holds now (self-judging, or a judge
  that follows the policy on purpose). The canary reading is the result cache's key, so cached
  scores never outlive a weight sync.

A sleeping engine (``enable_sleep_mode``: TRL's ``vllm_enable_sleep_mode`` puts it to sleep level
2 after generating, discarding the weights) raises :class:`EngineAsleep`. A weight change too small
to move any of the canary's log-probabilities by more than ``canary_tolerance`` is not seen.

Its owner closes the engine. vLLM's ``LLM`` is synchronous: call the judge from the thread that drives
the trainer (rewards do). Needs vLLM.

Example:
    >>> llm = trainer.vllm_generation.llm  # needs a GRPO trainer running vLLM  # doctest: +SKIP
    >>> judge = Judge.from_vllm(llm, lora="pluie_reward/judges/smollm2-pluie")   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import itertools
import json
from pathlib import Path
from typing import Any, Hashable, Iterator, Sequence

from ..common.errors import PluieError
from .base import Engine, Request
from .vllm import read_answers, reading_jobs, reading_params

WEIGHT_MODES = ("base", "current")
CANARY_TEXT = "Judge canary: is this engine still the model it was?"
CANARY_PROMPT_TOKENS = 8  # under vLLM's smallest KV block (16 on GPU): never a prefix-cache hit
CANARY_READ_TOKENS = 16
_lora_ids = itertools.count(1 << 20)  # high ids, out of the way of a trainer's own adapters


class EngineWeightsChanged(PluieError, RuntimeError):
    """The shared engine's weights changed since the judge was bound (``weights="base"``)."""


class EngineAsleep(PluieError, RuntimeError):
    """The shared engine is asleep: its weights are discarded or offloaded."""


def _lora_request(lora: Any, llm: Any) -> Any:
    """A ``vllm.lora.request.LoRARequest`` for ``lora`` (a PEFT adapter folder or a request), after
    checking that ``llm`` was built to serve it."""
    from vllm.lora.request import LoRARequest

    config = getattr(llm.llm_engine.vllm_config, "lora_config", None)
    if config is None:
        raise ValueError(
            "the judge's LoRA adapter needs an engine built with LoRA enabled: "
            "vllm.LLM(..., enable_lora=True, max_lora_rank=<the adapter's r or more>)."
        )
    if isinstance(lora, LoRARequest):
        return lora
    path = Path(lora)
    card = path / "adapter_config.json"
    if not card.is_file():
        raise FileNotFoundError(f"{path}: not a PEFT adapter folder (no adapter_config.json).")
    rank = int(json.loads(card.read_text(encoding="utf-8")).get("r", 0))
    if rank > config.max_lora_rank:
        raise ValueError(f"{path}: the adapter's rank {rank} is above the engine's max_lora_rank={config.max_lora_rank}; "
                         f"build the LLM with max_lora_rank={rank} or more.")
    return LoRARequest(lora_name=f"pluie-judge-{path.name}", lora_int_id=next(_lora_ids), lora_path=str(path.resolve()))


class SharedVLLMEngine(Engine):
    """A judge reading a ``vllm.LLM`` it does not own (see the module docstring).

    Args:
        llm: the ``vllm.LLM`` instance (e.g. ``trainer.vllm_generation.llm`` in TRL's colocate mode).
        tokenizer: the tokenizer to render prompts with (default: the engine's).
        lora: a PEFT LoRA adapter folder (or a ``LoRARequest``) to judge with, through vLLM's
            multi-LoRA (the LLM needs ``enable_lora=True``); ``None``: the engine's weights.
        weights: ``"base"`` (the weights as bound; a change raises :class:`EngineWeightsChanged`) or
            ``"current"`` (whatever the engine holds at each call).
        canary_tolerance: the largest canary log-probability change taken as numerical noise.

    Raises:
        TypeError: ``llm`` is not a ``vllm.LLM``.
        ValueError: an unknown ``weights``, or ``lora`` on an engine without LoRA.
    """

    batch_tokens = 8192  # a hint for callers sizing their calls: vLLM batches itself

    def __init__(self, llm: Any, *, tokenizer: Any = None, lora: Any = None, weights: str = "base",
                 canary_tolerance: float = 1e-4) -> None:
        if not (hasattr(llm, "llm_engine") and hasattr(llm, "generate")):
            raise TypeError(f"Judge.from_vllm needs a vllm.LLM (the engine a trainer generates with), got {type(llm).__name__}.")
        if weights not in WEIGHT_MODES:
            raise ValueError(f"weights={weights!r}: use 'base' (the model as bound) or 'current' (whatever the engine holds).")
        if canary_tolerance < 0:
            raise ValueError("canary_tolerance must be >= 0.")
        self.llm = llm
        self.tokenizer = tokenizer if tokenizer is not None else llm.get_tokenizer()
        self.weights = weights
        self.canary_tolerance = canary_tolerance
        self.lora = _lora_request(lora, llm) if lora is not None else None
        self.logits_only = llm.llm_engine.model_config.logprobs_mode in ("raw_logits", "processed_logits")
        ids = self.tokenizer(CANARY_TEXT, add_special_tokens=False)["input_ids"]
        most = int(llm.llm_engine.model_config.max_logprobs)  # -1: no limit
        reads = CANARY_READ_TOKENS if most < 0 else max(1, min(CANARY_READ_TOKENS, most))
        self._canary = (list(ids[:CANARY_PROMPT_TOKENS]), list(range(100, 100 + reads)))
        self._check_awake()
        self.bound_canary = self.read_canary()
        self.stats = {"requests": 0}

    # state ------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """``vllm-shared:<model>`` (``+<adapter>`` with a LoRA adapter)."""
        model = self.llm.llm_engine.model_config.model
        return f"vllm-shared:{model}" + (f"+{Path(self.lora.lora_path).name}" if self.lora is not None else "")

    @property
    def max_length(self) -> int | None:
        """The engine's context length."""
        return int(self.llm.llm_engine.model_config.max_model_len)

    def _check_awake(self) -> None:
        if self.llm.llm_engine.is_sleeping():
            raise EngineAsleep(
                "the shared vLLM engine is asleep (enable_sleep_mode: its weights are discarded or offloaded between "
                "generations; TRL's vllm_enable_sleep_mode=True does this): judge with a separate engine, or turn sleep mode off."
            )

    def read_canary(self) -> tuple[float, ...]:
        """The log-probabilities of the canary tokens after the canary prompt, read now (base weights,
        never the adapter: the adapter file does not change, the engine's weights may)."""
        prompt, tokens = self._canary
        (out,) = self.llm.generate([{"prompt_token_ids": prompt}], reading_params(tokens), use_tqdm=False)
        return tuple(float(out.outputs[0].logprobs[0][t].logprob) for t in tokens)

    def weights_changed(self) -> float:
        """The largest change of a canary log-probability since binding (0.0: unchanged)."""
        return max(abs(a - b) for a, b in zip(self.read_canary(), self.bound_canary))

    @contextlib.contextmanager
    def session(self) -> Iterator[Hashable]:
        """Checks the engine is awake and, with ``weights="base"``, that its weights are the bound ones.
        Yields the canary reading (``"current"``) or a constant (``"base"``) as the cache's state.

        Raises:
            EngineAsleep: the engine sleeps.
            EngineWeightsChanged: ``weights="base"`` and the weights changed since binding.
        """
        self._check_awake()
        if self.weights == "current":
            yield self.read_canary()
            return
        moved = self.weights_changed()
        if moved > self.canary_tolerance:
            raise EngineWeightsChanged(
                f"the shared vLLM engine's weights changed since the judge was bound (canary moved by {moved:.3g}): a trainer "
                "synced the policy into it, so the judge's base model is gone. Judge with a separate engine "
                "(Judge.load(..., engine='vllm') or Judge.connect(url)), keep the base fixed (a LoRA policy applied through "
                "vLLM's multi-LoRA), or pass weights='current' to judge with whatever the engine holds."
            )
        yield 0

    # the engine protocol ------------------------------------------------------------------------
    def _outputs(self, jobs: Sequence[tuple[list[int], list[int]]]) -> list[Any]:
        if not jobs:
            return []
        outs = self.llm.generate([{"prompt_token_ids": ids} for ids, _ in jobs], [reading_params(t) for _, t in jobs],
                                 use_tqdm=False, lora_request=self.lora)
        self.stats["requests"] += len(jobs)
        return [o.outputs[0] for o in outs]

    def answer_logprobs(
        self, requests: Sequence[Request], answers: Sequence[Sequence[int]], *, prefix: Sequence[int] = ()
    ) -> list[list[float]]:
        """``log p(answer_k | ids)`` per request (see :mod:`.base`); raw logits when the engine runs in
        a logits ``logprobs_mode`` (one-token answers only)."""
        if self.logits_only and any(len(a) > 1 for a in answers):
            raise ValueError(
                "this engine returns logits (logprobs_mode='raw_logits'/'processed_logits'): multi-token answers need "
                "log-probabilities; build the LLM with logprobs_mode='raw_logprobs' or 'processed_logprobs'."
            )
        return read_answers(len(requests), answers, self._outputs(reading_jobs(requests, answers)))

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int] = ()) -> list[list[int]]:
        """Greedy continuations (the judge's own turn of INDIRECT templates), with the judge's adapter."""
        from vllm import SamplingParams

        if not prompts:
            return []
        params = SamplingParams(max_tokens=max_new_tokens, temperature=0.0, stop_token_ids=list(stop_ids) or None)
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False, lora_request=self.lora)
        return [list(o.outputs[0].token_ids) for o in outs]

    def clear(self) -> None:
        """Drop the engine's prefix cache (shared with its owner, who loses nothing but cache hits)."""
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Nothing to release: the engine belongs to its owner (e.g. the trainer)."""

    def __repr__(self) -> str:
        return f"SharedVLLMEngine({self.name!r}, weights={self.weights!r})"
