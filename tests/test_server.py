"""The judge server: a real uvicorn server on 127.0.0.1 (free port, background thread), tiny judge.

References are computed in the test with ``Judge.score`` on a separate judge instance built with the
same seed (same weights), never with the server's own output.
"""

from __future__ import annotations

import asyncio
import json
import math
import pickle
import random
import threading
import time

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from conftest import mrpc_pairs  # noqa: E402

from pluie_reward.tools.cli import main  # noqa: E402
from pluie_reward.serving import background, create_app  # noqa: E402
from pluie_reward.serving.client import (  # noqa: E402
    RemoteJudgeError, RemotePluieReward, compute_score, compute_score_batch, compute_score_sync, post_json,
)
from pluie_reward.serving.batcher import Batcher, ScoringError, ShuttingDown  # noqa: E402
from pluie_reward.testing import make_tiny_judge  # noqa: E402
from pluie_reward.tools.bench.server_load import free_port  # noqa: E402

TOKEN = "test-token-7"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TOL = 1e-3


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@pytest.fixture(scope="module")
def pairs() -> tuple[list[str], list[str]]:
    sources, hypotheses, _ = mrpc_pairs(40)
    return sources, hypotheses


@pytest.fixture(scope="module")
def reference(tiny_judge, pairs) -> list[float]:
    """Judge.score on the pairs, one call, on a judge the server does not use."""
    return tiny_judge.score("para-fs", source=pairs[0], hypothesis=pairs[1], use_cache=False)


@pytest.fixture(scope="module")
def server():
    app = create_app(  # the tiny ChatML template ignores the keyword: the scores stay those of tiny_judge
        make_tiny_judge(chat_template_kwargs={"enable_thinking": False}), "para-fs", token=TOKEN, max_wait_ms=100,
        max_items_per_request=64, max_body_bytes=64_000,
    )
    with background(app, host="127.0.0.1", port=0) as srv:
        srv.app = app
        yield srv


def metrics(server) -> dict:
    return httpx.get(server.url + "/metrics", headers=AUTH, timeout=30).json()


async def post_all(url: str, bodies: list[dict], concurrency: int | None = None, headers: dict = AUTH) -> list[httpx.Response]:
    limit = asyncio.Semaphore(concurrency or len(bodies))
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as client:

        async def one(body: dict) -> httpx.Response:
            async with limit:
                return await client.post(url, json=body, headers=headers)

        return await asyncio.gather(*(one(b) for b in bodies))


# scoring ---------------------------------------------------------------------------------------
def test_concurrent_clients_get_judge_scores_in_fewer_batches(server, pairs, reference):
    sources, hypotheses = pairs
    spans = [(i, i + 1 + i % 3) for i in range(0, 36, 3)]  # 12 requests of 1-3 items
    bodies = [{"source": sources[a:b], "hypothesis": hypotheses[a:b]} for a, b in spans]
    before = metrics(server)
    responses = asyncio.run(post_all(server.url + "/score", bodies))
    after = metrics(server)
    for (a, b), response in zip(spans, responses):
        assert response.status_code == 200, response.text
        got = response.json()
        assert set(got) == {"logratio", "p_yes", "verdict"}
        assert len(got["logratio"]) == b - a
        for k, i in enumerate(range(a, b)):
            assert abs(got["logratio"][k] - reference[i]) <= TOL
            assert abs(got["p_yes"][k] - sigmoid(reference[i])) <= TOL
            assert got["verdict"][k] == (reference[i] > 0)
    batches = after["batches"] - before["batches"]
    assert 1 <= batches < len(bodies)
    assert after["batch_requests"]["recent"]["max"] > 1
    assert after["items"] - before["items"] == sum(b - a for a, b in spans)
    assert after["requests"]["by_path"]["/score"] - before["requests"]["by_path"].get("/score", 0) == len(bodies)
    assert after["latency_ms"]["count"] >= len(bodies) and after["latency_ms"]["max"] > 0


