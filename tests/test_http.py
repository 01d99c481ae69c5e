"""The package's one exception base (``PluieError``) and its one HTTP client (``common/http.py``):
retries, ``Retry-After``, timeouts and errors, the same for the sync and async clients, against a
real server on 127.0.0.1."""

from __future__ import annotations

import ast
import builtins
import pickle
from pathlib import Path

import pytest

from pluie_reward.common.errors import PluieError, RemoteError

ROOT = Path(__file__).resolve().parents[1] / "pluie_reward"

# Exceptions that never reach a user: caught where they are raised (control flow).
PRIVATE = {
    "Interrupted": "tools/evaluation/cli.py",  # Ctrl-C during an evaluation, turned into exit code 130
}


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def package_classes() -> dict[str, tuple[str, list[str]]]:
    """Every class defined in pluie_reward (read with ``ast``: nothing imported): name -> (file, base names)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found[node.name] = (path.relative_to(ROOT).as_posix(), [_base_name(b) for b in node.bases])
    return found


def _builtin_exception(name: str) -> type | None:
    value = getattr(builtins, name, None)
    return value if isinstance(value, type) and issubclass(value, BaseException) else None


def test_every_package_exception_subclasses_pluie_error():
    classes = package_classes()

    def is_exception(name: str, seen: frozenset = frozenset()) -> bool:
        if _builtin_exception(name) is not None:
            return True
        if name not in classes or name in seen:
            return False
        return any(is_exception(b, seen | {name}) for b in classes[name][1])

    def is_pluie(name: str, seen: frozenset = frozenset()) -> bool:
        if name == "PluieError":
            return True
        if name not in classes or name in seen:
            return False
        return any(is_pluie(b, seen | {name}) for b in classes[name][1])

    def is_warning(name: str) -> bool:
        return any(issubclass(_builtin_exception(b) or Exception, Warning) for b in classes[name][1])

    exceptions = sorted(n for n in classes if any(is_exception(b) for b in classes[n][1]))
    for name in ("MissingColumnError", "RemoteEngineError", "RemoteJudgeError", "SharedModelBusy", "EngineAsleep", "ScoringError"):
        assert name in exceptions  # the walk sees the package's exceptions
    outside = [
        f"{classes[n][0]}: {n}({', '.join(classes[n][1])})"
        for n in exceptions
        if not is_pluie(n) and not is_warning(n) and PRIVATE.get(n) != classes[n][0]
    ]
    assert not outside, "exceptions that do not subclass PluieError:\n" + "\n".join(outside)
    for name, where in PRIVATE.items():  # the exemptions still exist where they are said to be
        assert classes.get(name, ("",))[0] == where


def test_errors_keep_their_builtin_bases():
    from pluie_reward import PluieError as exported
    from pluie_reward.integrations.fields import MissingColumnError
    from pluie_reward.core.prompt import AnswerTokenError
    from pluie_reward.engines.remote import RemoteEngineError
    from pluie_reward.serving.batcher import ScoringError, ShuttingDown
    from pluie_reward.serving.client import RemoteJudgeError

    assert exported is PluieError
    missing = MissingColumnError("no column 'x'")
    assert isinstance(missing, (KeyError, ValueError, PluieError)) and isinstance(missing, KeyError) and str(missing) == "no column 'x'"
    assert issubclass(AnswerTokenError, ValueError) and issubclass(ShuttingDown, RuntimeError)
    assert issubclass(ScoringError, PluieError)
    for remote in (RemoteEngineError, RemoteJudgeError):
        assert issubclass(remote, RemoteError) and issubclass(remote, RuntimeError) and issubclass(remote, PluieError)
    assert not issubclass(RemoteEngineError, RemoteJudgeError) and not issubclass(RemoteJudgeError, RemoteEngineError)
    err = RemoteJudgeError("http://h/score: HTTP 422: bad", 422, url="http://h/score", detail="bad")
    back = pickle.loads(pickle.dumps(err))  # errors cross process boundaries (Ray, verl workers)
    assert (type(back), str(back), back.status, back.url, back.detail) == (RemoteJudgeError, str(err), 422, "http://h/score", "bad")


# the HTTP client -------------------------------------------------------------------------------
import asyncio  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

from pluie_reward.common.http import RETRY_STATUS, AsyncHTTPClient, HTTPClient, HTTPConfig  # noqa: E402

FAST = dict(backoff=0.001, connect_timeout=2.0)  # short waits: the tests check counts, not back-off times


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        server = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with server.lock:
            server.calls.append((self.command, self.path, body))
            status, payload, headers, delay = server.answers.pop(0) if server.answers else (200, {"ok": True}, {}, 0.0)
        time.sleep(delay)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


class Scripted(ThreadingHTTPServer):
    """A server on 127.0.0.1 that gives ``answers`` in order: (status, JSON or bytes, headers, delay s);
    then 200 ``{"ok": true}``. ``calls`` records (method, path, body)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str, bytes]] = []
        self.answers: list[tuple[int, object, dict, float]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request, client_address) -> None:
        pass


