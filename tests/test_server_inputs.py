"""Bad inputs and configuration on the judge server's paths (issue 55): a real uvicorn server on 127.0.0.1
(free port, background thread) and a tiny judge; references come from ``Judge.score`` or the local reward on
another judge instance, never from the server's own output."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from urllib.parse import urlparse

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from pluie_reward import PluieReward  # noqa: E402
from pluie_reward.serving import background, create_app  # noqa: E402
from pluie_reward.serving.client import RemotePluieReward, compute_score, compute_score_batch  # noqa: E402
from pluie_reward.testing import make_tiny_judge  # noqa: E402

TOL = 1e-3
SOURCES = ["The cat sleeps on the mat.", "It rained all day in Paris.", "She bought three red apples."]
HYPOTHESES = ["A cat is asleep on the mat.", "Paris had rain the whole day.", "She purchased three apples."]
BAD = "A cat\ud800 sleeps."
ITEM_CHARS = 300  # the shared server's --max-item-chars  # a lone surrogate: not UTF-8 text, cannot be sent as JSON


@pytest.fixture(scope="module")
def server():
    app = create_app(make_tiny_judge(), "para-fs", max_wait_ms=20, max_items_per_request=4, max_item_chars=ITEM_CHARS)
    with background(app, host="127.0.0.1", port=0) as srv:
        srv.app = app
        yield srv


# item 5.4: a lone surrogate fails alone, as the local path fails -------------------------------
def test_a_lone_surrogate_fails_alone_in_gathered_verl_calls(server, tiny_judge):
    want = tiny_judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES, use_cache=False)

    async def gathered():
        calls = [compute_score("d", h, s, url=server.url, max_wait_ms=200) for s, h in zip(SOURCES, HYPOTHESES)]
        calls.insert(1, compute_score("d", BAD, SOURCES[0], url=server.url, max_wait_ms=200))
        return await asyncio.gather(*calls, return_exceptions=True)

    got = asyncio.run(gathered())
    bad = got.pop(1)
    assert isinstance(bad, ValueError) and "field 'hypothesis': character 5 is a lone surrogate (\\ud800)" in str(bad)
    assert [g["logratio"] for g in got] == pytest.approx(want, abs=TOL)  # the others are scored


def test_remote_reward_refuses_a_lone_surrogate_as_the_local_reward_does(server, tiny_judge):
    completions, sources = [HYPOTHESES[0], HYPOTHESES[1], BAD], SOURCES[:2] + [SOURCES[0]]
    with pytest.raises(ValueError) as local:
        PluieReward(tiny_judge)(completions=completions, source=sources)
    remote = RemotePluieReward(server.url, chunk_size=2)  # the bad item is item 0 of the second chunk
    with pytest.raises(ValueError) as got:
        asyncio.run(remote(completions=completions, source=sources))
    assert str(got.value) == str(local.value) and "item 2" in str(got.value)
    with pytest.raises(ValueError, match="compute_score_batch: field 'hypothesis', item 1: character 5 is a lone surrogate"):
        compute_score_batch(["d", "d"], [HYPOTHESES[0], BAD], SOURCES[:2], url=server.url)


def test_openrlhf_remote_refuses_a_lone_surrogate_with_its_item(server, monkeypatch):
    from pluie_reward.serving import openrlhf

    monkeypatch.setenv("PLUIE_REWARD_URL", server.url)
    with pytest.raises(ValueError, match=r"field 'labels', item 0: character 5 is a lone surrogate \(\\ud800\)"):
        openrlhf.reward_func(["Q: hi\nA cat."], ["Q: hi\n"], [BAD])


def metrics(server) -> dict:
    return httpx.get(server.url + "/metrics", timeout=30).json()


# item 5.2: one long item cannot hold the judge for the others -----------------------------------
def test_an_item_over_the_character_limit_gets_413_before_any_scoring(server, tiny_judge):
    source = "The cat sleeps on the mat."
    fits = "x" * (ITEM_CHARS - len(source))  # exactly at the limit: scored
    before = metrics(server)
    for body in ({"source": source, "hypothesis": ["A cat.", fits + "y"]},  # a shared string counts for each item
                 {"source": [source, "a" * 400], "hypothesis": ["A cat.", "b"]}):
        got = httpx.post(server.url + "/score", json=body, timeout=60)
        assert got.status_code == 413, got.text
        assert got.json()["detail"].startswith(f"item 1: its fields hold {ITEM_CHARS + 1 if body['source'] == source else 401} "
                                               f"characters; this server takes at most {ITEM_CHARS} per item")
    query = "Paraphrase it.\n" + "z" * 400
    got = httpx.post(server.url + "/get_reward", json={"query": [query], "prompts": ["Paraphrase it.\n"], "labels": [source]},
                     timeout=60)
    assert got.status_code == 413 and "at most 300 per item" in got.text
    after = metrics(server)
    assert after["batches"] == before["batches"] and after["items"] == before["items"]  # the judge never ran
    ok = httpx.post(server.url + "/score", json={"source": source, "hypothesis": [fits]}, timeout=60)
    want = tiny_judge.score("para-fs", source=[source], hypothesis=[fits], use_cache=False)
    assert ok.status_code == 200 and ok.json()["logratio"] == pytest.approx(want, abs=TOL)


def test_serve_cli_bounds_items_by_default(monkeypatch):
    import pluie_reward.tools.server.cli as serve_cli
    from pluie_reward.tools.cli import main

    seen = {}
    monkeypatch.setattr(serve_cli, "judge_from_args", lambda args: make_tiny_judge())
    monkeypatch.setattr(serve_cli, "run", lambda app, **kwargs: seen.update(app=app))
    assert main(["serve"]) == 0
    assert seen["app"].state.batcher.max_item_chars == serve_cli.MAX_ITEM_CHARS == 16384
    assert main(["serve", "--max-item-chars", "0"]) == 2


# item 5.10: HEAD /health, and a client batch above the server's item limit ----------------------
def test_health_answers_head_and_names_the_limits(server):
    head = httpx.head(server.url + "/health", timeout=30)
    assert head.status_code == 200 and head.content == b""
    health = httpx.get(server.url + "/health", timeout=30).json()
    assert (health["max_items_per_request"], health["max_item_chars"]) == (4, ITEM_CHARS)


def test_client_batches_above_the_server_limit_are_split(server, tiny_judge):
    sources, hypotheses = SOURCES * 3, HYPOTHESES * 3  # 9 items; the server takes 4 per request
    want = tiny_judge.score("para-fs", source=sources, hypothesis=hypotheses, use_cache=False)
    before = metrics(server)["requests"]["by_path"].get("/score", 0)
    got = compute_score_batch(["d"] * 9, hypotheses, sources, url=server.url)
    assert got == pytest.approx(want, abs=TOL)
    assert metrics(server)["requests"]["by_path"]["/score"] - before == 1 + 3  # refused once (413), then 4 + 4 + 1
    remote = RemotePluieReward(server.url, chunk_size=256)
    assert asyncio.run(remote(completions=hypotheses, source=sources)) == pytest.approx(want, abs=TOL)
    with pytest.raises(Exception, match="at most 300 per item") as err:  # a long item is not split further
        compute_score_batch(["d"] * 3, ["a", "b" * 400, "c"], SOURCES, url=server.url)
    assert err.value.status == 413


def test_remote_reward_learns_the_server_item_limit_once(server, tiny_judge):
    """RemotePluieReward reads the server's item limit (4) from /health at its first call and cuts its requests to it:
    two calls of 9 items send 3 + 3 requests, none refused, and read /health once (each call used to be refused with
    413 and read /health again)."""
    sources, hypotheses = SOURCES * 3, HYPOTHESES * 3
    want = tiny_judge.score("para-fs", source=sources, hypothesis=hypotheses, use_cache=False)
    remote = RemotePluieReward(server.url, chunk_size=256)
    before = metrics(server)["requests"]
    for _ in range(2):
        assert asyncio.run(remote(completions=hypotheses, source=sources)) == pytest.approx(want, abs=TOL)
    after = metrics(server)["requests"]
    sent = {(key, name): after[key].get(name, 0) - before[key].get(name, 0) for key, name in
            (("by_path", "/score"), ("by_path", "/health"), ("by_status", "413"))}
    assert sent == {("by_path", "/score"): 6, ("by_path", "/health"): 1, ("by_status", "413"): 0}
    assert remote.request_items == 4 and remote.chunk_size == 256


def test_compute_score_batch_reads_its_completions_once(server, tiny_judge):
    """verl's solution_strs are read once: a generator gives the same scores as a list."""
    want = tiny_judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES, use_cache=False)
    assert compute_score_batch(["d"] * 3, (h for h in HYPOTHESES), SOURCES, url=server.url) == pytest.approx(want, abs=TOL)
    assert compute_score_batch([], iter([]), [], url=server.url) == []


