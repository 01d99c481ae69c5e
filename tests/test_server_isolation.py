"""One client of the judge server cannot hurt another's (issue 29): per-request options never share a
joined plan, a large request does not hold back small ones, a disconnected client's work is dropped,
SIGTERM answers everything within the drain bound, bodies over the limit get 413 (chunked too), every
5xx is logged with its reason and counted, and every numeric option of ``serve`` is checked
before anything loads.

References are ``Judge.score`` on a separate tiny judge with the same weights, in the test.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import signal
import socket
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from conftest import mrpc_pairs  # noqa: E402

from pluie_reward.serving.batcher import Batcher  # noqa: E402
from pluie_reward.testing import make_slow_tiny_judge, make_tiny_judge  # noqa: E402
from pluie_reward.serving import background, create_app  # noqa: E402

TOKEN = "iso-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TOL = 1e-3
LIMIT = 64_000  # the body limit of the shared server


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@pytest.fixture(scope="module")
def pairs() -> tuple[list[str], list[str]]:
    sources, hypotheses, _ = mrpc_pairs(40)
    return sources, hypotheses


@pytest.fixture(scope="module")
def reference(tiny_judge, pairs) -> list[float]:
    """Judge.score on the pairs, one call, on a judge the servers do not use."""
    return tiny_judge.score("para-fs", source=pairs[0], hypothesis=pairs[1], use_cache=False)


def metrics(url: str) -> dict:
    return httpx.get(url + "/metrics", headers=AUTH, timeout=30).json()


def wait_until(condition, seconds: float = 60.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass (a liveness bound, not a timing)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def raw_post(url: str, body: dict) -> socket.socket:
    """POST /score on a plain socket, so that the test can hang up while the server works."""
    address = urlparse(url)
    payload = json.dumps(body).encode()
    sock = socket.create_connection((address.hostname, address.port))
    sock.sendall(
        b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload
    )
    return sock


def big_request(n: int) -> dict:
    """n distinct items (no result-cache hit), each a slow engine call in chunks of 2."""
    return {"source": [f"big source number {i}" for i in range(n)], "hypothesis": [f"big hypothesis {i}" for i in range(n)]}


# options of one request never reach another ---------------------------------------------------
def test_requests_with_different_options_never_share_a_joined_plan(pairs, reference):
    sources, hypotheses = pairs
    batcher = Batcher(make_tiny_judge(), "para-fs", max_wait_ms=300).start()
    options = [{}, {"use_cache": False}, {"threshold": 0.5}, {"threshold": -2.0, "use_cache": True}, {"use_cache": False, "threshold": 0}]
    try:
        futures = [
            batcher.submit({"source": sources[2 * k : 2 * k + 2], "hypothesis": hypotheses[2 * k : 2 * k + 2], **options[k % len(options)]})
            for k in range(10)
        ]
        for k, future in enumerate(futures):
            i, option = 2 * k, options[k % len(options)]
            got = future.result(60)
            assert [r["logratio"] for r in got] == pytest.approx(reference[i : i + 2], abs=TOL)
            threshold = option.get("threshold", 0.0)
            assert [r["verdict"] for r in got] == [reference[j] > threshold for j in (i, i + 1)]
    finally:
        batcher.close()


OPTION_ERRORS = [
    ({"details": False}, "'details' is set by the server"),
    ({"truncate": False}, "'truncate' is set by the server"),
    ({"max_new_tokens": 4}, "'max_new_tokens' is set by the server"),
    ({"template": "rev"}, "'template' is set by the server"),
    ({"use_cache": "no"}, "'use_cache' must be true or false"),
    ({"threshold": "high"}, "'threshold' must be a finite number"),
    ({"threshold": True}, "'threshold' must be a finite number"),
]


@pytest.mark.parametrize("option, message", OPTION_ERRORS, ids=[next(iter(o)) + "=" + repr(next(iter(o.values()))) for o, _ in OPTION_ERRORS])
def test_options_a_client_may_not_set_get_422(option, message):
    batcher = Batcher(make_tiny_judge(), "para-fs")
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        batcher.submit({"source": ["a"], "hypothesis": ["b"], **option})


def test_non_finite_threshold_in_a_body_gets_422(pairs):
    app = create_app(make_tiny_judge(), "para-fs", max_wait_ms=0)
    with background(app) as srv:
        for text in ("NaN", "Infinity", "-Infinity"):
            body = '{"source": ["a"], "hypothesis": ["b"], "threshold": %s}' % text
            got = httpx.post(srv.url + "/score", content=body, headers={"content-type": "application/json"}, timeout=60)
            assert got.status_code == 422 and "'threshold' must be a finite number" in got.text, got.text


def test_an_error_in_a_part_names_the_item_of_the_request(pairs):
    """A request cut into parts of 2 items whose 4th item is too long: the error names item 3 (of
    the request), not item 1 (of its part), and no result of the request is returned."""
    batcher = Batcher(make_tiny_judge(), "para-fs", max_wait_ms=0, max_batch_items=2, truncate=False).start()
    try:
        hypotheses = list(pairs[1][:5])
        hypotheses[3] = "word " * 6000
        future = batcher.submit({"source": pairs[0][:5], "hypothesis": hypotheses})
        with pytest.raises(Exception, match=r"item 3\b.*longer than the judge's context"):
            future.result(60)
    finally:
        batcher.close()


# a large request does not stall the others; a client that hung up loses its work ------------------
def test_a_large_request_does_not_hold_back_small_ones(pairs, reference):
    judge = make_slow_tiny_judge(1.0, min_requests=2)  # each chunk of the big request takes 1 s; 1-item calls do not wait
    app = create_app(judge, "para-fs", max_wait_ms=0, max_batch_items=2, max_items_per_request=1024)
    with background(app) as srv:
        sock = raw_post(srv.url, big_request(200))  # 100 chunks: 100 s alone
        try:
            assert wait_until(lambda: metrics(srv.url)["batches"] >= 1)  # the big request is being scored
            for i in range(3):
                small = httpx.post(srv.url + "/score", json={"source": pairs[0][i : i + 1], "hypothesis": pairs[1][i : i + 1]}, timeout=60)
                assert small.status_code == 200, small.text
                assert small.json()["logratio"][0] == pytest.approx(reference[i], abs=TOL)
            queued_requests, queued_items = app.state.batcher.pending
            assert queued_requests == 1 and 0 < queued_items < 200  # the big one is still running, cut into chunks
        finally:
            sock.close()


def test_work_of_a_disconnected_client_is_dropped():
    judge = make_slow_tiny_judge(1.0, min_requests=2)
    app = create_app(judge, "para-fs", max_wait_ms=0, max_batch_items=2, max_items_per_request=1024)
    with background(app) as srv:
        sock = raw_post(srv.url, big_request(200))
        assert wait_until(lambda: metrics(srv.url)["batches"] >= 1)
        sock.close()  # the client hangs up after its first chunk
        assert wait_until(lambda: app.state.batcher.pending == (0, 0), 30)  # its 99 other chunks are dropped
        after = metrics(srv.url)
        assert after["batches"] < 30
        assert after["requests"]["by_status"].get("499") == 1  # counted as "client closed the request"


def test_a_client_that_hangs_up_mid_upload_is_counted_499_not_a_server_error(caplog):
    app = create_app(make_tiny_judge(), "para-fs", max_wait_ms=0)
    with background(app) as srv, caplog.at_level(logging.WARNING, logger="pluie_reward"):
        address = urlparse(srv.url)
        sock = socket.create_connection((address.hostname, address.port))
        sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                     b'{"source": ["a"], ')
        sock.close()  # the client leaves before the rest of its body
        assert wait_until(lambda: metrics(srv.url)["requests"]["by_status"].get("499") == 1, 30)
        after = metrics(srv.url)
    assert after["requests"]["server_errors"] == 0 and "500" not in after["requests"]["by_status"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


# SIGTERM drains within its bound ----------------------------------------------------------------
def test_sigterm_answers_every_request_within_the_drain_bound(pairs, reference):
    judge = make_slow_tiny_judge(1.0, min_requests=2)
    app = create_app(judge, "para-fs", max_wait_ms=0, max_batch_items=2, max_items_per_request=1024, shutdown_timeout=1.0)
    answers: dict[str, httpx.Response] = {}

    def client(name: str, body: dict) -> None:
        answers[name] = httpx.post(srv.url + "/score", json=body, timeout=300)

    with background(app) as srv:
        big = threading.Thread(target=client, args=("big", big_request(200)))  # 100 s of work
        big.start()
        assert wait_until(lambda: metrics(srv.url)["batches"] >= 1)
        srv.handle_exit(signal.SIGTERM, None)  # what uvicorn's signal handler calls
        big.join(30)
        assert not big.is_alive(), "the server kept the request past its drain bound"
    assert answers["big"].status_code == 503 and "shutting down" in answers["big"].text


# bodies over the limit: 413, with or without Content-Length ----------------------------------
def test_chunked_body_over_the_limit_gets_413():
    app = create_app(make_tiny_judge(), "para-fs", max_wait_ms=0, max_body_bytes=LIMIT)
    payload = json.dumps({"source": ["a" * (2 * LIMIT)], "hypothesis": ["b"]}).encode()

    def chunks():
        for start in range(0, len(payload), 8192):
            yield payload[start : start + 8192]

    with background(app) as srv:
        streamed = httpx.post(srv.url + "/score", content=chunks(), headers={"content-type": "application/json"}, timeout=60)
        sized = httpx.post(srv.url + "/score", content=payload, headers={"content-type": "application/json"}, timeout=60)
        small = httpx.post(srv.url + "/score", content=(p for p in [b'{"source": ["a"], ', b'"hypothesis": ["b"]}']),
                           headers={"content-type": "application/json"}, timeout=60)
    assert "content-length" not in streamed.request.headers
    assert streamed.status_code == 413 and "Too Large" in streamed.text, streamed.text
    assert sized.status_code == 413 and "Too Large" in sized.text
    assert small.status_code == 200, small.text  # a chunked body within the limit is read as usual


# every 5xx: logged with its reason, counted -------------------------------------------------------
def test_every_5xx_is_logged_with_its_reason_and_counted(caplog):
    judge = make_tiny_judge()

    def broken(*args, **kwargs):
        raise RuntimeError("the engine fell over")

    judge.engine.answer_logprobs = broken
    app = create_app(judge, "para-fs", max_wait_ms=0)
    with caplog.at_level(logging.WARNING, logger="pluie_reward.server"), background(app) as srv:
        failed = httpx.post(srv.url + "/score", json={"source": ["a"], "hypothesis": ["b"]}, timeout=60)

        async def kaput(fields):
            raise KeyError("a bug in the server")

        app.state.batcher.score = kaput  # an exception no handler expects
        crashed = httpx.post(srv.url + "/score", json={"source": ["a"], "hypothesis": ["b"]}, timeout=60)
        counted = metrics(srv.url)
    assert failed.status_code == 500 and "the engine fell over" in failed.text
    assert crashed.status_code == 500
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name == "pluie_reward.server"]
    assert any("-> 500" in e and "the engine fell over" in e for e in errors), errors
    assert any("-> 500" in e and "a bug in the server" in e for e in errors), errors
    assert counted["requests"]["by_status"]["500"] == 2
    assert counted["requests"]["server_errors"] == 2


# many clients at once: every allowed option, bad and oversized bodies ---------------------------------
def test_mixed_clients_each_get_their_own_answer(pairs, reference):
    """Good requests carry every option a client may set (``threshold``, ``use_cache``), in every
    combination, beside a large request (cut into chunks), bad bodies (422) and bodies over the limit
    (413, with and without Content-Length): every good request gets its reference score."""
    sources, hypotheses = pairs
    app = create_app(make_tiny_judge(), "para-fs", token=TOKEN, max_wait_ms=50, max_batch_items=8,
                     max_items_per_request=64, max_body_bytes=LIMIT)
    options = [{}, {"use_cache": False}, {"use_cache": True}, {"threshold": 0.25}, {"threshold": -1},
               {"threshold": 0.0, "use_cache": False}, {"use_cache": True, "threshold": 1.5}]
    good = []  # (body, first pair, items, threshold)
    for k in range(42):
        a = (3 * k) % 37
        n = 1 + k % 3
        option = options[k % len(options)]
        body = {"source": sources[a : a + n], "hypothesis": hypotheses[a : a + n], **option}
        if k % 10 == 9:  # one shared source for all items
            body["source"] = sources[a]
            good.append((body, None, (a, n), option.get("threshold", 0.0)))
        else:
            good.append((body, a, n, option.get("threshold", 0.0)))
    good.append(({"source": sources, "hypothesis": hypotheses, "threshold": 0.1}, 0, len(sources), 0.1))  # 5 chunks
    oversized = json.dumps({"source": ["x" * (LIMIT + 10)], "hypothesis": ["y"]}).encode()
    bad = [
        ({"source": ["a"], "hypothesis": ["b"], "use_cache": "yes"}, 422),
        ({"source": ["a"], "hypothesis": ["b"], "details": True}, 422),
        ({"source": ["a"], "hypothesis": ["b"], "threshold": "NaN"}, 422),
        ({"src": ["a"], "hypothesis": ["b"]}, 422),
        ({"source": ["a", "b"], "hypothesis": ["c"]}, 422),
        ('{"source": ["a"], "hypothesis": ', 422),
        ({"source": ["a"] * 65, "hypothesis": ["b"] * 65}, 413),
        (oversized, 413),  # with Content-Length
        (iter([oversized[i : i + 4096] for i in range(0, len(oversized), 4096)]), 413),  # chunked, no Content-Length
    ]

    async def post(client: httpx.AsyncClient, body) -> httpx.Response:
        if isinstance(body, dict):
            content = json.dumps(body).encode()
        elif isinstance(body, str):
            content = body.encode()
        elif isinstance(body, bytes):
            content = body
        else:
            parts = list(body)

            async def stream():
                for part in parts:
                    yield part

            content = stream()
        return await client.post("/score", content=content, headers={**AUTH, "content-type": "application/json"})

    async def everyone(url: str):
        limit = asyncio.Semaphore(16)
        async with httpx.AsyncClient(base_url=url, timeout=300, limits=httpx.Limits(max_connections=32)) as client:
            async def one(body):
                async with limit:
                    return await post(client, body)

            bodies = [b for b, *_ in good] + [b for b, _ in bad]
            order = sorted(range(len(bodies)), key=lambda i: (i * 7) % len(bodies))  # bad bodies among the good
            answers = await asyncio.gather(*(one(bodies[i]) for i in order))
            return {i: answer for i, answer in zip(order, answers)}

    with background(app) as srv:
        answers = asyncio.run(everyone(srv.url))
        counted = metrics(srv.url)
    for index, (body, a, n, threshold) in enumerate(good):
        response = answers[index]
        assert response.status_code == 200, (body, response.text)
        got = response.json()
        if a is None:  # shared source: score each item independently
            start, size = n
            want = [make_reference_one(sources[start], hypotheses[j]) for j in range(start, start + size)]
        else:
            want = reference[a : a + n]
        assert got["logratio"] == pytest.approx(want, abs=TOL)
        assert got["p_yes"] == pytest.approx([sigmoid(w) for w in want], abs=TOL)
        assert got["verdict"] == [w > threshold for w in want]
    for k, (body, status) in enumerate(bad):
        response = answers[len(good) + k]
        assert response.status_code == status, response.text
    assert not [s for s in counted["requests"]["by_status"] if s.startswith("5")]
    assert counted["queue"] == {"requests": 0, "items": 0}


_REFERENCE_JUDGE = []


def make_reference_one(source: str, hypothesis: str) -> float:
    """Judge.score of one item on an independent tiny judge (same weights)."""
    if not _REFERENCE_JUDGE:
        _REFERENCE_JUDGE.append(make_tiny_judge())
    return _REFERENCE_JUDGE[0].score("para-fs", source=[source], hypothesis=[hypothesis], use_cache=False)[0]
