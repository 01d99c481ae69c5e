"""How the server turns concurrent requests into scoring calls.

* :class:`Batcher` (the transformers engine): requests are cut into parts within the batch limits; one
  worker thread takes the next part of each queued request in turn (round-robin: a large request never
  holds back a small one), waits up to ``max_wait_ms`` for company, concatenates the parts of requests
  with the same options, calls ``Judge.score`` once and hands each request its slice of the results.
* :class:`Direct` (engines that batch by themselves: vLLM, remote): each request is one
  ``await Judge.ascore(...)``.

Both expose ``await scorer.score(fields)``, ``start``, ``close``, ``pending``, ``bound``, and read a
request's fields and options with :func:`split_request`.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..common.errors import PluieError
from ..core.plan import ScoringPlan, finite
from ..integrations.novelty import TASKS, check_blank_sources
from .protocol import CLIENT_OPTIONS, SERVER_OPTIONS, choice


class ShuttingDown(PluieError, RuntimeError):
    """The batcher no longer accepts requests (the server is stopping)."""


class ItemTooLarge(PluieError, ValueError):
    """An item whose fields hold more characters than the server's ``max_item_chars`` (answered 413)."""


def check_item_sizes(plan: ScoringPlan, limit: int | None) -> None:
    """Refuse a plan with an item whose fields (a string shared by all items counts for each) hold more than
    ``limit`` characters: the judge scores an item in one forward pass, so one long item would hold the
    worker, and every other client, for as long as its pass takes (an item cut to the embedded judge's
    8192-token context took ~85-100 s on a CPU). ``None``: no limit.

    Raises:
        ItemTooLarge: naming the first such item, its size and the limit.

    Example:
        >>> from pluie_reward.core.plan import ScoringPlan
        >>> plan = ScoringPlan(None, {"source": ["Hi.", "Hi."], "hypothesis": ["Hello.", "x" * 100]}, 2)
        >>> check_item_sizes(plan, 100)
        Traceback (most recent call last):
        ...
        pluie_reward.serving.batcher.ItemTooLarge: item 1: its fields hold 103 characters; this server takes at most 100 per item ...
    """
    if limit is None:
        return
    for index in range(plan.n):
        size = sum(len(column[index]) for column in plan.columns.values() if isinstance(column[index], str))
        if size > limit:
            raise ItemTooLarge(f"item {index}: its fields hold {size} characters; this server takes at most {limit} per item "
                               "(pluie-reward serve --max-item-chars), so that one item cannot hold the judge for every other "
                               "client: shorten it, or send it to a server started with a larger --max-item-chars.")


class ScoringError(PluieError):
    """``Judge.score`` failed on a request; ``client_error`` says whether the request was at fault."""

    def __init__(self, message: str, client_error: bool) -> None:
        super().__init__(message)
        self.client_error = client_error


_ITEM = re.compile(r"\bitem (\d+)\b")


