"""The judge server under N concurrent clients: throughput and p50/p99 latency, per engine.

``pluie-reward serve --engine ENGINE`` runs as a subprocess on a free port of 127.0.0.1; after ``/health`` and
one untimed request, ``clients`` concurrent clients each post ``requests`` requests of ``items`` distinct MRPC
pairs to ``/score`` (no item twice: the result cache never answers). Latency is per request; throughput is items
over the load's wall time. No retry (:mod:`pluie_reward.common.http`): a failed request counts as an error.

Example:
    $ pluie-reward bench server --clients 4 --engines transformers,vllm
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..report import markdown_table, number
from ..shared import UsageError, positive_int
from .measure import Clock, child_env

MAX_CLIENTS = 64
MAX_REQUESTS = 1000  # clients x requests per client


def check_load(clients: int, requests: int, items: int, pairs_available: int) -> None:
    """Refuse a load the benchmark would not run sensibly (before anything starts).

    Example:
        >>> check_load(4, 4, 8, 5000)
        >>> check_load(0, 4, 8, 5000)
        Traceback (most recent call last):
        ...
        pluie_reward.tools.shared.UsageError: --clients must be between 1 and 64, got 0.
    """
    if not 1 <= clients <= MAX_CLIENTS:
        raise UsageError(f"--clients must be between 1 and {MAX_CLIENTS}, got {clients}.")
    if requests < 1 or items < 1:
        raise UsageError("--requests and --items must be at least 1.")
    if clients * requests > MAX_REQUESTS:
        raise UsageError(f"--clients x --requests = {clients * requests} requests; keep it <= {MAX_REQUESTS}.")
    needed = (clients * requests + 1) * items
    if needed > pairs_available:
        raise UsageError(f"the load needs {needed} distinct pairs and the data file has {pairs_available}; "
                         "lower --clients, --requests or --items.")


def add_load_arguments(parser: argparse.ArgumentParser, clients: int, requests: int) -> None:
    """The options of a load (``bench server``): the served judge, clients, requests, items per request."""
    parser.add_argument("--model", default=None, help="the served judge (default: the embedded default judge)")
    parser.add_argument("--clients", type=positive_int, default=clients, help=f"concurrent clients (1 to {MAX_CLIENTS}, default {clients})")
    parser.add_argument("--requests", type=positive_int, default=requests, help=f"requests per client (default {requests})")
    parser.add_argument("--items", type=positive_int, default=8, help="distinct pairs per request (default 8)")


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerLoad:
    """One engine's server under load."""

    engine: str
    clients: int
    requests: int
    items: int
    start_seconds: float = 0.0
    wall_seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def items_per_second(self) -> float:
        done = len(self.latencies) * self.items
        return done / self.wall_seconds if self.wall_seconds > 0 else float("nan")

    @property
    def p50(self) -> float:
        import numpy as np  # here, not at module level: bench.cli imports this module at `pluie-reward --help`

        return float(np.quantile(self.latencies, 0.5)) if self.latencies else float("nan")

    @property
    def p99(self) -> float:
        import numpy as np  # lazy: CLI start-up

        return float(np.quantile(self.latencies, 0.99)) if self.latencies else float("nan")

    def as_json(self) -> dict[str, Any]:
        """The fields with items/s, p50 and p99: what ``--json`` holds per load."""
        return {**asdict(self), "items_per_second": self.items_per_second, "p50": self.p50, "p99": self.p99}


def start_server(engine: str, port: int, template: str, model: str | None, log_path: Path) -> subprocess.Popen:
    """``python -m pluie_reward serve`` in a new session, this checkout's package first on the path."""
    command = [sys.executable, "-m", "pluie_reward", "serve", "--engine", engine, "--port", str(port),
               "--host", "127.0.0.1", "--template", template, "--log-level", "warning"]
    if model is not None:
        command += ["--model", model]
    return launch(command, log_path)


def launch(command: list[str], log_path: Path, **environ: str) -> subprocess.Popen:
    """``command`` in a new session (:func:`stop_server` stops it), its output in ``log_path``; :func:`child_env` plus
    ``environ``, without a token (127.0.0.1 only; the loads send none)."""
    env = {**child_env(), **environ}
    env.pop("PLUIE_REWARD_TOKEN", None)
    with open(log_path, "w") as log:  # the child keeps its own copy of the file descriptor
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def stop_server(server: subprocess.Popen) -> None:
    """SIGINT to the server's session (it finishes in-flight requests), SIGKILL after 60 s."""
    if server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGINT)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


