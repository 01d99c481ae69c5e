"""The judge server's FastAPI application: :func:`create_app` puts the judge's batcher, the metrics and
OpenRLHF's field mapping on ``app.state``, adds the middleware (:mod:`.middleware`) and the endpoints'
routers (:mod:`.routes`; the protocol is described in :mod:`.protocol`).

FastAPI and uvicorn are imported here, so import this module only where they are installed.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from ..common.errors import missing_extra

try:
    from fastapi import FastAPI, Request
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
except ModuleNotFoundError as err:
    raise missing_extra(err, "the judge server") from None

from .batcher import Batcher, Direct
from .mapping import RewardMapping
from .metrics import ServerMetrics
from .middleware import BearerAuth, BodyLimit, Timing
from .routes import ROUTERS, RewardRequest

JSON_TYPES = {bool: "a boolean", str: "a string", int: "a number", float: "a number", list: "a list", dict: "an object",
              bytes: "text that is not JSON"}
NEEDS = {"list_type": "a list", "string_type": "a string", "dict_type": "a JSON object", "model_attributes_type": "a JSON object"}


def validation_message(errors: list[dict[str, Any]], fields: dict[str, Any] | None = None) -> str:
    """The first of FastAPI's validation errors in the server's one-sentence form: the field (and item), what it must
    be (``fields``: a body model's fields, whose descriptions say it) and what came.

    Example:
        >>> error = {"type": "list_type", "loc": ("body", "labels"), "msg": "Input should be a valid list", "input": "text"}
        >>> print(validation_message([error]))
        field 'labels' must be a list, got a string ("text").
        >>> print(validation_message([{"type": "string_type", "loc": ("body", "query", 1), "input": 3}], RewardRequest.model_fields))
        field 'query' must be a list of strings, one per sample (its prompt and response): item 1 is a number (3).
    """
    error = errors[0]
    kind, path, value = error.get("type", ""), [p for p in error.get("loc", ()) if p != "body"], error.get("input")
    if kind == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'decode error')} at character {path[0]})."
    shown = json.dumps(jsonable_encoder(value), ensure_ascii=False)
    got = "null" if value is None else f"{JSON_TYPES.get(type(value), type(value).__name__)} ({shown[:60]})"
    if not path:
        return f"the body must be a JSON object, got {got}." if kind != "missing" else "the body is missing: send a JSON object."
    field = fields.get(path[0]) if fields else None
    needs = field.description if field is not None and field.description else NEEDS.get(kind, str(error.get("msg", "")).lower())
    if kind == "missing":
        return f"field {path[0]!r} is missing: it must be {needs}."
    return f"field {path[0]!r} must be {needs}" + (f": item {path[1]} is {got}." if len(path) > 1 else f", got {got}.")


async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 in the server's one-sentence form (:func:`validation_message`), and a hint when the body was not sent as JSON."""
    fields = RewardRequest.model_fields if request.url.path == "/get_reward" else None
    body: dict[str, Any] = {"detail": validation_message(list(exc.errors()), fields)}
    if "json" not in request.headers.get("content-type", ""):
        body["hint"] = "send the body as JSON with the header 'Content-Type: application/json'."
    return JSONResponse(body, status_code=422)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the app's batcher; at shutdown (uvicorn has let the requests in flight finish), finish or
    answer 503 whatever is still queued within the app's ``shutdown_timeout``."""
    app.state.batcher.start()
    try:
        yield
    finally:
        await asyncio.to_thread(app.state.batcher.close, app.state.shutdown_timeout)


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
    max_item_chars: int | None = None,
    body_timeout: float | None = 60.0,
    shutdown_timeout: float = 30.0,
) -> FastAPI:
    """A FastAPI app serving ``judge`` with one template; run it with uvicorn (or :mod:`.runner`).

    The batcher starts with the app's lifespan. At shutdown it finishes the queued requests for at
    most ``shutdown_timeout`` seconds, then answers the unfinished ones 503 (retry elsewhere);
    :func:`.runner.run` starts that drain as soon as the signal arrives (``app.state.drain``).
    A request whose client disconnects is answered 499 and its remaining work dropped. An item whose fields
    hold more than ``max_item_chars`` characters is answered 413 (None: no limit; ``pluie-reward serve``'s
    default is :data:`~pluie_reward.tools.server.cli.MAX_ITEM_CHARS`). A body that does not arrive whole within
    ``body_timeout`` seconds is answered 408 (None: no limit), and one still arriving when the server is told to
    stop, 503 at once (:class:`~.middleware.BodyLimit`), so that slow uploads hold neither the server nor its shutdown.

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
    if body_timeout is not None and not (math.isfinite(body_timeout) and body_timeout > 0):
        raise ValueError(f"body_timeout must be a finite number of seconds > 0 (or None: no limit), got {body_timeout}.")
    stopping = threading.Event()  # set by drain(): bodies still arriving get 503 at once
    metrics = ServerMetrics()
    if judge.engine.concurrent:  # vLLM / remote: the engine batches concurrent requests
        batcher: Any = Direct(judge, template, threshold=threshold, truncate=truncate, max_item_chars=max_item_chars,
                              on_batch=metrics.record_batch)
    else:
        batcher = Batcher(judge, template, max_batch_items=max_batch_items, max_batch_tokens=max_batch_tokens,
                          max_wait_ms=max_wait_ms, threshold=threshold, truncate=truncate, max_item_chars=max_item_chars,
                          on_batch=metrics.record_batch)
    rm_mapping, rm_problem = mapping, ""
    if rm_mapping is None:
        try:
            rm_mapping = RewardMapping.for_template(batcher.bound.template)
        except ValueError as err:  # e.g. 'rev' needs an explicit mapping; /score still works
            rm_problem = f"/get_reward is not configured on this server: {err}"

    def drain() -> None:
        """Stop accepting requests and finish (or answer 503) the queued ones within ``shutdown_timeout``,
        in a background thread: what the runner calls when a stop signal arrives."""
        stopping.set()
        threading.Thread(target=batcher.close, args=(shutdown_timeout,), name="pluie-drain", daemon=True).start()

    app = FastAPI(
        title="PLUIE judge server",
        description=f"PLUIE scores (log p(yes) - log p(no)) from {judge.name}, template {batcher.bound.template.name!r}.",
        lifespan=lifespan,
    )
    app.state.judge = judge
    app.state.batcher = batcher
    app.state.metrics = metrics
    app.state.mapping = rm_mapping
    app.state.mapping_problem = rm_problem
    app.state.max_items_per_request = max_items_per_request
    app.state.max_body_bytes = max_body_bytes
    app.state.shutdown_timeout = shutdown_timeout
    app.state.drain = drain
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, timeout=body_timeout, stopping=stopping.is_set)
    app.add_middleware(BearerAuth, token=token)
    app.add_middleware(Timing, metrics=metrics)
    app.add_exception_handler(RequestValidationError, invalid_request)
    for router in ROUTERS:
        app.include_router(router)
    return app