# item 2: configuration checked once; task names compare case-insensitively ---------------------
def openrlhf_sample(response: str, source: str) -> tuple[str, str]:
    prompt = f"<|im_start|>user\nParaphrase: {source}<|im_end|>\n<|im_start|>assistant\n"
    return prompt + response + "<|im_end|>", prompt


def test_openrlhf_remote_sends_its_rm_reward_to_a_server_started_without_one(server, tiny_judge, monkeypatch):
    import importlib

    from pluie_reward import ParaphraseReward
    from pluie_reward.serving import openrlhf

    source = SOURCES[0]
    completions = [source, HYPOTHESES[0]]  # a verbatim copy, an honest paraphrase
    want = ParaphraseReward(tiny_judge)(completions=completions, source=[source] * 2)
    assert want[0] == 0.0 and want[1] > 0
    monkeypatch.setenv("PLUIE_REWARD_URL", server.url)  # the server's mapping gives logratio (no --rm-reward)
    monkeypatch.setenv("PLUIE_REWARD_RM_REWARD", "Paraphrase")
    module = importlib.reload(openrlhf)
    samples = [openrlhf_sample(c, source) for c in completions]
    got = [module.reward_func([q], [p], [source]) for q, p in samples]
    assert [g["rewards"][0] for g in got] == pytest.approx(want, abs=TOL)
    assert "pluie_novelty" in got[0]["extra_logs"]
    bad = httpx.post(server.url + "/get_reward", json={"query": [samples[0][0]], "prompts": [samples[0][1]], "labels": [source],
                                                       "rm_reward": "para"}, timeout=60)
    assert bad.status_code == 422 and "'rm_reward' must be one of ['logratio', 'p_yes', 'verdict', 'paraphrase'" in bad.text
    monkeypatch.setenv("PLUIE_REWARD_RM_REWARD", "para")  # refused once, when OpenRLHF loads the file
    with pytest.raises(ValueError, match=r"PLUIE_REWARD_RM_REWARD must be one of \['logratio', 'p_yes', 'verdict', 'paraphrase'"):
        importlib.reload(module)
    monkeypatch.delenv("PLUIE_REWARD_RM_REWARD")
    importlib.reload(module)