def split_request(template: Any, body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A request's keys split into the template's fields and the options a client may set.

    A client may set ``threshold`` (a finite number), ``use_cache`` (a bool) and ``task`` (a task of
    :data:`~pluie_reward.integrations.novelty.TASKS` whose copy-proof reward the server adds to the answer).
    ``details``, ``truncate``, ``max_new_tokens`` and ``template`` are the server's: a request naming one is
    refused (``ValueError``, answered 422), as is an option of the wrong type. Other keys are fields.

    Args:
        template: the served :class:`~pluie_reward.core.template.Template`.
        body: the request's JSON object.

    Returns:
        ``(fields, options)``.

    Example:
        >>> from pluie_reward.core.template import load_template
        >>> split_request(load_template("para-fs"), {"source": "s", "hypothesis": ["h"], "threshold": 1})
        ({'source': 's', 'hypothesis': ['h']}, {'threshold': 1.0})
        >>> split_request(load_template("para-fs"),  # doctest: +NORMALIZE_WHITESPACE
        ...               {"source": "s", "hypothesis": ["h"], "truncate": False})
        Traceback (most recent call last):
        ...
        ValueError: 'truncate' is set by the server, not per request; a request may set only 'threshold', 'use_cache' and 'task' besides the
        template's fields.
        >>> split_request(load_template("para-fs"), {"source": "s", "hypothesis": ["h"], "threshold": 10**400})
        Traceback (most recent call last):
        ...
        ValueError: 'threshold' must be a finite number, got 10000000000000000000... (401 characters).
    """
    fields, options = {}, {}
    for key, value in body.items():
        if key in template.all_fields or key not in CLIENT_OPTIONS + SERVER_OPTIONS:
            fields[key] = value
        elif key in SERVER_OPTIONS:
            allowed = ", ".join(map(repr, CLIENT_OPTIONS[:-1])) + f" and {CLIENT_OPTIONS[-1]!r}"
            raise ValueError(f"{key!r} is set by the server, not per request; a request may set only {allowed} besides "
                             "the template's fields.")
        elif key == "use_cache":
            if not isinstance(value, bool):
                raise ValueError(f"'use_cache' must be true or false, got {value!r}.")
            options[key] = value
        elif key == "task":
            try:
                value = choice(value, TASKS, "'task'")
            except ValueError:
                raise ValueError(f"'task' must be one of {list(TASKS)} (case does not matter; its copy-proof reward is added "
                                 f"to the answer), got {value!r}.") from None
            TASKS[value].check_template(template, who=f"'task': {value!r}: ")
            sources = body.get(TASKS[value].source_field)
            check_blank_sources([sources] if isinstance(sources, str) else sources if isinstance(sources, list) else [],
                                f"'task': {value!r}: ", f"(field {TASKS[value].source_field!r})")
            options[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value):  # 10**400 too
                shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... ({len(repr(value))} characters)"
                raise ValueError(f"'threshold' must be a finite number, got {shown}.")
            options[key] = float(value)
    return fields, options


def _item_limit(limit: int | None) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"max_item_chars must be a whole number >= 1 (or None: no limit), got {limit!r}.")
    return limit


@dataclass
class _Job:
    """One request: its plan, cut into parts that are scored in turn (round-robin with other requests)."""

    plan: ScoringPlan
    parts: deque  # (part plan, estimated tokens, offset of its first item) not yet handed to the worker
    future: Future = field(default_factory=Future)
    enqueued: float = field(default_factory=time.monotonic)
    results: list = field(default_factory=list)

    @property
    def waiting_items(self) -> int:
        """Items not yet handed to the worker."""
        return sum(part.n for part, _, _ in self.parts)


def _settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Answer a caller, unless it is answered already (it went away, or the batcher gave up at shutdown)."""
    try:
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    except InvalidStateError:
        pass


class Batcher:
    """One judge, one template, one worker thread; many concurrent callers (see the module docstring). A
    request whose caller went away (cancelled future) is dropped before its next part.

    Args:
        judge: a :class:`~pluie_reward.Judge`; only this batcher's worker may use it while running.
        template: template name, YAML path or Template (validated against the judge at construction).
        max_batch_items: coalesce at most this many items into one ``Judge.score`` call (and cut
            larger requests into parts of this many).
        max_batch_tokens: ... and at most about this many field tokens (characters / 4, plus 16
            per item); a single item above the limit is a part alone (the judge splits it further by
            its own ``batch_tokens``).
        max_wait_ms: how long the oldest queued request may wait for company (finite, >= 0).
        threshold: verdict = logratio > threshold (default: the judge's); a request may set its own.
        truncate: passed to ``Judge.score`` (False: over-long items fail their request).
        max_item_chars: refuse (:class:`ItemTooLarge`, before queueing) an item whose fields hold more characters
            (:func:`check_item_sizes`); None: no limit.
        on_batch: called with (items, requests) after each ``Judge.score`` call (metrics).

    Example:
        >>> batcher = Batcher(judge, "para-fs", max_wait_ms=5).start()
        >>> batcher.submit({"source": ["a"], "hypothesis": ["b"]}).result()
        [{'logratio': ..., 'p_yes': ..., 'verdict': ...}]
        >>> batcher.submit({"source": ["a"], "hypothesis": ["b"], "threshold": 100}).result()[0]["verdict"]
        False
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
        max_item_chars: int | None = None,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> None:
        if max_batch_items < 1 or max_batch_tokens < 1:
            raise ValueError("max_batch_items and max_batch_tokens must be at least 1.")
        if not (math.isfinite(max_wait_ms) and max_wait_ms >= 0):
            raise ValueError(f"max_wait_ms must be a finite number >= 0, got {max_wait_ms}.")
        self.judge = judge
        self.template = template
        self.bound = judge.bind(template)  # fails now (not on the first request) for a bad template
        self.max_batch_items = max_batch_items
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.threshold = threshold
        self.truncate = truncate
        self.max_item_chars = _item_limit(max_item_chars)
        self.on_batch = on_batch
        self._pending: deque[_Job] = deque()  # requests with parts still to score, in turn order
        self._running: list[_Job] = []  # requests of the batch being scored
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = math.inf  # when close() stops waiting and answers the rest 503
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
        """(requests, items) waiting in the queue (items not yet handed to the worker)."""
        with self._cond:
            live = [job for job in self._pending if not job.future.done()]
            return len(live), sum(job.waiting_items for job in live)

    def submit(self, fields: Mapping[str, Any]) -> Future:
        """Queue one request; its future resolves to one ``{"logratio", "p_yes", "verdict"}`` per item.

        ``fields`` are the template's fields and the options a client may set
        (:func:`split_request`). Bad fields or options raise ``ValueError``/``TypeError`` here,
        before queueing. The future fails with :class:`ScoringError` if the judge rejects the
        request (e.g. too long with ``truncate=False``), with :class:`ShuttingDown` if the batcher
        stopped before finishing it. Cancel it to drop the rest of the request.
        """
        plan = self._plan(fields)
        job = _Job(plan, deque(self._parts(plan)))
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
        """:meth:`submit` and wait for the result without blocking the event loop (cancelling
        the wait drops the request's remaining parts)."""
        return await asyncio.wrap_future(self.submit(fields))

    def _plan(self, body: Mapping[str, Any]) -> ScoringPlan:
        """The request's scoring plan (bad fields or options raise ``ValueError``/``TypeError``/``KeyError`` here)."""
        fields, options = split_request(self.bound.template, body)
        task = options.pop("task", None)  # the server computes the task's reward from the results (routes.score, Task.answer_scores)
        if task is not None:  # its judge reads each completion's reading, as the local rewards' judge does
            fields = TASKS[task].judged(fields, self.judge.clean_text)
        options = {"threshold": self.threshold, **options}
        plan = self.judge.plan(self.template, details=True, truncate=self.truncate, **options, **fields)
        check_item_sizes(plan, self.max_item_chars)
        return plan

    def _parts(self, plan: ScoringPlan) -> list[tuple[ScoringPlan, int, int]]:
        """The plan cut into parts within the batch limits: (part, estimated tokens, first item)."""
        # field characters / 4 + a few tokens: cheap, only used to bound batch sizes (the template's
        # own prefix is shared by every item and computed once, so it is not counted per item)
        costs = [sum(len(column[i]) for column in plan.columns.values() if column[i]) // 4 + 16 for i in range(plan.n)]
        parts, start, tokens = [], 0, 0
        for i, cost in enumerate(costs):
            if i > start and (i - start >= self.max_batch_items or tokens + cost > self.max_batch_tokens):
                parts.append((plan.part(start, i), tokens, start))
                start, tokens = i, 0
            tokens += cost
        if plan.n:
            parts.append((plan if start == 0 else plan.part(start, plan.n), tokens, start))
        return parts

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> "Batcher":
        """Start the worker thread (idempotent)."""
        with self._cond:
            if self._thread is None:
                self._closing, self._deadline = False, math.inf
                self._thread = threading.Thread(target=self._work, name="pluie-batcher", daemon=True)
                self._thread.start()
        return self

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting requests and finish the queued ones, for at most ``timeout`` seconds
        (None: all of them); then answer the unfinished ones :class:`ShuttingDown` and return (the
        worker stops after the batch it is computing). Calls after the first keep its deadline."""
        with self._cond:
            self._closing = True
            if timeout is not None:
                self._deadline = min(self._deadline, time.monotonic() + timeout)
            self._cond.notify_all()
            thread, deadline = self._thread, self._deadline
        if thread is None:
            return
        thread.join(None if deadline == math.inf else max(0.0, deadline - time.monotonic()))
        if not thread.is_alive():
            self._thread = None
            return
        error = ShuttingDown("the judge server is shutting down and did not finish this request within its shutdown "
                             "time; retry on another server.")
        with self._cond:
            for job in [*self._pending, *self._running]:
                _settle(job.future, error=error)
            self._pending.clear()

    # worker ----------------------------------------------------------------------------------
    def _next_batch(self) -> list[tuple[_Job, ScoringPlan, int]] | None:
        """The next part of each request that fits, from the oldest in turn order, all with the
        options of the first; None when closing and drained."""
        with self._cond:
            while True:
                self._pending = deque(job for job in self._pending if not job.future.done())  # callers gone
                if not self._pending:
                    if self._closing:
                        return None
                    self._cond.wait()
                    continue
                chosen, full = self._fitting()
                remaining = self._pending[0].enqueued + self.max_wait - time.monotonic()
                if full or self._closing or remaining <= 0:
                    break
                self._cond.wait(remaining)
            batch = []
            for job in chosen:
                part, _, offset = job.parts.popleft()
                batch.append((job, part, offset))
                self._pending.remove(job)
                if job.parts:  # its next part waits behind the requests queued now
                    self._pending.append(job)
            self._running = [job for job, _, _ in batch]
            return batch

    def _fitting(self) -> tuple[list[_Job], bool]:
        """The queued requests (from the oldest, with its options) whose next part fits in one
        batch, and whether the batch is full."""
        key = self._pending[0].plan.options
        chosen: list[_Job] = []
        items = tokens = 0
        for job in self._pending:
            if job.plan.options != key:
                continue
            part, cost, _ = job.parts[0]
            if chosen and (items + part.n > self.max_batch_items or tokens + cost > self.max_batch_tokens):
                return chosen, True
            chosen.append(job)
            items, tokens = items + part.n, tokens + cost
        return chosen, items >= self.max_batch_items or tokens >= self.max_batch_tokens

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                self._run(batch)
            except BaseException as err:  # noqa: BLE001 - never leave a caller waiting forever
                for job, _, _ in batch:
                    _settle(job.future, error=ScoringError(f"{type(err).__name__}: {err}", client_error=False))
            finally:
                with self._cond:
                    self._running = []

    def _score(self, plan: ScoringPlan, n_requests: int) -> list[dict[str, Any]]:
        results = self.judge.run(plan)
        if self.on_batch is not None:
            self.on_batch(len(results), n_requests)
        return results

    def _run(self, batch: list[tuple[_Job, ScoringPlan, int]]) -> None:
        joined = ScoringPlan.concat([part for _, part, _ in batch])
        try:
            results = self._score(joined, len(batch))
        except Exception:  # noqa: BLE001 - find the guilty request: run each alone
            for job, part, offset in batch:
                self._run_alone(job, part, offset)
            return
        for (job, _, _), got in zip(batch, joined.split(results)):
            self._deliver(job, got)

    def _deliver(self, job: _Job, results: list[Any]) -> None:
        """Add a part's results to its request; answer the request after its last part."""
        job.results.extend(results)
        if not job.parts:
            _settle(job.future, job.results)

    def _run_alone(self, job: _Job, part: ScoringPlan, offset: int) -> None:
        if job.future.done():
            return
        try:
            results = self._score(part, 1)
        except (ValueError, TypeError) as err:  # "item k" of the part is item offset + k of the request
            message = _ITEM.sub(lambda m: f"item {int(m.group(1)) + offset}", str(err))
            _settle(job.future, error=ScoringError(message, client_error=True))
        except Exception as err:  # noqa: BLE001 - reported to the caller as a server error, never kills the worker
            _settle(job.future, error=ScoringError(f"{type(err).__name__}: {err}", client_error=False))
        else:
            self._deliver(job, results)


class Direct:
    """One ``await Judge.ascore(...)`` per request, for engines that batch concurrent requests themselves.

    Args:
        judge: a :class:`~pluie_reward.Judge` whose engine is ``concurrent`` (vLLM, remote).
        template, threshold, truncate, max_item_chars, on_batch: as for :class:`Batcher`.

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
        max_item_chars: int | None = None,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> None:
        if not judge.engine.concurrent:
            raise TypeError(f"{judge.engine!r} does not batch concurrent requests itself; use Batcher.")
        self.judge = judge
        self.template = template
        self.bound = judge.bind(template)
        self.threshold = threshold
        self.truncate = truncate
        self.max_item_chars = _item_limit(max_item_chars)
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
