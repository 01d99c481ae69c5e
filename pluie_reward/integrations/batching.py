"""How the server turns concurrent requests into scoring calls.

* :class:`Batcher` (the transformers engine): requests are queued in arrival order; one worker
  thread takes the oldest, waits up to ``max_wait_ms`` for more (or until the batch is full by item
  count or by token estimate), concatenates their fields, calls ``Judge.score`` once and hands each
  request its own slice of the results. One worker owns the judge, so its result cache and prefix
  caches serve every request.
* :class:`Direct` (engines that batch by themselves: vLLM's continuous batching, remote vLLM
  servers): each request is one ``await Judge.ascore(...)``; the engine interleaves them. No second
  batcher sits in front of vLLM's.

Both expose ``await scorer.score(fields)``, ``start``, ``close``, ``pending``, ``bound``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..core.errors import PluieError
from ..core.plan import ScoringPlan


class ShuttingDown(PluieError, RuntimeError):
    """The batcher no longer accepts requests (the server is stopping)."""


class ScoringError(PluieError):
    """``Judge.score`` failed on a request; ``client_error`` says whether the request was at fault."""

    def __init__(self, message: str, client_error: bool) -> None:
        super().__init__(message)
        self.client_error = client_error


@dataclass
class _Job:
    plan: ScoringPlan
    tokens: int
    future: Future = field(default_factory=Future)
    enqueued: float = field(default_factory=time.monotonic)


class Batcher:
    """One judge, one template, one worker thread; many concurrent callers.

    Args:
        judge: a :class:`~pluie_reward.Judge`; only this batcher's worker may use it while running.
        template: template name, YAML path or Template (validated against the judge at construction).
        max_batch_items: coalesce at most this many items into one ``Judge.score`` call.
        max_batch_tokens: ... and at most about this many field tokens (a request larger than the
            limits is run alone; the judge splits it further by its own ``batch_tokens``).
        max_wait_ms: how long the oldest queued request may wait for company.
        threshold: verdict = logratio > threshold (default: the judge's).
        truncate: passed to ``Judge.score`` (False: over-long items fail their request).
        on_batch: called with (items, requests) after each ``Judge.score`` call (metrics).

    Example:
        >>> batcher = Batcher(judge, "para-fs", max_wait_ms=5).start()
        >>> batcher.submit({"source": ["a"], "hypothesis": ["b"]}).result()
        [{'logratio': ..., 'p_yes': ..., 'verdict': ...}]
        >>> batcher.close()
    """

    def __init__(
        self,
        judge: Any,
        template: Any = None,
        *,
        max_batch_items: int = 256,
        max_batch_tokens: int = 32_768,
        max_wait_ms: float = 5.0,
        threshold: float | None = None,
        truncate: bool = True,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> None:
        if max_batch_items < 1 or max_batch_tokens < 1:
            raise ValueError("max_batch_items and max_batch_tokens must be at least 1.")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}.")
        self.judge = judge
        self.template = template
        self.bound = judge.bind(template)  # fails now (not on the first request) for a bad template
        self.max_batch_items = max_batch_items
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.threshold = threshold
        self.truncate = truncate
        self.on_batch = on_batch
        self._pending: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None

    # callers ---------------------------------------------------------------------------------
    @property
    def fields(self) -> tuple[str, ...]:
        """Required template fields."""
        return self.bound.template.fields

    @property
    def optional_fields(self) -> tuple[str, ...]:
        """Optional template fields."""
        return self.bound.template.optional_fields

    @property
    def pending(self) -> tuple[int, int]:
        """(requests, items) waiting in the queue."""
        with self._cond:
            return len(self._pending), sum(job.plan.n for job in self._pending)

    def submit(self, fields: Mapping[str, Any]) -> Future:
        """Queue one request; its future resolves to one ``{"logratio", "p_yes", "verdict"}`` per item.

        Bad fields raise ``ValueError``/``TypeError`` here, before queueing. The future fails with
        :class:`ScoringError` if the judge rejects the request (e.g. too long with ``truncate=False``).
        """
        plan = self._plan(fields)
        job = _Job(plan, self._estimate_tokens(plan))
        if plan.n == 0:
            job.future.set_result([])
            return job.future
        with self._cond:
            if self._closing or self._thread is None:
                raise ShuttingDown("the judge server is not running (shutting down); retry on another server.")
            self._pending.append(job)
            self._cond.notify()
        return job.future

    async def score(self, fields: Mapping[str, Any]) -> list[dict[str, Any]]:
        """:meth:`submit` and wait for the result without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(fields))

    def _plan(self, fields: Mapping[str, Any]) -> ScoringPlan:
        """The request's scoring plan (bad fields raise ``ValueError``/``TypeError``/``KeyError`` here)."""
        return self.judge.plan(self.template, details=True, threshold=self.threshold, truncate=self.truncate, **fields)

    def _estimate_tokens(self, plan: ScoringPlan) -> int:
        # field characters / 4 + the prompt's own tokens: cheap, only used to bound batch sizes
        chars = sum(len(v) for column in plan.columns.values() for v in column if v)
        return chars // 4 + plan.n * (len(self.bound.prefix_ids) + 16)

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> "Batcher":
        """Start the worker thread (idempotent)."""
        with self._cond:
            if self._thread is None:
                self._closing = False
                self._thread = threading.Thread(target=self._work, name="pluie-batcher", daemon=True)
                self._thread.start()
        return self

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting requests, finish every queued one, then stop the worker."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if not thread.is_alive():
                self._thread = None

    # worker ----------------------------------------------------------------------------------
    def _next_batch(self) -> list[_Job] | None:
        with self._cond:
            while not self._pending and not self._closing:
                self._cond.wait()
            if not self._pending:
                return None  # closing and drained
            deadline = self._pending[0].enqueued + self.max_wait
            while True:
                count, full = self._fitting()
                remaining = deadline - time.monotonic()
                if full or self._closing or remaining <= 0:
                    break
                self._cond.wait(remaining)
            taken = [self._pending.popleft() for _ in range(count)]
        # a caller that gave up (cancelled its future) is skipped; the others can no longer be cancelled
        return [job for job in taken if job.future.set_running_or_notify_cancel()]

    def _fitting(self) -> tuple[int, bool]:
        """How many queued jobs (from the oldest) fit in one batch, and whether the batch is full."""
        items = tokens = count = 0
        for job in self._pending:
            if count and (items + job.plan.n > self.max_batch_items or tokens + job.tokens > self.max_batch_tokens):
                return count, True
            items, tokens, count = items + job.plan.n, tokens + job.tokens, count + 1
        return count, items >= self.max_batch_items or tokens >= self.max_batch_tokens

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                self._run(batch)
            except BaseException as err:  # noqa: BLE001 - never leave a caller waiting forever
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(ScoringError(f"{type(err).__name__}: {err}", client_error=False))

    def _score(self, plan: ScoringPlan, n_requests: int) -> list[dict[str, Any]]:
        results = self.judge.run(plan)
        if self.on_batch is not None:
            self.on_batch(len(results), n_requests)
        return results

    def _run(self, batch: list[_Job]) -> None:
        if not batch:
            return
        joined = ScoringPlan.concat([job.plan for job in batch])
        try:
            results = self._score(joined, len(batch))
        except Exception:  # noqa: BLE001 - find the guilty request: run each alone
            for job in batch:
                self._run_alone(job)
            return
        for job, part in zip(batch, joined.split(results)):
            job.future.set_result(part)

    def _run_alone(self, job: _Job) -> None:
        try:
            job.future.set_result(self._score(job.plan, 1))
        except (ValueError, TypeError) as err:
            job.future.set_exception(ScoringError(str(err), client_error=True))
        except Exception as err:  # noqa: BLE001 - reported to the caller as a server error, never kills the worker
            job.future.set_exception(ScoringError(f"{type(err).__name__}: {err}", client_error=False))


