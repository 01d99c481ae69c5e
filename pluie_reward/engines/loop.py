"""What the vLLM and remote engines share: their requests are coroutines run on a private event
loop thread, so that synchronous callers (:meth:`~pluie_reward.Judge.score`) and asynchronous ones
(:meth:`~pluie_reward.Judge.ascore`, the judge server) reach one engine or HTTP client, whose
continuous batching then groups concurrent calls.

A subclass starts the loop (:meth:`LoopEngine._start_loop`) and implements two coroutines,
``_answers(requests, answers)`` and ``_generate(prompts, max_new_tokens, stop_ids)``; the engine
protocol's methods (:mod:`.base`) come from here.

Example:
    >>> class Echo(LoopEngine):
    ...     def __init__(self):
    ...         self._start_loop("echo")
    ...     async def _answers(self, requests, answers):
    ...         return [[float(len(r.ids))] * len(answers) for r in requests]
    ...     async def _generate(self, prompts, max_new_tokens, stop_ids):
    ...         return [list(p[:max_new_tokens]) for p in prompts]
    >>> engine = Echo()
    >>> engine.answer_logprobs([Request((1, 2, 3))], [(5,), (6,)])
    [[3.0, 3.0]]
    >>> engine.generate([[7, 8, 9]], max_new_tokens=2)
    [[7, 8]]
    >>> engine._stop_loop()
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, Coroutine, Hashable, Iterator, Sequence

from .base import Engine, Request


class LoopEngine(Engine):
    """Base of engines whose work is asynchronous (see the module docstring): they batch concurrent calls."""

    concurrent = True

    _loop: asyncio.AbstractEventLoop
    _thread: threading.Thread

    def _start_loop(self, name: str) -> None:
        """Start the private event loop in a daemon thread called ``pluie-<name>``."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"pluie-{name}", daemon=True)
        self._thread.start()

    def _run(self, coroutine: Coroutine) -> Any:
        """Run a coroutine on the engine's loop and wait for it (from any thread but the loop's)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _await(self, coroutine: Coroutine) -> Any:
        """Await a coroutine of the engine's loop from another event loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    def _stop_loop(self) -> None:
        """Stop the loop and its thread (idempotent)."""
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    async def _answers(self, requests: Sequence[Request], answers: Sequence[Sequence[int]]) -> list[list[float]]:
        raise NotImplementedError

    async def _generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: Sequence[int]) -> list[list[int]]:
        raise NotImplementedError

    @contextlib.contextmanager
    def session(self) -> Iterator[Hashable]:
        """Scoring state: the served weights are taken as fixed, so the state is constant."""
        yield 0

    def answer_logprobs(
        self, requests: Sequence[Request], answers: Sequence[Sequence[int]], *, prefix: Sequence[int] = ()
    ) -> list[list[float]]:
        """``log p(answer_k | ids)`` per request (up to a per-request constant for one-token answers); see :mod:`.base`."""
        return self._run(self._answers(requests, answers))

    async def aanswer_logprobs(
        self, requests: Sequence[Request], answers: Sequence[Sequence[int]], *, prefix: Sequence[int] = ()
    ) -> list[list[float]]:
        """:meth:`answer_logprobs`, awaitable from any event loop (batched with concurrent calls)."""
        return await self._await(self._answers(requests, answers))

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int] = ()) -> list[list[int]]:
        """Greedy continuations (each prompt independent of the others)."""
        return self._run(self._generate(prompts, max_new_tokens, stop_ids))

    async def agenerate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int] = ()) -> list[list[int]]:
        """:meth:`generate`, awaitable from any event loop."""
        return await self._await(self._generate(prompts, max_new_tokens, stop_ids))