def test_broadcast_string_field(server, pairs, tiny_judge):
    source, hyps = pairs[0][0], pairs[1][:3]
    want = tiny_judge.score("para-fs", source=[source] * 3, hypothesis=hyps, use_cache=False)
    got = httpx.post(server.url + "/score", json={"source": source, "hypothesis": hyps}, headers=AUTH, timeout=60).json()
    assert all(abs(g - w) <= TOL for g, w in zip(got["logratio"], want))


def test_health_needs_no_token_and_names_the_fields(server):
    health = httpx.get(server.url + "/health", timeout=30).json()
    assert health["status"] == "ok" and health["template"] == "para-fs"
    assert health["fields"] == ["source", "hypothesis"]
    assert health["chat_template_kwargs"] == {"enable_thinking": False}  # what every rendering uses
    assert httpx.get(server.url + "/metrics", timeout=30).status_code == 401


# bad requests ----------------------------------------------------------------------------------
BAD = [
    ("malformed json", "/score", '{"source": ["a"], "hypothesis": ', AUTH, 422, "JSON"),
    ("wrong field name", "/score", {"src": ["a"], "hypothesis": ["b"]}, AUTH, 422, "unknown field(s) ['src']"),
    ("missing field", "/score", {"hypothesis": ["b"]}, AUTH, 422, "missing field(s) ['source']"),
    ("not an object", "/score", [1, 2], AUTH, 422, "the body must be a JSON object, got a list ([1, 2])."),
    ("non-string item", "/score", {"source": [1], "hypothesis": ["b"]}, AUTH, 422, "expected a string"),
    ("null item", "/score", {"source": ["a"], "hypothesis": [None]}, AUTH, 422, "item 0"),
    ("unequal lengths", "/score", {"source": ["a", "b"], "hypothesis": ["c"]}, AUTH, 422, "different lengths"),
    ("a field named self", "/score", {"self": ["c"], "source": ["a"], "hypothesis": ["b"]}, AUTH, 422,
     "unknown field(s) ['self']"),
    ("400-digit threshold", "/score", {"source": ["a"], "hypothesis": ["b"], "threshold": 10**400}, AUTH, 422,
     "'threshold' must be a finite number"),
    ("too many items", "/score", {"source": ["a"] * 65, "hypothesis": ["b"] * 65}, AUTH, 413, "at most 64"),
    ("body too large", "/score", {"source": ["a" * 70_000], "hypothesis": ["b"]}, AUTH, 413, "Too Large"),
    ("no token", "/score", {"source": ["a"], "hypothesis": ["b"]}, {}, 401, "bearer token"),
    ("wrong token", "/score", {"source": ["a"], "hypothesis": ["b"]}, {"Authorization": "Bearer nope"}, 401, "bearer token"),
    ("token, bad body", "/get_reward", "{oops", {"Authorization": "Bearer nope"}, 401, "bearer token"),
    ("rm: wrong key", "/get_reward", {"queries": ["x"]}, AUTH, 422, "query"),
    ("rm: unequal prompts", "/get_reward", {"query": ["ab"], "prompts": ["a", "b"], "labels": ["s"]}, AUTH, 422, "one per query"),
    ("rm: prompt not in query", "/get_reward", {"query": ["xyz"], "prompts": ["abc"], "labels": ["s"]}, AUTH, 422, "not contained"),
    ("rm: no labels", "/get_reward", {"query": ["abc"], "prompts": ["a"]}, AUTH, 422, "--data.label_key"),
    # OpenRLHF without --data.label_key sends "" (OpenRLHF@3c3be623:openrlhf/datasets/prompts_dataset.py:44)
    ("rm: empty label", "/get_reward", {"query": ["abc"], "prompts": ["a"], "labels": [""]}, AUTH, 422, "labels[0] is empty"),
    ("rm: label not text", "/get_reward", {"query": ["abc"], "prompts": ["a"], "labels": [3]}, AUTH, 422, "labels[0]"),
]


