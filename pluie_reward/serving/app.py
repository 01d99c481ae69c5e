"""The FastAPI application of the judge server.

Endpoints:
- ``POST /score``: ``{"source": [...], "hypothesis": [...]}`` (the template's fields, lists of
  strings, or one string shared by all items; a request may also set ``threshold``, ``use_cache`` and
  ``task``) -> ``{"logratio": [...], "p_yes": [...], "verdict": [...]}``; with ``"task": "paraphrase"``
  (``translation``, ``revision``) also ``"reward"`` (the task's copy-proof reward, as
  :class:`~pluie_reward.ParaphraseReward` computes it) and ``"novelty"``.
- ``POST /get_reward``: OpenRLHF's remote reward model protocol,
  ``{"query": [...], "prompts": [...], "labels": [...]}`` -> ``{"rewards": [...], "scores": [...], "extra_logs": {...}}``.
  An empty request (``{"query": [], ...}``, what OpenRLHF up to 0.11.0 sends every server but the
  first of a comma-separated ``--reward.remote_url``, OpenRLHF@3c3be623:openrlhf/utils/agent.py:324-336)
  gets empty lists.

Every 4xx answer is also logged (WARNING, logger ``pluie_reward.server``) with the request path and the
message, every 5xx (ERROR) with its reason: OpenRLHF logs only the status (agent.py:345-346) and then drops the sample's reward
(agent.py:298-299), so the server's log is where the reason shows.
- ``GET /health``: liveness plus the template's fields (no token needed).
- ``GET /metrics``: requests (by path, by status, 5xx as ``server_errors``), items, batches and batch
  sizes, latency percentiles.

FastAPI and uvicorn are imported here, so import this module only where they are installed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import math
import secrets
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Mapping

from fastapi import Body, FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ...core.judge import answer_record
from ...core.novelty import TASKS
from ...integrations.batching import Batcher, Direct, ScoringError, ShuttingDown, split_request
from ...integrations.reward_mapping import RewardMapping
from .metrics import ServerMetrics

logger = logging.getLogger("pluie_reward.server")
PUBLIC_PATHS = frozenset({"/health"})
KNOWN_PATHS = frozenset({"/score", "/get_reward", "/health", "/metrics", "/docs", "/openapi.json"})


class RewardRequest(BaseModel):
    """OpenRLHF's request body (other keys some OpenRLHF versions add are ignored)."""

    model_config = ConfigDict(extra="ignore")
    query: list[str]
    prompts: list[str] | None = None
    labels: list[Any] | None = None


def _given_token(authorization: str) -> str | None:
    """The token of an ``Authorization`` header: ``Bearer <token>``, or HTTP Basic auth with the token
    as the password (any user name), which is what a URL like ``http://pluie:<token>@host/...``
    makes aiohttp (OpenRLHF's HTTP client) and httpx send."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] if ":" in decoded else None
    return None


class _BearerAuth:
    """Reject requests without the token (``Authorization: Bearer <token>``, or Basic auth with the
    token as password) before their body is read."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.expected = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.expected is None or scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            return await self.app(scope, receive, send)
        given = _given_token(Headers(scope=scope).get("authorization", ""))
        if given is None or not secrets.compare_digest(given.encode(), self.expected):
            response = JSONResponse(
                {
                    "detail": "missing or wrong bearer token: send the header 'Authorization: Bearer <token>' "
                    "(or HTTP Basic auth with the token as password, e.g. http://pluie:<token>@host:port/get_reward)."
                },
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)


