"""Run the judge server with uvicorn: in the foreground (CLI) or in a background thread (tests, notebooks)."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator


def _server(app: Any, config: Any) -> Any:
    """A ``uvicorn.Server`` that, when told to stop (SIGINT/SIGTERM, or ``should_exit``), first starts
    the app's drain (``app.state.drain``: the queued requests are finished or answered 503 within the
    app's ``shutdown_timeout``), then shuts down as uvicorn does: no new connections, the requests in
    flight answered, the lifespan's shutdown."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            drain = getattr(getattr(app, "state", None), "drain", None)
            if drain is not None:
                drain()
            await super().shutdown(sockets)

    return DrainingServer(config)


def run(app: Any, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info", graceful_timeout: float = 30.0) -> None:
    """Serve ``app`` until SIGINT/SIGTERM. Then no new connection is accepted; the requests in
    flight are answered (scored, or 503 once the app's ``shutdown_timeout`` has passed) and the
    process exits; after ``graceful_timeout`` seconds uvicorn cancels whatever is still running.

    Example:
        >>> run(create_app(Judge.load()), port=8000)  # serves until Ctrl-C  # doctest: +SKIP
    """
    import uvicorn

    server_log = logging.getLogger("pluie_reward.server")
    if not server_log.handlers:  # rejected requests (4xx) with their reason, next to uvicorn's own lines
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:  %(message)s"))
        server_log.addHandler(handler)
        server_log.setLevel(logging.WARNING)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=graceful_timeout)
    _server(app, config).run()


@contextmanager
def background(app: Any, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 60.0) -> Iterator[Any]:
    """Serve ``app`` from a daemon thread; yields the ``uvicorn.Server`` (its ``url`` attribute is set).

    ``port=0`` picks a free port. Leaving the block shuts the server down gracefully.

    Example:
        >>> import httpx
        >>> from pluie_reward.serving import create_app
        >>> with background(create_app(judge)) as server:
        ...     httpx.get(server.url + "/health").json()["status"]
        'ok'
    """
    import uvicorn

    server = _server(app, uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="pluie-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the judge server did not start on {host}:{port} (see the log above).")
        time.sleep(0.01)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    server.url = f"http://{host}:{bound_port}"
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(start_timeout)