@pytest.mark.parametrize("path, body, headers, status, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_requests_get_4xx_with_a_message(server, path, body, headers, status, message):
    content = body if isinstance(body, str) else json.dumps(body)
    response = httpx.post(
        server.url + path, content=content, headers={**headers, "content-type": "application/json"}, timeout=60
    )
    assert response.status_code == status, response.text
    assert message in response.text


QUERY = "a list of strings, one per sample (its prompt and response)"
REWARD_TYPE_ERRORS = [  # every field of /get_reward's body, given the wrong JSON type: the message written out here
    ({"query": "abc"}, f"field 'query' must be {QUERY}, got a string (\"abc\")."),
    ({"query": ["a", 3]}, f"field 'query' must be {QUERY}: item 1 is a number (3)."),
    ({"queries": ["abc"]}, f"field 'query' is missing: it must be {QUERY}."),
    ({"query": ["abc"], "prompts": "a"}, "field 'prompts' must be a list of strings, one prompt per query (or null), got a string (\"a\")."),
    ({"query": ["abc"], "prompts": [None]}, "field 'prompts' must be a list of strings, one prompt per query (or null): item 0 is null."),
    ({"query": ["abc"], "labels": "text"},
     "field 'labels' must be a list of the queries' labels (their source texts; or null), got a string (\"text\")."),
    ({"query": ["abc"], "rm_reward": 1}, "field 'rm_reward' must be a string naming this request's reward, e.g. 'paraphrase' (or null), "
                                         "got a number (1)."),
    ({"query": ["abc"], "rm_reward": True}, "field 'rm_reward' must be a string naming this request's reward, e.g. 'paraphrase' "
                                            "(or null), got a boolean (true)."),
    ([{"query": ["abc"]}], "the body must be a JSON object, got a list ([{\"query\": [\"abc\"]}])."),
    ("{oops", "the body is not valid JSON (Expecting property name enclosed in double quotes at character 1)."),
]


@pytest.mark.parametrize("body, message", REWARD_TYPE_ERRORS, ids=[m.split(" must")[0].split(" is")[0] for _, m in REWARD_TYPE_ERRORS])
def test_get_reward_type_errors_are_one_sentence_naming_the_field(server, body, message):
    """A field of the wrong type is answered as every other error of the server: 422 and one sentence saying which field
    (and item) and what it must be, not pydantic's array of errors."""
    content = body if isinstance(body, str) else json.dumps(body)
    response = httpx.post(server.url + "/get_reward", content=content, headers={**AUTH, "content-type": "application/json"}, timeout=60)
    assert (response.status_code, response.json()) == (422, {"detail": message})


def test_body_without_json_content_type_gets_a_hint(server):
    response = httpx.post(
        server.url + "/score", content='{"source": ["a"], "hypothesis": ["b"]}', headers={**AUTH, "content-type": "text/plain"}, timeout=30
    )
    assert response.status_code == 422 and "Content-Type: application/json" in response.json()["hint"]


def test_server_still_serves_after_bad_requests(server, pairs, reference):
    got = httpx.post(
        server.url + "/score", json={"source": pairs[0][:1], "hypothesis": pairs[1][:1]}, headers=AUTH, timeout=60
    ).json()
    assert abs(got["logratio"][0] - reference[0]) <= TOL
    assert metrics(server)["requests"]["by_status"].get("500", 0) == 0


# OpenRLHF --------------------------------------------------------------------------------------
def test_get_reward_matches_openrlhf_protocol(server, pairs, reference, tiny_judge):
    sources, hypotheses = pairs
    n = 5
    prompts = [
        tiny_judge.tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Paraphrase: {s}"}], tokenize=False, add_generation_prompt=True
        )
        for s in sources[:n]
    ]
    # what OpenRLHF sends: decoded prompt + response (+ end-of-turn and padding), prompts, labels
    queries = ["<pad><pad>" * (i % 2) + p + h + "<|im_end|>" + "<pad>" * i for i, (p, h) in enumerate(zip(prompts, hypotheses))]
    body = {"query": queries, "prompts": prompts, "labels": sources[:n]}
    answer = httpx.post(server.url + "/get_reward", json=body, headers=AUTH, timeout=60)
    assert answer.status_code == 200, answer.text
    answer = answer.json()
    assert set(answer) == {"rewards", "scores", "extra_logs"}
    assert all(abs(r - reference[i]) <= TOL for i, r in enumerate(answer["rewards"]))
    assert all(abs(s - sigmoid(reference[i])) <= TOL for i, s in enumerate(answer["scores"]))
    logs = answer["extra_logs"]
    assert set(logs) == {"pluie_logratio", "pluie_p_yes", "pluie_verdict"}
    assert all(len(v) == n for v in logs.values())
    assert logs["pluie_verdict"] == [float(reference[i] > 0) for i in range(n)]


