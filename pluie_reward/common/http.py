"""One HTTP client for every remote path: the remote vLLM engine (:mod:`pluie_reward.engines.remote`),
the judge server's clients for TRL, verl and OpenRLHF (:mod:`pluie_reward.serving.client`) and
the server benchmark. :class:`HTTPClient` and :class:`AsyncHTTPClient` send JSON and return the
decoded JSON answer; both follow one policy:

* **timeouts** (:class:`HTTPConfig`): ``connect_timeout`` to open a connection, ``timeout`` for
  the rest (write, read, waiting for a pooled connection).
* **retries**: at most ``retries`` more attempts (so ``retries + 1`` in all) after a connection
  error, a timeout, or an answer whose status is in :data:`RETRY_STATUS`. The wait before retry
  ``k`` (0-based) is ``backoff * 2**k`` seconds times a random factor in [0.5, 1] (so clients that
  failed together do not come back together), at most ``max_delay``; a ``Retry-After`` header
  (seconds or an HTTP date) on the answer replaces it, also capped at ``max_delay``.
* **replicas**: given several base URLs, each attempt goes to the one with the fewest requests in
  flight, then the fewest failures since its last success, so a retry lands on another replica.
* **errors**: any other status >= 400 fails at once. Every failure raises :class:`RemoteError` (or
  the subclass the caller names) carrying ``url``, ``status`` (``None`` when no answer came) and
  ``detail``, the server's own message.

408, 429, 502, 503 and 504 say "not now". 500 is retried too: every request this package sends is
idempotent, and 500 is how vLLM (its engine died: a retry on another replica is the fail-over) and the
judge server (a batch failed, not by the request's fault) report failures that are not the request's.
Other 4xx are the request's fault and are never retried.

Example:
    >>> from pluie_reward.serving import background, create_app
    >>> config = HTTPConfig(timeout=30, retries=2)
    >>> with background(create_app(judge, "para-fs")) as server:  # a judge server, e.g. http://127.0.0.1:8000
    ...     with HTTPClient(server.url, config, name="judge server") as client:
    ...         client.request("POST", "/score", json={"source": ["a"], "hypothesis": ["b"]})
    {'logratio': [...], 'p_yes': [...], 'verdict': [...]}
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import json as jsonlib
import math
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from .errors import RemoteError, missing_extra

try:
    import httpx
except ModuleNotFoundError as err:
    raise missing_extra(err, "pluie-reward's HTTP client (RemotePluieReward, Judge.connect, verl's compute_score)") from None

__all__ = ["RETRY_STATUS", "AsyncHTTPClient", "HTTPClient", "HTTPConfig", "RemoteError", "Replica", "base_url", "retry_after",
           "server_message"]

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
DETAIL_CHARS = 1000


@dataclass(frozen=True)
class HTTPConfig:
    """Timeouts and retries of one client (see the module's docstring for the policy).

    Args:
        timeout: seconds for writing the request, reading the answer, and waiting for a pooled connection.
        connect_timeout: seconds to open a connection (at most ``timeout``).
        retries: attempts after the first one (0: no retry).
        backoff: seconds before the first retry; doubled at each further one.
        max_delay: the longest wait between two attempts, ``Retry-After`` included.

    Example:
        >>> HTTPConfig(retries=2, backoff=0.1).delay(0, retry_after=60.0)
        30.0
        >>> HTTPConfig(retries=-1)
        Traceback (most recent call last):
        ...
        ValueError: retries must be >= 0, got -1.
    """

    timeout: float = 120.0
    connect_timeout: float = 10.0
    retries: int = 3
    backoff: float = 0.5
    max_delay: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}.")
        if not self.timeout > 0 or not self.connect_timeout > 0:
            raise ValueError(f"timeout and connect_timeout must be > 0, got {self.timeout} and {self.connect_timeout}.")
        if self.backoff < 0 or self.max_delay < 0:
            raise ValueError(f"backoff and max_delay must be >= 0, got {self.backoff} and {self.max_delay}.")

    def httpx_timeout(self) -> httpx.Timeout:
        """The timeouts as httpx takes them."""
        return httpx.Timeout(self.timeout, connect=min(self.connect_timeout, self.timeout))

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``attempt`` (0-based).

        Args:
            attempt: how many retries came before this one.
            retry_after: the server's ``Retry-After`` in seconds, if it sent one.

        Returns:
            ``retry_after`` if given, else ``backoff * 2**attempt`` times a factor in [0.5, 1];
            at most ``max_delay``.
        """
        if retry_after is not None:
            return min(retry_after, self.max_delay)
        return min(self.backoff * 2.0 ** attempt, self.max_delay) * random.uniform(0.5, 1.0)


@dataclass
class Replica:
    """One base URL of a client, with what the replica choice reads."""

    url: str
    in_flight: int = 0
    failures: int = 0  # failed attempts since the last success


def retry_after(response: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds (a number or an HTTP date), or None.

    Args:
        response: an HTTP answer.

    Returns:
        Seconds to wait (>= 0), or None when the header is absent or unreadable.

    Example:
        >>> retry_after(httpx.Response(503, headers={"Retry-After": "2"}))
        2.0
        >>> retry_after(httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}))  # past
        0.0
        >>> retry_after(httpx.Response(503)) is None
        True
    """
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def server_message(response: httpx.Response) -> str:
    """What the server said about a failure: FastAPI's ``detail``, an OpenAI-style ``error.message``
    (vLLM), a ``message``, or the start of the body.

    Example:
        >>> server_message(httpx.Response(422, json={"detail": "bad field"}))
        'bad field'
        >>> server_message(httpx.Response(400, json={"error": {"message": "too long", "code": 400}}))
        'too long'
        >>> server_message(httpx.Response(502, text="Bad Gateway"))
        'Bad Gateway'
    """
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        for said in (body.get("detail"), error.get("message") if isinstance(error, dict) else error, body.get("message")):
            if said:
                return (said if isinstance(said, str) else jsonlib.dumps(said, ensure_ascii=False))[:DETAIL_CHARS]
    return response.text[:DETAIL_CHARS] or response.reason_phrase


def base_url(address: str) -> str:
    """The base URL of an address given as ``host:port``, ``[ipv6]:port`` or a URL (verl's ``reward_router_address``).

    Example:
        >>> base_url("10.0.0.5:40123"), base_url("[::1]:8000"), base_url("http://judge:8000/")
        ('http://10.0.0.5:40123', 'http://[::1]:8000', 'http://judge:8000')
    """
    address = str(address).strip().rstrip("/")
    return address if address.startswith(("http://", "https://")) else f"http://{address}"


def _urls(urls: str | Sequence[str]) -> list[Replica]:
    replicas = [Replica(str(u).rstrip("/")) for u in ([urls] if isinstance(urls, str) else urls)]
    if not replicas:
        raise ValueError("an HTTP client needs at least one URL.")
    return replicas


class _Policy:
    """What the sync and async clients share: the replica choice and the meaning of each outcome."""

    _transport: Any  # httpx.Client or httpx.AsyncClient: what a client without ``client=`` opens

    def __init__(
        self, urls: str | Sequence[str], config: HTTPConfig | None = None, *, headers: Mapping[str, str] | None = None,
        name: str = "server", error: type[RemoteError] = RemoteError, client: Any = None, max_connections: int = 100,
    ) -> None:
        self.replicas = _urls(urls)
        self.config = config or HTTPConfig()
        self.headers = dict(headers or {})
        self.name, self.error = name, error
        self.stats = {"requests": 0, "retries": 0}  # answered requests, retried attempts
        self._timeout = self.config.httpx_timeout()
        self._own = client is None
        self._http = client if client is not None else self._transport(
            timeout=self._timeout, limits=httpx.Limits(max_connections=max_connections)
        )

    def _pick(self) -> Replica:
        return min(self.replicas, key=lambda r: (r.in_flight, r.failures))

    def _settle(self, attempt: int, replica: Replica, path: str, outcome: httpx.Response | httpx.RequestError) -> float | None:
        """None when ``outcome`` is an answer to return; else the seconds to wait before the next
        attempt. Raises the client's error when the failure is final."""
        url = replica.url + path
        status = detail = None
        wait: float | None = None
        if isinstance(outcome, httpx.Response):
            status = outcome.status_code
            if status < 400:
                replica.failures = 0
                self.stats["requests"] += 1
                return None
            detail = server_message(outcome)
            if status not in RETRY_STATUS:
                raise self.error(f"{url}: HTTP {status}: {detail}", status, url=url, detail=detail)
            last, wait = f"HTTP {status}: {detail}", retry_after(outcome)
        else:
            last = f"{type(outcome).__name__}: {outcome}" if str(outcome) else type(outcome).__name__
            if not isinstance(outcome, httpx.TransportError) or isinstance(outcome, httpx.UnsupportedProtocol):
                raise self.error(f"{url}: {last}", url=url) from outcome
        replica.failures += 1
        if attempt >= self.config.retries:
            n = attempt + 1
            raise self.error(
                f"no {self.name} answered {url} after {n} attempt{'s' * (n > 1)} (last: {last})", status, url=url, detail=detail
            ) from (outcome if isinstance(outcome, Exception) else None)
        self.stats["retries"] += 1
        return self.config.delay(attempt, wait)

    def _json(self, replica: Replica, path: str, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            url = replica.url + path
            raise self.error(
                f"{url}: HTTP {response.status_code} but the answer is not JSON: {response.text[:200]!r}",
                response.status_code, url=url,
            ) from None


class HTTPClient(_Policy):
    """A synchronous JSON client with the module's timeouts, retries and errors.

    Args:
        urls: one base URL or several (replicas); requests go to ``<base URL><path>``.
        config: timeouts and retries (default :class:`HTTPConfig`).
        headers: sent with every request (e.g. ``{"Authorization": "Bearer ..."}``).
        name: what the server is, for messages ("no judge server answered ...").
        error: the :class:`RemoteError` subclass to raise.
        client: an ``httpx.Client`` to send with (kept open on :meth:`close`); default: a new one.
        max_connections: the new client's connection pool size.

    Example:
        >>> client = HTTPClient("http://127.0.0.1:8000", HTTPConfig(retries=1))
        >>> [r.url for r in client.replicas], client.config.retries
        (['http://127.0.0.1:8000'], 1)
        >>> client.close()
    """

    _transport = httpx.Client

    def request(self, method: str, path: str = "", *, json: Any = None) -> Any:
        """Send a request (retrying as the policy says) and return its decoded JSON answer.

        Args:
            method: ``GET``, ``POST``...
            path: appended to the chosen replica's base URL (``""``: the base URL itself).
            json: the body, sent as JSON (None: no body).

        Returns:
            The answer's JSON.

        Raises:
            RemoteError: (the client's ``error``) the server refused the request, or no attempt got an answer.
        """
        for attempt in itertools.count():
            replica = self._pick()
            replica.in_flight += 1
            try:
                outcome: httpx.Response | httpx.RequestError = self._http.request(
                    method, replica.url + path, json=json, headers=self.headers, timeout=self._timeout
                )
            except httpx.RequestError as err:
                outcome = err
            finally:
                replica.in_flight -= 1
            wait = self._settle(attempt, replica, path, outcome)
            if wait is None:
                return self._json(replica, path, outcome)  # type: ignore[arg-type]
            time.sleep(wait)

    def close(self) -> None:
        """Close the connections (unless the ``httpx.Client`` was given)."""
        if self._own:
            self._http.close()

    def __enter__(self) -> "HTTPClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncHTTPClient(_Policy):
    """The asynchronous :class:`HTTPClient` (same arguments, ``client`` an ``httpx.AsyncClient``).

    Example:
        >>> async def health(url):
        ...     async with AsyncHTTPClient(url, HTTPConfig(retries=0)) as client:
        ...         return await client.request("GET", "/health")
        >>> from pluie_reward.serving import background, create_app
        >>> with background(create_app(judge, "para-fs")) as server:  # a judge server, e.g. http://127.0.0.1:8000
        ...     asyncio.run(health(server.url))
        {'status': 'ok', ...}
    """

    _transport = httpx.AsyncClient

    async def request(self, method: str, path: str = "", *, json: Any = None) -> Any:
        """Async :meth:`HTTPClient.request`."""
        for attempt in itertools.count():
            replica = self._pick()
            replica.in_flight += 1
            try:
                outcome: httpx.Response | httpx.RequestError = await self._http.request(
                    method, replica.url + path, json=json, headers=self.headers, timeout=self._timeout
                )
            except httpx.RequestError as err:
                outcome = err
            finally:
                replica.in_flight -= 1
            wait = self._settle(attempt, replica, path, outcome)
            if wait is None:
                return self._json(replica, path, outcome)  # type: ignore[arg-type]
            await asyncio.sleep(wait)

    async def aclose(self) -> None:
        """Close the connections (unless the ``httpx.AsyncClient`` was given)."""
        if self._own:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncHTTPClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