@pytest.fixture
def server():
    srv = Scripted()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def send(kind: str, urls, config: HTTPConfig, method: str = "POST", path: str = "/score", body=None, **options):
    """One request with the sync or the async client; (answer, client stats)."""
    if kind == "sync":
        with HTTPClient(urls, config, **options) as client:
            return client.request(method, path, json=body), client.stats

    async def run():
        async with AsyncHTTPClient(urls, config, **options) as client:
            return await client.request(method, path, json=body), client.stats

    return asyncio.run(run())


def dead_url() -> str:
    from pluie_reward.tools.bench.server_load import free_port

    return f"http://127.0.0.1:{free_port()}"


KINDS = ["sync", "async"]


@pytest.mark.parametrize("kind", KINDS)
def test_transient_failures_are_retried_until_an_answer(server, kind):
    server.answers = [(503, {"detail": "busy"}, {}, 0.0), (503, {"detail": "busy"}, {}, 0.0), (200, {"logratio": [1.5]}, {}, 0.0)]
    answer, stats = send(kind, server.url, HTTPConfig(retries=3, **FAST), body={"source": ["a"]})
    assert answer == {"logratio": [1.5]}
    assert [c[:2] for c in server.calls] == [("POST", "/score")] * 3 and json.loads(server.calls[-1][2]) == {"source": ["a"]}
    assert stats == {"requests": 1, "retries": 2}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", sorted(RETRY_STATUS))
def test_every_retryable_status_is_retried(server, kind, status):
    server.answers = [(status, {"detail": "later"}, {}, 0.0)]
    assert send(kind, server.url, HTTPConfig(retries=1, **FAST))[0] == {"ok": True}
    assert len(server.calls) == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [400, 401, 404, 413, 422])
def test_client_errors_fail_at_once_with_status_and_message(server, kind, status):
    server.answers = [(status, {"detail": "bad field 'source'"}, {}, 0.0)]
    with pytest.raises(RemoteError) as caught:
        send(kind, server.url, HTTPConfig(retries=3, **FAST))
    err = caught.value
    assert (err.status, err.url, err.detail) == (status, server.url + "/score", "bad field 'source'")
    assert str(err) == f"{server.url}/score: HTTP {status}: bad field 'source'"
    assert len(server.calls) == 1  # never retried


@pytest.mark.parametrize("kind", KINDS)
def test_openai_style_messages_and_exhausted_retries(server, kind):
    server.answers = [(503, {"error": {"message": "engine overloaded", "code": 503}}, {}, 0.0)] * 3
    with pytest.raises(RemoteError, match=r"no judge server answered .*/v1/completions after 3 attempts \(last: HTTP 503: engine overloaded\)") as caught:
        send(kind, server.url, HTTPConfig(retries=2, **FAST), path="/v1/completions", name="judge server")
    assert (caught.value.status, caught.value.detail) == (503, "engine overloaded")
    assert len(server.calls) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_retry_after_is_honoured_and_bounded(server, kind):
    server.answers = [(429, {"detail": "slow down"}, {"Retry-After": "1"}, 0.0)]
    start = time.monotonic()
    assert send(kind, server.url, HTTPConfig(retries=1, **FAST))[0] == {"ok": True}
    assert time.monotonic() - start >= 0.95  # the server's 1 s, not the 1 ms back-off
    server.answers = [(503, {"detail": "down for maintenance"}, {"Retry-After": "3600"}, 0.0)]
    start = time.monotonic()
    assert send(kind, server.url, HTTPConfig(retries=1, max_delay=0.2, **FAST))[0] == {"ok": True}
    assert 0.15 <= time.monotonic() - start < 5  # an hour asked, max_delay waited