class _BodyLimit:
    """Answer 413 to bodies over ``max_bytes``: from ``Content-Length`` before reading, or while
    reading a streamed (chunked) body, so an oversized body is never held in memory whole. The body
    is read here, within the limit, and handed on whole."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> JSONResponse:
        return JSONResponse({"detail": f"Request Entity Too Large: the body limit is {self.max_bytes} bytes."}, status_code=413)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = Headers(scope=scope).get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._too_large()(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending its whole body
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._too_large()(scope, receive, send)
            if not message.get("more_body", False):
                break
        whole: list[bytes] = [b"".join(chunks)]

        async def replay() -> Any:
            """The body once, then whatever the server says next (``http.disconnect``)."""
            if whole:
                return {"type": "http.request", "body": whole.pop(), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class _Timing:
    """Count every request by path and status, with its latency; log every 4xx (WARNING) and 5xx
    (ERROR) with its reason: the body's ``detail``, or the exception no handler caught."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status, body, reason = time.perf_counter(), [500], bytearray(), [""]
        answered, gone = [False], [False]

        async def receive_and_note() -> Any:
            message = await receive()
            gone[0] = gone[0] or message["type"] == "http.disconnect"
            return message

        async def send_and_note(message: Mapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0], answered[0] = message["status"], True
            elif message["type"] == "http.response.body" and status[0] >= 400 and len(body) < 2000:
                body.extend(message.get("body", b"")[:2000])
            await send(message)

        try:
            await self.app(scope, receive_and_note, send_and_note)
        except Exception as err:  # answered 500 by Starlette's outermost middleware; the reason is logged here
            status[0], reason[0] = 500, f"{type(err).__name__}: {err}"
            raise
        else:
            if not answered[0] and gone[0]:  # e.g. _BodyLimit saw the client leave mid-upload
                status[0], reason[0] = 499, "the client closed the connection before sending its whole body"
        finally:
            path = scope["path"] if scope["path"] in KNOWN_PATHS else "other"
            self.metrics.record_request(path, status[0], time.perf_counter() - start)
            if status[0] >= 400:
                level = logging.ERROR if status[0] >= 500 else logging.WARNING
                logger.log(level, "%s %s -> %d: %s", scope.get("method", "?"), scope["path"], status[0],
                           reason[0] or _detail(bytes(body)) or "(no reason given)")


def _detail(body: bytes) -> str:
    """The ``detail`` of a JSON error body, else the body's text (shortened)."""
    try:
        detail = json.loads(body).get("detail", body.decode("utf-8", "replace"))
    except (ValueError, AttributeError):
        detail = body.decode("utf-8", "replace")
    text = detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)
    return text[:1000]