class Direct:
    """One ``await Judge.ascore(...)`` per request, for engines that batch concurrent requests themselves.

    Args:
        judge: a :class:`~pluie_reward.Judge` whose engine is ``concurrent`` (vLLM, remote).
        template, threshold, truncate, on_batch: as for :class:`Batcher`.

    Example:
        >>> scorer = Direct(Judge.load(engine="vllm"), "para-fs").start()  # needs vLLM on a GPU  # doctest: +SKIP
        >>> await scorer.score({"source": ["a"], "hypothesis": ["b"]})         # doctest: +SKIP
    """

    def __init__(
        self,
        judge: Any,
        template: Any = None,
        *,
        threshold: float | None = None,
        truncate: bool = True,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> None:
        if not judge.engine.concurrent:
            raise TypeError(f"{judge.engine!r} does not batch concurrent requests itself; use Batcher.")
        self.judge = judge
        self.template = template
        self.bound = judge.bind(template)
        self.threshold = threshold
        self.truncate = truncate
        self.on_batch = on_batch
        self._in_flight = [0, 0]  # requests, items
        self._idle = threading.Condition()
        self._accepting = False

    fields = Batcher.fields
    optional_fields = Batcher.optional_fields
    _plan = Batcher._plan

    @property
    def pending(self) -> tuple[int, int]:
        """(requests, items) being scored."""
        with self._idle:
            return self._in_flight[0], self._in_flight[1]

    def start(self) -> "Direct":
        """Accept requests."""
        self._accepting = True
        return self

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting requests and wait for the ones in flight."""
        self._accepting = False
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight[0] == 0, timeout)

    async def score(self, fields: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Score one request's items (bad fields raise ``ValueError``/``TypeError`` before scoring)."""
        plan = self._plan(fields)
        n = plan.n
        if n == 0:
            return []
        if not self._accepting:
            raise ShuttingDown("the judge server is not running (shutting down); retry on another server.")
        with self._idle:
            self._in_flight[0] += 1
            self._in_flight[1] += n
        try:
            results = await self.judge.arun(plan)
        except (ValueError, TypeError) as err:
            raise ScoringError(str(err), client_error=True) from None
        except Exception as err:  # noqa: BLE001 - reported to the caller as a server error
            raise ScoringError(f"{type(err).__name__}: {err}", client_error=False) from None
        finally:
            with self._idle:
                self._in_flight[0] -= 1
                self._in_flight[1] -= n
                self._idle.notify_all()
        if self.on_batch is not None:
            self.on_batch(n, 1)
        return results