def test_task_names_compare_case_insensitively_on_every_path(server, tiny_judge, monkeypatch):
    import pluie_reward.tools.server.cli as serve_cli
    from pluie_reward import ParaphraseReward
    from pluie_reward.tools.cli import main

    want = ParaphraseReward(tiny_judge)(completions=HYPOTHESES, source=SOURCES)
    assert ParaphraseReward.__mro__[1](tiny_judge, "PARAPHRASE")(completions=HYPOTHESES, source=SOURCES) == pytest.approx(want)
    body = {"source": SOURCES, "hypothesis": HYPOTHESES, "task": "Paraphrase"}
    assert httpx.post(server.url + "/score", json=body, timeout=60).json()["reward"] == pytest.approx(want, abs=TOL)
    remote = RemotePluieReward(server.url, task=" Paraphrase")
    assert asyncio.run(remote(completions=HYPOTHESES, source=SOURCES)) == pytest.approx(want, abs=TOL)
    assert compute_score_batch(["d"] * 3, HYPOTHESES, SOURCES, url=server.url, output="PARAPHRASE") == pytest.approx(want, abs=TOL)
    got = asyncio.run(compute_score("d", HYPOTHESES[0], SOURCES[0], url=server.url, output="Paraphrase"))
    assert got["score"] == pytest.approx(want[0], abs=TOL)
    seen = {}
    monkeypatch.setattr(serve_cli, "judge_from_args", lambda args: make_tiny_judge())
    monkeypatch.setattr(serve_cli, "run", lambda app, **kwargs: seen.update(app=app))
    assert main(["serve", "--rm-reward", "Paraphrase"]) == 0
    assert seen["app"].state.mapping.reward == "paraphrase"
    assert main(["serve", "--rm-reward", "para"]) == 2


# item 5.9: one rule for empty or blank sources on every copy-proof path -------------------------
def test_blank_sources_are_refused_on_every_copy_proof_path(server, tiny_judge):
    from pluie_reward import ParaphraseReward
    from pluie_reward.serving.mapping import RewardMapping

    sources = [SOURCES[0], " \n"]
    with pytest.raises(ValueError) as local:
        ParaphraseReward(tiny_judge)(completions=HYPOTHESES[:2], source=sources)
    assert str(local.value).startswith("paraphrase: source 1 (field 'source') is empty or blank: a copy-proof reward measures")
    with pytest.raises(ValueError, match="source 0 .* is empty or blank"):
        ParaphraseReward(tiny_judge)(completions=HYPOTHESES[:1], source=[""])
    with pytest.raises(ValueError) as remote:
        asyncio.run(RemotePluieReward(server.url, task="paraphrase")(completions=HYPOTHESES[:2], source=sources))
    assert str(remote.value) == str(local.value)
    before = metrics(server)
    for source, index in ((sources, 1), ("", 0)):
        got = httpx.post(server.url + "/score", json={"source": source, "hypothesis": HYPOTHESES[:2], "task": "paraphrase"},
                         timeout=60)
        assert got.status_code == 422 and f"source {index} (field 'source') is empty or blank" in got.text, got.text
    assert metrics(server)["batches"] == before["batches"]  # refused before scoring
    with pytest.raises(ValueError, match=r"output='paraphrase': source 1 \(field 'source', from 'ground_truth'\) is empty or blank"):
        compute_score_batch(["d"] * 2, HYPOTHESES[:2], sources, url=server.url, output="paraphrase")
    with pytest.raises(ValueError, match="is empty or blank"):
        asyncio.run(compute_score("d", HYPOTHESES[0], "", url=server.url, output="paraphrase"))
    mapping = RewardMapping({"source": "prompt", "hypothesis": "response"}, "paraphrase")  # OpenRLHF, in process or served
    with pytest.raises(ValueError, match=r"--rm-reward paraphrase: source 0 \(field 'source', from the prompt\) is empty or blank"):
        mapping.columns([" \tA cat."], [" \t"], None)
    assert RewardMapping({"source": "prompt", "hypothesis": "response"}).columns([" \tA cat."], [" \t"], None)["hypothesis"] == ["A cat."]