# clients ---------------------------------------------------------------------------------------
def test_remote_pluie_reward_for_trl(server, pairs, reference):
    from trl.trainer.utils import get_callable_name, is_async_callable

    sources, hypotheses = pairs
    reward = RemotePluieReward(server.url, token=TOKEN, chunk_size=3, name="pluie_server")
    assert is_async_callable(reward) and get_callable_name(reward) == "pluie_server"
    assert pickle.loads(pickle.dumps(reward)).url == reward.url
    logged = {}
    n = 7
    conversational = [[{"role": "assistant", "content": h}] for h in hypotheses[:n]]
    for completions in (hypotheses[:n], conversational):
        got = asyncio.run(reward(prompts=["p"] * n, completions=completions, source=sources[:n], log_metric=logged.__setitem__))
        assert len(got) == n and all(abs(g - reference[i]) <= TOL for i, g in enumerate(got))
    assert logged["pluie_server/accept_rate"] == pytest.approx(sum(r > 0 for r in reference[:n]) / n)
    p_yes = RemotePluieReward(server.url, token=TOKEN, output="prob")
    got = asyncio.run(p_yes(prompts=["p"], completions=hypotheses[:1], source=sources[:1]))
    assert abs(got[0] - sigmoid(reference[0])) <= TOL
    with pytest.raises(KeyError, match=r"'source', which is not in the batch\. Available columns: \['src', 'prompt'\]"):
        asyncio.run(reward(prompts=["p"], completions=["x"], src=["s"]))
    with pytest.raises(TypeError, match="completion 0 is None"):
        asyncio.run(reward(prompts=["p"], completions=[None], source=["s"]))
    with pytest.raises(RemoteJudgeError, match="401"):
        asyncio.run(RemotePluieReward(server.url, token="bad")(prompts=["p"], completions=["x"], source=["s"]))


class RecordingRemoteReward(RemotePluieReward):
    """Keeps what TRL passed, to score it independently."""

    calls: list

    async def __call__(self, prompts=None, completions=(), **kwargs):
        out = await super().__call__(prompts=prompts, completions=completions, **kwargs)
        self.calls.append((list(completions), list(kwargs["source"]), out))
        return out


def test_real_grpo_trainer_runs_the_remote_reward(server, tiny_judge, tmp_path):
    import datasets
    import trl

    from pluie_reward.testing import make_tiny_causal_lm

    sources = ["The cat sleeps on the mat.", "The dog barks at night.", "A cat is sleeping.", "The dog sleeps."]
    data = datasets.Dataset.from_dict({"prompt": [f"Paraphrase: {s}" for s in sources], "source": sources})
    reward = RecordingRemoteReward(server.url, token=TOKEN, name="pluie_remote")
    reward.calls = []
    args = trl.GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_completion_length=6,
        max_steps=2, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True,
    )
    trainer = trl.GRPOTrainer(
        model=make_tiny_causal_lm(tiny_judge.tokenizer, seed=1), reward_funcs=[reward], args=args,
        train_dataset=data, processing_class=tiny_judge.tokenizer,
    )
    trainer.train()
    logs = [r for r in trainer.state.log_history if "rewards/pluie_remote/mean" in r]
    assert len(logs) == 2 and len(reward.calls) == 2
    for log, (completions, batch_sources, returned) in zip(logs, reward.calls):
        want = tiny_judge.score("para-fs", source=batch_sources, hypothesis=completions, use_cache=False)
        assert returned == pytest.approx(want, abs=TOL)
        assert log["rewards/pluie_remote/mean"] == pytest.approx(sum(want) / len(want), abs=TOL)
        assert log["pluie_remote/accept_rate"] == pytest.approx(sum(w > 0 for w in want) / len(want))