async def _disconnected(request: Request) -> None:
    """Return when the client has closed the connection (the body is read already: the next ASGI
    message is ``http.disconnect``, sent when the client leaves or after the response)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def task_columns(template: Any, body: Mapping[str, Any], answer: Mapping[str, list]) -> dict[str, list[float]]:
    """The ``reward`` and ``novelty`` columns of a ``/score`` answer whose request set ``task``
    (:meth:`~pluie_reward.core.novelty.Task.batch` of the answer's ``p_yes`` and verdicts and the request's
    texts; a string field is shared by all items); no columns for a request without a task.

    Args:
        template: the served template (the request's options were checked against it while scoring).
        body: the request.
        answer: the answer's columns (``p_yes``, ``verdict``).

    Example:
        >>> from pluie_reward.core.template import load_template
        >>> body = {"source": "The cat sleeps.", "hypothesis": ["THE CAT SLEEPS!", "A cat is asleep."], "task": "paraphrase"}
        >>> task_columns(load_template("para-fs"), body, {"p_yes": [0.9, 0.8], "verdict": [True, True]})
        {'reward': [0.0, 0.8], 'novelty': [0.0, 0.6]}
    """
    task = split_request(template, body)[1].get("task")
    if task is None:
        return {}
    n = len(answer["p_yes"])
    source, hypothesis = (body[name] if isinstance(body[name], list) else [body[name]] * n
                          for name in (TASKS[task].source_field, "hypothesis"))
    scores = TASKS[task].batch(answer["p_yes"], answer["verdict"], source, hypothesis)
    return {"reward": scores.rewards, "novelty": scores.novelty}


def public_name(name: str) -> str:
    """The judge's name as shown without a token: a Hub id as is, a local path reduced to its last
    component (``/models/qwen-7b`` -> ``qwen-7b``), so ``/health`` does not reveal the filesystem.

    Example:
        >>> public_name("Qwen/Qwen2.5-7B-Instruct"), public_name("/srv/models/judge-v2/"), public_name("./ckpt/step-10")
        ('Qwen/Qwen2.5-7B-Instruct', 'judge-v2', 'step-10')
    """
    text = str(name).rstrip("/\\")
    parts = [p for p in text.replace("\\", "/").split("/") if p]
    looks_like_path = text.startswith(("/", "~", ".")) or ":" in text[:3] or len(parts) > 2 or Path(text).exists()
    return parts[-1] if looks_like_path and parts else text


def create_app(
    judge: Any,
    template: Any = None,
    *,
    mapping: RewardMapping | None = None,
    token: str | None = None,
    max_body_bytes: int = 4 * 1024 * 1024,
    max_items_per_request: int = 1024,
    max_batch_items: int = 256,
    max_batch_tokens: int = 32_768,
    max_wait_ms: float = 5.0,
    threshold: float | None = None,
    truncate: bool = True,
    shutdown_timeout: float = 30.0,
) -> FastAPI:
    """A FastAPI app serving ``judge`` with one template; run it with uvicorn (or :mod:`.runner`).

    The batcher starts with the app's lifespan. At shutdown it finishes the queued requests for at
    most ``shutdown_timeout`` seconds, then answers the unfinished ones 503 (retry elsewhere);
    :func:`.runner.run` starts that drain as soon as the signal arrives (``app.state.drain``).
    A request whose client disconnects is answered 499 and its remaining work dropped.

    Example:
        >>> from pluie_reward import Judge
        >>> app = create_app(Judge.load(), "para-fs", token="s3cret", max_wait_ms=10)
        >>> uvicorn.run(app, host="127.0.0.1", port=8000)  # serves until Ctrl-C  # doctest: +SKIP

        In-process, e.g. in tests (fastapi's ``TestClient`` runs the app's lifespan):

        >>> from fastapi.testclient import TestClient
        >>> with TestClient(create_app(judge, "para-fs", token="s3cret")) as client:
        ...     client.post("/score", json={"source": ["a"], "hypothesis": ["b"]},
        ...                 headers={"Authorization": "Bearer s3cret"}).json()
        {'logratio': [...], 'p_yes': [...], 'verdict': [...]}
    """
    if max_items_per_request < 1 or max_body_bytes < 1:
        raise ValueError("max_items_per_request and max_body_bytes must be at least 1.")
    if not (math.isfinite(shutdown_timeout) and shutdown_timeout >= 0):
        raise ValueError(f"shutdown_timeout must be a finite number of seconds >= 0, got {shutdown_timeout}.")
    metrics = ServerMetrics()
    if judge.engine.concurrent:  # vLLM / remote: the engine batches concurrent requests
        batcher: Any = Direct(judge, template, threshold=threshold, truncate=truncate, on_batch=metrics.record_batch)
    else:
        batcher = Batcher(
            judge,
            template,
            max_batch_items=max_batch_items,
            max_batch_tokens=max_batch_tokens,
            max_wait_ms=max_wait_ms,
            threshold=threshold,
            truncate=truncate,
            on_batch=metrics.record_batch,
        )
    rm_mapping, rm_problem = mapping, ""
    if rm_mapping is None:
        try:
            rm_mapping = RewardMapping.for_template(batcher.bound.template)
        except ValueError as err:  # e.g. 'rev' needs an explicit mapping; /score still works
            rm_problem = f"/get_reward is not configured on this server: {err}"
    template_name = batcher.bound.template.name

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        try:
            yield
        finally:  # uvicorn has let in-flight requests finish; drain whatever is still queued
            await asyncio.to_thread(batcher.close, shutdown_timeout)

    def drain() -> None:
        """Stop accepting requests and finish (or answer 503) the queued ones within ``shutdown_timeout``,
        in a background thread: what the runner calls when a stop signal arrives."""
        threading.Thread(target=batcher.close, args=(shutdown_timeout,), name="pluie-drain", daemon=True).start()

    app = FastAPI(
        title="PLUIE judge server",
        description=f"PLUIE scores (log p(yes) - log p(no)) from {judge.name}, template {template_name!r}.",
        lifespan=lifespan,
    )
    app.state.batcher = batcher
    app.state.metrics = metrics
    app.state.mapping = rm_mapping
    app.state.drain = drain
    app.add_middleware(_BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(_BearerAuth, token=token)
    app.add_middleware(_Timing, metrics=metrics)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        body: dict[str, Any] = {"detail": jsonable_encoder(exc.errors())}
        if "json" not in request.headers.get("content-type", ""):
            body["hint"] = "send the body as JSON with the header 'Content-Type: application/json'."
        return JSONResponse(body, status_code=422)

    async def score_items(fields: Mapping[str, Any], request: Request) -> list[dict[str, Any]]:
        work = asyncio.ensure_future(batcher.score(fields))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this handler is cancelled: the batcher drops the request's remaining parts
            for task in (work, gone):
                task.cancel()
        if not work.done() or work.cancelled():
            raise HTTPException(499, "the client closed the connection; the rest of its request was dropped.")
        try:
            results = work.result()
        except (ValueError, TypeError) as err:
            raise HTTPException(422, str(err)) from None
        except ShuttingDown as err:
            raise HTTPException(503, str(err)) from None
        except ScoringError as err:
            raise HTTPException(422 if err.client_error else 500, str(err)) from None
        metrics.record_items(len(results))
        return results

    def check_size(n: int) -> None:
        if n > max_items_per_request:
            raise HTTPException(
                413, f"{n} items in one request; this server takes at most {max_items_per_request}: split the request."
            )

    @app.post("/score")
    async def score(
        request: Request,
        body: dict[str, Any] = Body(..., examples=[{"source": ["The cat sleeps."], "hypothesis": ["The cat is asleep."]}]),
    ) -> dict[str, Any]:
        """Score items given as template fields (lists of strings, or one string for all items); a
        request may also set ``threshold`` (a finite number), ``use_cache`` (true/false) and ``task``
        (``paraphrase``, ``translation``, ``revision``: adds the task's copy-proof ``reward`` and ``novelty``)."""
        lengths = [len(v) for v in body.values() if isinstance(v, list)]
        check_size(max(lengths, default=1))
        results = await score_items(body, request)  # checks the fields and options (422)
        keys = list(results[0]) if results else list(answer_record(batcher.bound.template, [0.0] * len(batcher.bound.answer_ids)))
        answer = {key: [r[key] for r in results] for key in keys}  # logratio/p_yes/verdict for Yes/No templates
        return {**answer, **task_columns(batcher.bound.template, body, answer)}

    @app.post("/get_reward")
    async def get_reward(body: RewardRequest, request: Request) -> dict[str, Any]:
        """OpenRLHF remote reward model: rewards (the configured score), scores (p_yes, in [0, 1]), extra_logs."""
        if rm_mapping is None:
            raise HTTPException(501, rm_problem)
        check_size(len(body.query))
        try:
            columns = rm_mapping.columns(body.query, body.prompts, body.labels)
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
        if not body.query:
            return rm_mapping.answer([], columns)
        results = await score_items(columns, request)
        return rm_mapping.answer(results, columns)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness and what the server scores (the judge's model name, never its filesystem path)."""
        return {
            "status": "ok",
            "judge": public_name(judge.name),
            "template": template_name,
            "fields": list(batcher.fields),
            "optional_fields": list(batcher.optional_fields),
            "kind": batcher.bound.template.kind,  # binary (Yes/No), choice or scale
            "answers": list(batcher.bound.template.labels),
            "values": list(batcher.bound.template.values) or None,  # a scale's ratings, in the answers' order
            "chat_template_kwargs": batcher.bound.chat_template_kwargs,  # incl. the date a template writes as today
        }

    @app.get("/metrics")
    async def get_metrics() -> dict[str, Any]:
        """Counters since start: requests, items, batches, batch sizes, latency (ms)."""
        snapshot = metrics.snapshot()
        queued_requests, queued_items = batcher.pending
        snapshot["queue"] = {"requests": queued_requests, "items": queued_items}
        snapshot["judge"] = {"name": judge.name, "template": template_name, **dict(judge.engine.stats)}
        return snapshot

    return app
