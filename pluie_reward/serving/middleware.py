"""The judge server's ASGI middleware, outermost first: :class:`Timing` (metrics and the log of every
4xx/5xx), :class:`BearerAuth` (the token), :class:`BodyLimit` (413 for oversized bodies, 408 for slow ones,
503 for one still arriving at shutdown)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import math
import secrets
import time
from typing import Any, Callable, Mapping

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .metrics import ServerMetrics
from .protocol import KNOWN_PATHS, PUBLIC_PATHS

logger = logging.getLogger("pluie_reward.server")


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


class BearerAuth:
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


POLL_S = 0.1  # how often a body still arriving checks whether the server is stopping


class BodyLimit:
    """Answer 413 to bodies over ``max_bytes``: from ``Content-Length`` before reading, or while
    reading a streamed (chunked) body, so an oversized body is never held in memory whole. The body
    is read here, within the limit, and handed on whole. A body not whole within ``timeout`` seconds
    (a slow or stalled upload) is answered 408; one still arriving when ``stopping()`` turns true (the
    server was told to stop) is answered 503 at once, so that no upload holds the server's shutdown.

    Args:
        app: the application.
        max_bytes: the body limit.
        timeout: seconds a body may take to arrive whole (None: no limit).
        stopping: says whether the server is stopping (default: never).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float | None = None,
                 stopping: Callable[[], bool] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.stopping = stopping or (lambda: False)

    def _too_large(self) -> JSONResponse:
        return JSONResponse({"detail": f"Request Entity Too Large: the body limit is {self.max_bytes} bytes."}, status_code=413)

    def _cut_short(self, stopping: bool) -> JSONResponse:
        """408 for a body that took too long, 503 for one cut by the shutdown; the connection is closed."""
        if stopping:
            detail, status = "the judge server is shutting down and did not get this request's whole body; retry on another server.", 503
        else:
            detail, status = (f"the request body did not arrive whole within {self.timeout:g} s (the server's --body-timeout): "
                              "send it at once, or over a faster connection."), 408
        return JSONResponse({"detail": detail}, status_code=status, headers={"Connection": "close"})

    async def _next(self, receive: Receive, deadline: float) -> Mapping[str, Any] | bool:
        """The next message of the body, or whether the server is stopping when the wait is cut short
        (the deadline passed, or the server is stopping)."""
        loop = asyncio.get_running_loop()
        message = asyncio.ensure_future(receive())
        try:
            while True:
                if self.stopping():
                    return True
                left = deadline - loop.time()
                if left <= 0:
                    return False
                done, _ = await asyncio.wait({message}, timeout=min(POLL_S, left))
                if done:
                    return message.result()
        finally:
            if not message.done():
                message.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = Headers(scope=scope).get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._too_large()(scope, receive, send)
        deadline = asyncio.get_running_loop().time() + (math.inf if self.timeout is None else self.timeout)
        chunks, size = [], 0
        while True:
            message = await self._next(receive, deadline)
            if isinstance(message, bool):  # too slow, or the server is stopping
                return await self._cut_short(message)(scope, receive, send)
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


class Timing:
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
            if not answered[0] and gone[0]:  # e.g. BodyLimit saw the client leave mid-upload
                status[0], reason[0] = 499, "the client closed the connection before sending its whole body"
        finally:
            path = scope["path"] if scope["path"] in KNOWN_PATHS else "other"
            self.metrics.record_request(path, status[0], time.perf_counter() - start)
            if status[0] >= 400:  # 503 is "retry elsewhere" (the server is stopping): a warning, as a 4xx
                level = logging.ERROR if status[0] >= 500 and status[0] != 503 else logging.WARNING
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