@pytest.mark.parametrize("kind", KINDS)
def test_timeouts_raise_the_package_error(server, kind):
    server.answers = [(200, {"late": True}, {}, 1.5)] * 2
    start = time.monotonic()
    with pytest.raises(RemoteError, match=r"after 2 attempts \(last: ReadTimeout") as caught:
        send(kind, server.url, HTTPConfig(timeout=0.2, retries=1, **FAST))
    assert time.monotonic() - start < 1.4  # two 0.2 s timeouts, not the server's 1.5 s
    assert caught.value.status is None and isinstance(caught.value, PluieError)
    assert len(server.calls) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_unreachable_server_and_replica_fail_over(server, kind):
    dead = dead_url()
    with pytest.raises(RemoteError, match=r"no server answered .* after 2 attempts \(last: ConnectError") as caught:
        send(kind, dead, HTTPConfig(retries=1, **FAST))
    assert caught.value.status is None and caught.value.url == dead + "/score"
    answer, stats = send(kind, [dead, server.url], HTTPConfig(retries=1, **FAST))  # the dead replica is tried first
    assert answer == {"ok": True} and stats == {"requests": 1, "retries": 1} and len(server.calls) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_json_answer_is_an_error(server, kind):
    server.answers = [(200, b"<html>proxy page</html>", {"Content-Type": "text/html"}, 0.0)]
    with pytest.raises(RemoteError, match="not JSON") as caught:
        send(kind, server.url, HTTPConfig(retries=3, **FAST))
    assert caught.value.status == 200 and len(server.calls) == 1


def test_config_is_checked_and_timeouts_split():
    with pytest.raises(ValueError, match="retries must be >= 0"):
        HTTPConfig(retries=-1)
    with pytest.raises(ValueError, match="timeout"):
        HTTPConfig(timeout=0)
    timeout = HTTPConfig(timeout=30, connect_timeout=5).httpx_timeout()
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (5, 30, 30, 30)
    assert HTTPConfig(timeout=2, connect_timeout=5).httpx_timeout().connect == 2
    delays = [HTTPConfig(backoff=1.0, max_delay=5).delay(k) for k in range(5)]
    assert all(0.5 * min(2**k, 5) <= d <= min(2**k, 5) for k, d in enumerate(delays))


# the remote paths use it ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_judge_server_client_raises_remote_judge_error(server, kind):
    from pluie_reward.serving.client import RemoteJudgeError, apost_json, post_json

    server.answers = [(503, {"detail": "busy"}, {}, 0.0)] * 2 + [(200, {"logratio": [0.5]}, {}, 0.0), (422, {"detail": "no 'source'"}, {}, 0.0)]
    call = post_json if kind == "sync" else (lambda *a, **k: asyncio.run(apost_json(*a, **k)))
    assert call(server.url + "/score", {}, retries=3, backoff=0.001, token="secret") == {"logratio": [0.5]}
    with pytest.raises(RemoteJudgeError, match="HTTP 422: no 'source'") as caught:
        call(server.url + "/score", {}, retries=3, backoff=0.001)
    assert caught.value.status == 422 and caught.value.url == server.url + "/score" and len(server.calls) == 4


def test_remote_engine_uses_the_client(server):
    from pluie_reward.engines.remote import RemoteEngine, RemoteEngineError

    server.answers = [(502, b"Bad Gateway", {"Content-Type": "text/plain"}, 0.0), (200, {"data": [{"id": "judge", "max_model_len": 64}]}, {}, 0.0)]
    engine = RemoteEngine(server.url + "/v1", tokenizer=object(), backoff=0.001, api_key="k")
    try:
        assert engine.model == "judge" and engine.stats == {"requests": 1, "retries": 1} and engine.replicas[0].url == server.url
        server.answers = [(400, {"error": {"message": "prompt too long", "type": "BadRequestError", "code": 400}}, {}, 0.0)]
        with pytest.raises(RemoteEngineError, match="HTTP 400: prompt too long") as caught:
            engine._run(engine._completions([[1, 2, 3]], max_tokens=1))
        assert caught.value.status == 400 and caught.value.url == server.url + "/v1/completions"
    finally:
        engine.close()
    assert not engine._thread.is_alive()