# item 5.6: slow uploads time out; at shutdown they get 503 at once --------------------------------
def slow_upload(url: str) -> socket.socket:
    """A POST /score whose body stops after its first bytes (a stalled upload), on a plain socket."""
    address = urlparse(url)
    sock = socket.create_connection((address.hostname, address.port), timeout=30)  # 30 s: a liveness bound
    sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                 b'{"source": ["a"], ')
    return sock


def answer_of(sock: socket.socket) -> tuple[int, str]:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def test_a_stalled_upload_gets_408(caplog):
    app = create_app(make_tiny_judge(), "para-fs", max_wait_ms=0, body_timeout=0.5)
    with caplog.at_level(logging.WARNING), background(app) as srv:
        status, body = answer_of(slow_upload(srv.url))
        assert status == 408 and "did not arrive whole within 0.5 s" in body, body
        ok = httpx.post(srv.url + "/score", json={"source": ["a"], "hypothesis": ["b"]}, timeout=60)
        assert ok.status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_shutdown_answers_uploads_in_progress_503_at_once(caplog):
    app = create_app(make_tiny_judge(), "para-fs", max_wait_ms=0)  # a body may take 60 s: the shutdown must not wait for it
    with caplog.at_level(logging.INFO), background(app) as srv:
        uploads = [slow_upload(srv.url) for _ in range(3)]
        assert httpx.get(srv.url + "/health", timeout=30).status_code == 200  # the uploads' headers were read before this
        srv.handle_exit(signal.SIGTERM, None)  # what uvicorn's signal handler calls
        answers = [answer_of(sock) for sock in uploads]  # each within the socket's 30 s bound, or socket.timeout
    assert [status for status, _ in answers] == [503] * 3
    assert all("shutting down" in body for _, body in answers)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text


def test_gathered_verl_calls_above_the_server_limit_are_split_and_a_long_item_fails_alone(server, tiny_judge):
    sources, hypotheses = SOURCES * 3, HYPOTHESES * 3  # 9 calls gathered into one batch; the server takes 4 per request
    want = tiny_judge.score("para-fs", source=sources, hypothesis=hypotheses, use_cache=False)

    async def gathered():
        calls = [compute_score("d", h, s, url=server.url, max_wait_ms=200) for s, h in zip(sources, hypotheses)]
        calls.append(compute_score("d", "b" * 400, SOURCES[0], url=server.url, max_wait_ms=200))  # over max_item_chars
        return await asyncio.gather(*calls, return_exceptions=True)

    before = metrics(server)["requests"]["by_path"].get("/score", 0)
    *got, long = asyncio.run(gathered())
    assert [g["logratio"] if isinstance(g, dict) else g for g in got] == pytest.approx(want, abs=TOL)
    assert long.status == 413 and "at most 300 per item" in str(long)
    # 10 items: refused (413), then 4 + 4 + 2 (the server's limit, from /health); the 2 with the long item, item by item
    assert metrics(server)["requests"]["by_path"]["/score"] - before == 1 + 3 + 2


def test_openrlhf_in_process_settings_are_checked_when_the_file_loads(monkeypatch):
    import importlib

    from pluie_reward.serving import openrlhf

    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    try:
        monkeypatch.setenv("PLUIE_REWARD_TEMPLATE", "net-likert")
        monkeypatch.setenv("PLUIE_REWARD_RM_REWARD", "paraphrase")
        with pytest.raises(ValueError, match="--rm-reward paraphrase: template 'net-likert' does not answer Yes/No"):
            importlib.reload(openrlhf)
        monkeypatch.setenv("PLUIE_REWARD_TEMPLATE", "para-fs")
        monkeypatch.setenv("PLUIE_REWARD_RM_FIELDS", "nope=label")
        with pytest.raises(ValueError, match="not a field of template 'para-fs'"):
            importlib.reload(openrlhf)
    finally:
        monkeypatch.undo()
        importlib.reload(openrlhf)