def test_compute_score_for_verl(server, pairs, reference, monkeypatch):
    sources, hypotheses = pairs
    got = compute_score_sync("mrpc", hypotheses[0], sources[0], None, url=server.url, token=TOKEN, return_dict=False)
    assert isinstance(got, float) and abs(got - reference[0]) <= TOL
    got = asyncio.run(compute_score("mrpc", hypotheses[0], sources[0], None, url=server.url, token=TOKEN, return_dict=False))
    assert isinstance(got, float) and abs(got - reference[0]) <= TOL
    monkeypatch.setenv("PLUIE_REWARD_URL", server.url)
    monkeypatch.setenv("PLUIE_REWARD_TOKEN", TOKEN)
    records = compute_score_batch(
        ["mrpc"] * 3, hypotheses[:3], [None] * 3, [{"src": s} for s in sources[:3]],
        fields={"source": "extra_info.src"}, return_dict=True,
    )
    for i, record in enumerate(records):
        assert abs(record["score"] - reference[i]) <= TOL and abs(record["p_yes"] - sigmoid(reference[i])) <= TOL
    with pytest.raises(KeyError, match=r"'extra_info\.src', which is not in verl's arguments\. Available sources: \['data_source', 'extra_info\.other', 'ground_truth'\]"):
        compute_score_sync("mrpc", "h", "s", {"other": 1}, fields={"source": "extra_info.src"})
    with pytest.raises(RemoteJudgeError, match="422"):
        compute_score_sync("mrpc", "h", None)  # no ground truth for 'source'


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_client_retries_transient_failures_then_fails_clearly():
    calls = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 3:
            return httpx.Response(503, json={"detail": "busy"})
        return httpx.Response(200, json={"logratio": [1.0]})

    with httpx.Client(transport=httpx.MockTransport(flaky)) as client:
        assert post_json("http://judge/score", {}, retries=3, backoff=0.001, client=client) == {"logratio": [1.0]}
    assert len(calls) == 3
    calls.clear()
    with httpx.Client(transport=httpx.MockTransport(lambda r: calls.append(r) or httpx.Response(422, json={"detail": "bad field"}))) as client:
        with pytest.raises(RemoteJudgeError, match="HTTP 422: bad field"):
            post_json("http://judge/score", {}, retries=3, backoff=0.001, client=client)
    assert len(calls) == 1  # client errors are not retried
    with pytest.raises(RemoteJudgeError, match="after 2 attempts"):
        compute_score_sync("d", "h", "s", url=_dead_url(), retries=1, timeout=5)


# load ------------------------------------------------------------------------------------------
def test_bounded_load_loses_no_request(server, pairs, reference):
    sources, hypotheses = pairs
    rng = random.Random(0)
    spans = []
    for _ in range(200):
        a = rng.randrange(len(sources))
        spans.append((a, min(len(sources), a + rng.randint(1, 3))))
    bodies = [{"source": sources[a:b], "hypothesis": hypotheses[a:b]} for a, b in spans]
    before = metrics(server)
    responses = asyncio.run(asyncio.wait_for(post_all(server.url + "/score", bodies, concurrency=24), timeout=300))
    after = metrics(server)
    assert [r.status_code for r in responses] == [200] * len(bodies)
    for (a, b), response in zip(spans, responses):
        got = response.json()["logratio"]
        assert len(got) == b - a and all(abs(g - reference[i]) <= TOL for g, i in zip(got, range(a, b)))
    assert after["requests"]["by_path"]["/score"] - before["requests"]["by_path"]["/score"] == len(bodies)
    assert after["items"] - before["items"] == sum(b - a for a, b in spans)
    assert after["batches"] - before["batches"] < len(bodies)
    assert after["queue"] == {"requests": 0, "items": 0}


