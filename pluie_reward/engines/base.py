"""The engine protocol: what :class:`~pluie_reward.Judge` asks of the thing that runs the model.

:meth:`Judge.score <pluie_reward.Judge.score>` owns everything about a template -- rendering,
answer-token validation, field checks, truncation, the result cache, details and thresholds. An
engine only turns prompt token ids into the log-probabilities of the template's answers, like
lm-eval's ``LM.loglikelihood`` contract: given ``(context, continuation)`` token ids, return
``log p(continuation | context)``.

Contract of :meth:`Engine.answer_logprobs`:

* ``requests[i].ids`` is a complete prompt, token ids exactly as the model reads them (BOS and
  chat markup included), ending where the answer starts. Engines never re-tokenize.
* ``answers`` is the list of the template's N >= 2 answers, each a non-empty tuple of token ids,
  the same for every request of the call.
* The result is one list of N floats per request, in request order: ``log p(answer_k | ids)``
  (teacher-forced sum over the answer's tokens). When every answer is a single token, an engine
  may return values that differ from the log-probabilities by a constant shared by the N answers
  of one request (e.g. raw logits): the judge only uses differences and the softmax over the N
  answers. When any answer has several tokens the values must be exact log-probabilities.
* Results must not depend on batching, ordering, padding or caching beyond floating-point noise,
  and must be finite (the judge raises on non-finite values).
* ``prefix`` (a token prefix most requests share) and ``Request.group`` (requests sharing a longer
  prefix) are caching hints; ignoring them must not change results.

:meth:`Engine.session` is entered around each scoring call: it yields a hashable *state* that changes
whenever results for the same ids may change (the judge keys its result cache on it).
:meth:`Engine.generate` is greedy decoding, for templates with a judge-generated turn.

An engine subclasses :class:`Engine`, implements the three abstract methods and overrides what it does
differently (the async methods and ``concurrent = True`` when it batches concurrent requests itself).
``pluie_reward.testing.check_engine`` is the conformance suite every engine passes.

Example:
    >>> class Constant(Engine):
    ...     name, tokenizer, max_length = "constant", None, None
    ...     def session(self): return contextlib.nullcontext(0)
    ...     def answer_logprobs(self, requests, answers, *, prefix=()):
    ...         return [[-0.5] * len(answers) for _ in requests]
    ...     def generate(self, prompts, *, max_new_tokens, stop_ids=()): return [[] for _ in prompts]
    >>> engine = Constant()
    >>> asyncio.run(engine.aanswer_logprobs([Request((1, 2))], [(5,), (6,)]))
    [[-0.5, -0.5]]
    >>> engine.concurrent, engine.device
    (False, None)
"""

from __future__ import annotations

import abc
import asyncio  # noqa: F401  (used by the doctest)
import contextlib  # noqa: F401  (used by the doctest)
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, ContextManager, Hashable, Mapping, Sequence


@dataclass(frozen=True)
class Request:
    """One prompt to read the answers after.

    Args:
        ids: the prompt's token ids, ending where the answer starts.
        group: requests with equal (non-None) groups differ only after a long shared prefix.
    """

    ids: tuple[int, ...]
    group: Hashable | None = None


class Engine(abc.ABC):
    """Runs a causal LM for a :class:`~pluie_reward.Judge` (see the module docstring for the contract).

    Attributes:
        name: a short description for reprs and logs.
        tokenizer: the tokenizer whose ids the engine reads (the judge renders with it).
        max_length: the context length in tokens, or ``None`` if unknown.
        concurrent: ``True`` when the engine batches concurrent calls itself (its async methods are
            awaited side by side); ``False``: the judge runs one call at a time, async calls in a thread.
        model: the model object in this process (``None`` for engines whose model lives elsewhere).
        batch_tokens: a hint for callers sizing their calls (tokens per call worth sending at once).
        stats: counters for the judge server's ``/metrics`` (e.g. ``requests``, ``forward_passes``).
    """

    name: str
    tokenizer: Any
    max_length: int | None
    concurrent: ClassVar[bool] = False
    model: Any = None
    batch_tokens: int = 512
    stats: Mapping[str, Any] = MappingProxyType({})

    @abc.abstractmethod
    def session(self) -> ContextManager[Hashable]:
        """Context entered around one scoring call; yields the state results depend on."""

    @abc.abstractmethod
    def answer_logprobs(
        self, requests: Sequence[Request], answers: Sequence[Sequence[int]], *, prefix: Sequence[int] = ()
    ) -> list[list[float]]:
        """``log p(answer_k | request.ids)`` for every request and answer (see the contract)."""

    @abc.abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int] = ()) -> list[list[int]]:
        """Greedy continuation ids of each prompt, at most ``max_new_tokens``, cut after a stop id."""

    async def aanswer_logprobs(
        self, requests: Sequence[Request], answers: Sequence[Sequence[int]], *, prefix: Sequence[int] = ()
    ) -> list[list[float]]:
        """:meth:`answer_logprobs`, awaitable. Default: the synchronous method, in the caller's thread (a
        session may be bound to its thread); engines with ``concurrent = True`` override it."""
        return self.answer_logprobs(requests, answers, prefix=prefix)

    async def agenerate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int] = ()) -> list[list[int]]:
        """:meth:`generate`, awaitable (default: the synchronous method, in the caller's thread)."""
        return self.generate(prompts, max_new_tokens=max_new_tokens, stop_ids=stop_ids)

    def clear(self) -> None:
        """Drop the engine's own caches (prefix caches); :meth:`Judge.clear_cache` calls it. Default: none."""

    def close(self) -> None:
        """Release processes and connections (idempotent). Default: nothing to release."""

    @property
    def device(self) -> Any:
        """Where the model computes in this process (``None``: the engine places it itself)."""
        return None

    def to(self, device: Any) -> "Engine":
        """Move the model to ``device``; only engines holding a model in this process can."""
        raise NotImplementedError(
            f"{type(self).__name__} places its model itself and cannot move it; choose the placement when creating it "
            "(e.g. tensor_parallel_size / CUDA_VISIBLE_DEVICES for vLLM, the server's own GPUs for remote)."
        )

    def attach(self, trainer: Any) -> "Engine":
        """Let the engine gather a trainer's sharded parameters; only engines sharing a policy's weights need it."""
        raise NotImplementedError(f"{type(self).__name__} does not share a trainer's weights: there is nothing to attach.")