async def _wait_ready(url: str, server: subprocess.Popen, log_path: Path, timeout: float, path: str = "/health") -> None:
    """Poll ``path`` once a second until it answers JSON, the server exits, or ``timeout`` passes."""
    from ...common.http import AsyncHTTPClient, HTTPConfig, RemoteError  # optional: httpx

    deadline = time.monotonic() + timeout
    async with AsyncHTTPClient(url, HTTPConfig(timeout=5, retries=0)) as client:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"the server exited with code {server.returncode}; see {log_path}")
            try:
                await client.request("GET", path)
                return
            except RemoteError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer {path} within {timeout:.0f} s; see {log_path}")
            await asyncio.sleep(1)


def request_batches(pairs: Sequence[tuple[str, str]], clients: int, requests: int, items: int) -> list[dict[str, list[str]]]:
    """The ``/score`` bodies of a load: one warm-up request, then ``clients * requests``; request ``j``
    takes pairs ``j*items .. (j+1)*items - 1``.

    Example:
        >>> request_batches([("a", "b"), ("c", "d"), ("e", "f")], clients=1, requests=1, items=1)
        [{'source': ['a'], 'hypothesis': ['b']}, {'source': ['c'], 'hypothesis': ['d']}]
    """
    chunks = [pairs[j * items : (j + 1) * items] for j in range(clients * requests + 1)]
    return [{"source": [s for s, _ in chunk], "hypothesis": [h for _, h in chunk]} for chunk in chunks]


async def load_url(url: str, batches: list[dict[str, list[str]]], clients: int, result: ServerLoad) -> None:
    """Put the judge server at ``url`` under load: send ``batches[0]`` (warm-up, untimed),
    then the others from ``clients`` concurrent clients, recording into ``result``."""
    from ...common.http import AsyncHTTPClient, HTTPConfig, RemoteError  # optional: httpx

    async with AsyncHTTPClient(url, HTTPConfig(timeout=600, retries=0), name="judge server", max_connections=clients + 1) as client:
        await client.request("POST", "/score", json=batches[0])
        work = batches[1:]

        async def one_client(k: int) -> None:
            for body in work[k::clients]:
                clock = Clock()
                try:
                    answer = await client.request("POST", "/score", json=body)
                except RemoteError:
                    answer = None
                if isinstance(answer, dict) and len(answer.get("logratio") or []) == len(body["hypothesis"]):
                    result.latencies.append(clock.seconds)
                else:
                    result.errors += 1

        clock = Clock()
        await asyncio.gather(*(one_client(k) for k in range(clients)))
        result.wall_seconds = clock.seconds


def server_load(engine: str, pairs: Sequence[tuple[str, str]], clients: int, requests: int = 4, items: int = 8,
                template: str = "para-fs", model: str | None = None, start_timeout: float = 900.0) -> ServerLoad:
    """Start a server on ``engine`` (``pluie-reward serve --engine``), put it under load, stop it.

    Args:
        pairs: (source, hypothesis) pairs, ``items`` per request (:func:`request_batches`).
        clients, requests: concurrent clients (1..64), requests per client.
        model: ``--model`` of the server (default: the embedded judge).
        start_timeout: seconds to wait for the server's ``/health``.

    Returns:
        Latencies of every answered request, wall time, errors and the server's start time.

    Example:
        >>> load = server_load("transformers", pairs, clients=4)  # a `pluie-reward serve` subprocess under load: minutes  # doctest: +SKIP
        >>> load.items_per_second, load.p50, load.p99              # doctest: +SKIP
        (8.1, 3.9, 4.6)
    """
    try:
        import httpx  # noqa: F401  (the HTTP client's one requirement)
    except ModuleNotFoundError:
        raise UsageError("pluie-reward bench server needs httpx: pip install 'pluie-reward[serve]'") from None
    check_load(clients, requests, items, len(pairs))
    batches = request_batches(pairs, clients, requests, items)
    port = free_port()
    log_path = Path(tempfile.gettempdir()) / f"pluie-bench-server-{engine}-{port}.log"
    result = ServerLoad(engine, clients, requests, items)
    started = Clock()
    server = start_server(engine, port, template, model, log_path)
    try:
        url = f"http://127.0.0.1:{port}"
        asyncio.run(_wait_ready(url, server, log_path, start_timeout))
        result.start_seconds = started.seconds
        asyncio.run(load_url(url, batches, clients, result))
    finally:
        stop_server(server)
    return result


def format_server_table(loads: Sequence[ServerLoad]) -> str:
    """Server loads as a Markdown table."""
    if not loads:
        return ""
    first = loads[0]
    title = (f"Judge server under load ({first.clients} concurrent clients x {first.requests} requests x {first.items} distinct pairs, "
             "POST /score on 127.0.0.1; latency per request):")
    return markdown_table(
        ["engine", "server start s", "items/s", "p50 latency s", "p99 latency s", "requests ok", "errors"],
        [[x.engine, f"{x.start_seconds:.0f}", number(x.items_per_second), number(x.p50), number(x.p99), len(x.latencies), x.errors]
         for x in loads], "lrrrrrr", title)