# shutdown and batcher --------------------------------------------------------------------------
def test_graceful_shutdown_finishes_in_flight_requests(pairs, reference):
    app = create_app(make_tiny_judge(), "para-fs", max_wait_ms=1500)
    batcher = app.state.batcher
    result = {}
    with background(app) as srv:
        def client() -> None:
            result["response"] = httpx.post(
                srv.url + "/score", json={"source": pairs[0][:2], "hypothesis": pairs[1][:2]}, timeout=60
            )

        thread = threading.Thread(target=client)
        thread.start()
        deadline = time.monotonic() + 30
        while batcher.pending[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert batcher.pending[0] == 1  # queued, waiting for company, when the server is told to stop
    thread.join(60)
    response = result["response"]
    assert response.status_code == 200
    assert all(abs(g - reference[i]) <= TOL for i, g in enumerate(response.json()["logratio"]))
    with pytest.raises(ShuttingDown):
        batcher.submit({"source": ["a"], "hypothesis": ["b"]})


def test_batcher_isolates_a_failing_request(pairs, reference):
    batcher = Batcher(make_tiny_judge(), "para-fs", max_wait_ms=300, truncate=False).start()
    try:
        rng = random.Random(1)
        huge = "".join(rng.choice("qxzjkvwy ") for _ in range(30_000))
        gave_up = batcher.submit({"source": pairs[0][5:7], "hypothesis": pairs[1][5:7]})
        assert gave_up.cancel()  # a caller that went away: skipped, and the worker carries on
        good = batcher.submit({"source": pairs[0][:2], "hypothesis": pairs[1][:2]})
        bad = batcher.submit({"source": ["a"], "hypothesis": [huge]})
        later = batcher.submit({"source": pairs[0][2:3], "hypothesis": pairs[1][2:3]})
        assert [r["logratio"] for r in good.result(60)] == pytest.approx(reference[:2], abs=TOL)
        assert later.result(60)[0]["logratio"] == pytest.approx(reference[2], abs=TOL)
        with pytest.raises(ScoringError, match="longer than the judge's context") as err:
            bad.result(60)
        assert err.value.client_error
        with pytest.raises(ValueError, match="unknown field"):
            batcher.submit({"src": ["a"], "hypothesis": ["b"]})
    finally:
        batcher.close()


def test_requests_sharing_a_source_share_its_prefix_across_requests(pairs, tiny_judge):
    judge = make_tiny_judge()
    batches = []
    batcher = Batcher(judge, "para-fs", max_wait_ms=300, on_batch=lambda items, requests: batches.append((items, requests)))
    batcher.start()
    try:
        batcher.submit({"source": ["warm-up"], "hypothesis": ["x"]}).result(60)  # computes the template prefix
        passes = judge.engine.stats["prefix_passes"]
        source = pairs[0][0]
        futures = [batcher.submit({"source": [source], "hypothesis": [h]}) for h in pairs[1][:4]]
        got = [f.result(60)[0]["logratio"] for f in futures]
    finally:
        batcher.close()
    assert batches[-1] == (4, 4)  # four requests, one Judge.score call
    assert judge.engine.stats["prefix_passes"] - passes == 1  # the shared source's prefix, computed once
    # independent reference: each item scored alone by another judge instance
    want = [tiny_judge.score("para-fs", source=[source], hypothesis=[h], use_cache=False)[0] for h in pairs[1][:4]]
    assert got == pytest.approx(want, abs=TOL)


# CLI -------------------------------------------------------------------------------------------
def test_serve_cli_rejects_bad_options_before_loading_a_model(capsys, tmp_path):
    assert main(["serve", "--rm-field", "nope=label"]) == 2
    assert "not a field of template 'para-fs'" in capsys.readouterr().err
    assert main(["serve", "--rm-field", "source=labels"]) == 2
    assert "must be one of" in capsys.readouterr().err
    assert main(["serve", "--token-file", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "blank").write_text(" \n")
    assert main(["serve", "--token-file", str(tmp_path / "blank")]) == 2
    assert "is empty" in capsys.readouterr().err


def test_serve_options_reach_create_app_under_its_keyword_names(tmp_path):
    import argparse

    from pluie_reward.tools.server import cli as serve_cli

    parser = argparse.ArgumentParser()
    serve_cli._configure(parser)
    (tmp_path / "token").write_text("secret\n")
    args = parser.parse_args(["--max-items-per-request", "7", "--max-batch-items", "3", "--max-batch-tokens", "99",
                              "--max-wait-ms", "2.5", "--threshold", "-1", "--max-item-chars", "50", "--body-timeout", "9",
                              "--max-body-mb", "2", "--no-truncate", "--graceful-timeout", "4", "--token-file",
                              str(tmp_path / "token")])
    options = serve_cli.server_options(args)
    assert {k: v for k, v in options.items() if k != "mapping"} == {
        "token": "secret", "max_body_bytes": 2 * 1024 * 1024, "max_items_per_request": 7, "max_batch_items": 3,
        "max_batch_tokens": 99, "max_wait_ms": 2.5, "threshold": -1.0, "truncate": False, "max_item_chars": 50,
        "body_timeout": 9.0, "shutdown_timeout": 4.0}
    assert serve_cli.server_options(parser.parse_args([]))["shutdown_timeout"] == serve_cli.SHUTDOWN_S


def test_serving_beyond_this_machine_without_a_token_is_warned_about(tmp_path, capsys, monkeypatch):
    import argparse

    from pluie_reward.tools.server import cli as serve_cli

    parser = argparse.ArgumentParser()
    serve_cli._configure(parser)
    monkeypatch.delenv("PLUIE_REWARD_TOKEN", raising=False)
    (tmp_path / "token").write_text("secret\n")
    for argv, warned in ((["--host", "0.0.0.0"], True), (["--host", "127.0.0.1"], False), (["--host", "localhost"], False),
                         (["--host", "::1"], False), (["--host", "0.0.0.0", "--token-file", str(tmp_path / "token")], False)):
        serve_cli.server_options(parser.parse_args(argv))
        assert ("listening on 0.0.0.0 without a token" in capsys.readouterr().err) == warned, argv


def test_serve_without_fastapi_names_the_extra_before_loading(monkeypatch, capsys):
    import sys

    from pluie_reward.tools.server import cli as serve_cli

    monkeypatch.setitem(sys.modules, "fastapi", None)  # an import of it fails as when it is not installed
    monkeypatch.delitem(sys.modules, "pluie_reward.serving.app", raising=False)
    monkeypatch.setattr(serve_cli, "judge_from_args", lambda args: pytest.fail("the judge was loaded"))
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "needs fastapi" in err and 'pip install "pluie-reward[serve]"' in err and "Traceback" not in err


def test_template_without_default_mapping_serves_score_only(pairs):
    app = create_app(make_tiny_judge(), "rev", max_wait_ms=0)
    with background(app) as srv:
        got = httpx.post(srv.url + "/get_reward", json={"query": ["q"]}, timeout=30)
        assert got.status_code == 501 and "--rm-field" in got.text
        ok = httpx.post(srv.url + "/score", json={"original": ["a"], "instruction": ["b"], "hypothesis": ["c"]}, timeout=60)
        assert ok.status_code == 200 and len(ok.json()["logratio"]) == 1


def test_serve_warms_up_before_it_listens(monkeypatch, capsys):
    """Ready means ready: the template is bound and its prefix computed before uvicorn listens (so before
    /health answers), and the first request computes no prefix of its own."""
    import pluie_reward.tools.server.cli as serve_cli

    judge = make_tiny_judge(seed=3)
    seen = {}

    def run(app, **kwargs):  # what uvicorn would serve: the state the first request finds
        seen["prefix_passes"] = judge.engine.stats["prefix_passes"]
        from fastapi.testclient import TestClient

        with TestClient(app) as client:
            got = client.post("/score", json={"source": ["The cat sleeps."], "hypothesis": ["A cat is asleep."]}).json()
        seen["first"] = judge.engine.stats["prefix_passes"] - seen["prefix_passes"]
        seen["logratio"] = got["logratio"]

    monkeypatch.setattr(serve_cli, "judge_from_args", lambda args: judge)
    monkeypatch.setattr(serve_cli, "run", run)
    assert main(["serve", "--template", "para-direct"]) == 0
    assert seen["prefix_passes"] == 1  # para-direct's template prefix, before listening
    assert seen["first"] == 0
    want = judge.score("para-direct", source=["The cat sleeps."], hypothesis=["A cat is asleep."], use_cache=False)
    assert seen["logratio"] == pytest.approx(want, abs=1e-5)
    assert "warming up" in capsys.readouterr().err
