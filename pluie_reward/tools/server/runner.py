"""Run the judge server with uvicorn: in the foreground (CLI) or in a background thread (tests, notebooks)."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator


def run(app: Any, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info", graceful_timeout: float | None = None) -> None:
    """Serve ``app`` until SIGINT/SIGTERM; in-flight requests finish before the process exits.

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
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=graceful_timeout)


@contextmanager
def background(app: Any, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 60.0) -> Iterator[Any]:
    """Serve ``app`` from a daemon thread; yields the ``uvicorn.Server`` (its ``url`` attribute is set).

    ``port=0`` picks a free port. Leaving the block shuts the server down gracefully.

    Example:
        >>> import httpx
        >>> from pluie_reward.tools.server import create_app
        >>> with background(create_app(judge)) as server:
        ...     httpx.get(server.url + "/health").json()["status"]
        'ok'
    """
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
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
