"""The judge pool on Ray Serve (``pluie_reward/tools/pool``, docs/pool.md).

One local Ray cluster for the module (3 logical CPUs, no dashboard; Serve's HTTP proxy on a free port of
127.0.0.1) with one pool of 2 replicas of the tiny random judge, 1 CPU and 1 request at a time each.
The replicas' judge sleeps ``LONG_SECONDS`` before scoring a request of ``LONG_ITEMS`` items or more
(``make_slow_tiny_judge``: same scores), so that a replica killed under load certainly holds a
request, however loaded the machine is. Through it: the scores
equal ``Judge.score`` of the same judge in this process (``/score`` as verl's client sends it,
``RemotePluieReward`` as TRL calls it, ``compute_score`` as verl's reward loop awaits it,
``/get_reward`` as OpenRLHF posts it); bad requests get 4xx with the server's message; and a
replica killed during a bounded load loses no request. The command line's refusals need no Ray.

Everything that starts the cluster is ``slow`` and ``serial`` (the cluster and two replicas take ~30-40 s
here; CI runs these tests in one process, after the other slow ones);
without Ray (``pip install 'pluie-reward[pool]'``) those tests are skipped.
"""

from __future__ import annotations

import asyncio
import sys
import time
from functools import partial

import pytest

from pluie_reward.testing import make_slow_tiny_judge, make_tiny_judge
from pluie_reward.tools import cli

TEMPLATE = "para-fs"
MAX_ITEMS = 512  # the pool's --max-items-per-request
LONG_ITEMS, LONG_SECONDS = 64, 8.0  # a request of 64 items or more takes 8 s more in a replica
SLOW_JUDGE = partial(make_slow_tiny_judge, LONG_SECONDS, min_requests=LONG_ITEMS)  # every replica's judge


def sentences(tag: str, n: int) -> tuple[list[str], list[str]]:
    """n distinct (source, hypothesis) pairs of different lengths (no result-cache hit across requests)."""
    sources = [f"Sentence {tag}-{i}: the cat sat on the mat number {i} " + "and it slept " * (i % 5) for i in range(n)]
    hypotheses = [f"A cat ({tag}, {i}) was sitting on mat {i}" + ", sleeping" * (i % 3) for i in range(n)]
    return sources, hypotheses


# --- the command line, before any Ray ---------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--replicas", "0"], "argument --replicas: must be a whole number >= 1"),
    (["--min-replicas", "2"], "--min-replicas needs --max-replicas"),
    (["--max-replicas", "2", "--min-replicas", "3"], "needs 0 <= --min-replicas <= --max-replicas"),
    (["--replica-gpus", "1.5"], "a fraction below 1 or a whole number"),
    (["--max-replicas", "2", "--target-ongoing-requests", "100"], "above --max-ongoing-requests"),
    (["--upscale-delay", "5"], "--upscale-delay and --downscale-delay need --max-replicas"),
    (["--max-replicas", "2", "--downscale-delay", "-1"], "argument --downscale-delay: must be a finite number >= 0"),
    (["--engine", "remote", "--url", "http://127.0.0.1:9"], "a pool of clients of vLLM servers adds nothing"),
    (["--engine", "vllm", "--tensor-parallel-size", "2"], "one replica per GPU"),
    (["--detach"], "--detach needs --address"),
    (["--stop"], "--stop needs --address"),
    (["--device", "cuda"], "needs --replica-gpus > 0"),
    (["--address", "auto", "--num-cpus", "2"], "--num-cpus sizes the local cluster"),
    (["-t", "no-such-template"], "unknown template 'no-such-template'"),
    (["--port", "0"], "argument --port: must be a port between 1 and 65535"),
    (["--chat-template-kwargs", "[1]"], "JSON object"),
    (["--max-items-per-request", "0"], "argument --max-items-per-request: must be a whole number >= 1"),
])
def test_bad_pool_options_exit_2_with_a_message(args, message, capsys):
    assert cli.main(["pool", *args]) == 2
    err = capsys.readouterr().err
    assert "pluie-reward pool: error: " in err and message in err and "Traceback" not in err  # argparse's usage may come first


def test_every_pool_flag_reaches_its_pool_option():
    from pluie_reward.tools.cli.main import build_parser
    from pluie_reward.tools.pool.cli import pool_options
    from pluie_reward.tools.pool.deployment import PoolOptions

    args = build_parser().parse_args(["pool", "--max-replicas", "6", "--min-replicas", "2", "--target-ongoing-requests", "8",
                                      "--max-ongoing-requests", "32", "--upscale-delay", "3", "--downscale-delay", "40",
                                      "--replica-cpus", "2", "--replica-gpus", "0.5", "--graceful-timeout", "7"])
    assert pool_options(args) == PoolOptions(replicas=1, min_replicas=2, max_replicas=6, target_ongoing_requests=8.0,
                                             max_ongoing_requests=32, upscale_delay_s=3.0, downscale_delay_s=40.0,
                                             num_cpus=2.0, num_gpus=0.5, graceful_shutdown_timeout_s=7.0)


def test_pool_without_ray_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ModuleNotFoundError
    assert cli.main(["pool"]) == 2
    assert "the pool needs ray: pip install 'pluie-reward[pool]'" in capsys.readouterr().err
    assert cli.main(["pool", "--address", "auto", "--stop"]) == 2
    assert "the pool needs ray: pip install 'pluie-reward[pool]'" in capsys.readouterr().err


@pytest.mark.parametrize("args", [[], ["--address", "head:6379", "--stop"]])
def test_a_cluster_that_cannot_be_reached_exits_1_with_why(args, monkeypatch, capsys):
    """Serving or stopping: Ray's error, its last line, and the token hint when a cause in its chain names
    Ray's token authentication."""
    pytest.importorskip("ray.serve")
    from pluie_reward.tools.pool import cli as pool_cli

    def refuse(address, num_cpus=None):
        try:
            raise RuntimeError("AuthenticationError: no token")
        except RuntimeError as cause:
            raise ConnectionError("Traceback...\nfailed to connect") from cause

    monkeypatch.setattr(pool_cli, "start_ray", refuse)
    assert cli.main(["pool", *args]) == 1
    err = capsys.readouterr().err
    where = "join the Ray cluster at head:6379" if args else "start a local Ray cluster"
    assert f"pluie-reward pool: error: could not {where}: failed to connect. The cluster uses Ray's token" in err
    assert "Traceback" not in err


def test_a_replica_is_warm_on_its_template_when_its_constructor_returns():
    """Ray routes requests to a replica once its constructor returns: the template is bound and its prefix
    computed by then (as `pluie-reward serve` does before it listens), so no request pays them."""
    from pluie_reward.tools.pool.deployment import JudgeReplica

    replica = JudgeReplica(make_tiny_judge, "para-direct", {})
    passes = replica.judge.engine.stats["prefix_passes"]
    assert passes >= 1
    replica.judge.score("para-direct", source=["The cat sleeps."], hypothesis=["A cat is asleep."])
    assert replica.judge.engine.stats["prefix_passes"] == passes  # the template prefix was ready


# --- one Ray cluster, one pool ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool_url():
    pytest.importorskip("ray")
    pytest.importorskip("ray.serve")
    pytest.importorskip("fastapi")
    from pluie_reward.tools.bench.server_load import free_port
    from pluie_reward.tools.pool import PoolOptions, deploy, shutdown, start_ray

    port = free_port()
    assert start_ray(num_cpus=3, log_to_driver=False)  # 2 for this pool, 1 for the autoscaled one (2 x 0.5)
    try:
        options = PoolOptions(replicas=2, num_cpus=1, max_ongoing_requests=1, health_check_period_s=2)
        url = deploy(SLOW_JUDGE, TEMPLATE, options, host="127.0.0.1", port=port, log_level="warning",
                     max_wait_ms=10, max_items_per_request=MAX_ITEMS)
        assert url == f"http://127.0.0.1:{port}"
        yield url
    finally:
        shutdown(None)  # every Serve application, then the local cluster


@pytest.fixture(scope="module")
def reference():
    """The same tiny judge, in this process, on one torch thread as each replica (two threads are
    several times slower, not faster, on a shared 2-core machine while the replicas run)."""
    import torch

    judge = make_tiny_judge()

    def score(sources: list[str], hypotheses: list[str]) -> list[float]:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return judge.score(TEMPLATE, source=sources, hypothesis=hypotheses)
        finally:
            torch.set_num_threads(threads)

    return score


def replica_names() -> list[str]:
    import ray

    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("SERVE_REPLICA::"))


@pytest.mark.slow
@pytest.mark.serial
def test_pool_scores_equal_judge_score_through_every_client(pool_url, reference):
    from pluie_reward.serving.client import RemotePluieReward, compute_score, post_json

    assert len(replica_names()) == 2
    # the private Ray Serve API the printed URL reads (docs/architecture.md): the running proxy's address
    from pluie_reward.tools.pool.deployment import _serving_address

    assert _serving_address("192.0.2.1", 1) == ("127.0.0.1", int(pool_url.rsplit(":", 1)[1]))
    sources, hypotheses = sentences("a", 12)
    want = reference(sources, hypotheses)
    # verl's and our own loops: POST /score with the template's fields
    answer = post_json(pool_url + "/score", {"source": sources, "hypothesis": hypotheses})
    assert answer["logratio"] == pytest.approx(want, abs=1e-4)
    assert answer["verdict"] == [x > 0 for x in answer["logratio"]]
    # TRL: the async reward GRPOTrainer awaits, in chunks of 5 (three concurrent requests)
    reward = RemotePluieReward(pool_url, fields={"source": "source"}, chunk_size=5)
    assert asyncio.run(reward(prompts=["p"] * 12, completions=hypotheses, source=sources)) == pytest.approx(want, abs=1e-4)

    # verl's reward loop: one awaited call per sample, coalesced into requests by the client
    async def verl() -> list[dict]:
        return await asyncio.gather(*(compute_score("mrpc", h, s, url=pool_url) for s, h in zip(sources, hypotheses)))

    assert [r["score"] for r in asyncio.run(verl())] == pytest.approx(want, abs=1e-4)
    # OpenRLHF: /get_reward, the response being the query minus its prompt
    prompts = [f"Paraphrase: {s}\n" for s in sources[:3]]
    rewards = post_json(pool_url + "/get_reward", {"query": [p + h for p, h in zip(prompts, hypotheses)],
                                                   "prompts": prompts, "labels": sources[:3]})
    assert rewards["rewards"] == pytest.approx(want[:3], abs=1e-4)


@pytest.mark.slow
@pytest.mark.serial
def test_replicas_and_proxy_run_at_the_callers_priority(pool_url):
    """start_ray puts the local cluster's workers at nice 0, not Ray's 15 (at 15 a busy process beside
    them starves Serve's proxy until it misses its start-up check). Read from the processes themselves."""
    import os

    import psutil
    from ray._private import ray_constants  # the name of Ray's variable: this breaks if Ray renames it

    from pluie_reward.tools.pool.deployment import NICENESS_VARIABLE

    assert ray_constants.RAY_WORKER_NICENESS == NICENESS_VARIABLE and NICENESS_VARIABLE not in os.environ
    titles = {p.pid: " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])}
    workers = {pid: t for pid, t in titles.items() if t.startswith(("ray::ServeReplica", "ray::ProxyActor"))}
    assert sum(t.startswith("ray::ServeReplica") for t in workers.values()) == 2 and len(workers) == 3, workers
    assert {pid: psutil.Process(pid).nice() for pid in workers} == {pid: os.nice(0) for pid in workers}


@pytest.mark.slow
@pytest.mark.serial
def test_pool_answers_bad_requests_with_4xx_and_the_message(pool_url):
    import httpx

    from pluie_reward.serving.client import RemoteJudgeError, post_json

    with httpx.Client(base_url=pool_url, timeout=30) as http:
        assert http.get("/health").json()["fields"] == ["source", "hypothesis"]
        missing = http.post("/score", json={"source": ["a"], "hypothsis": ["b"]})
        assert missing.status_code == 422 and "missing field(s) ['hypothesis']" in missing.json()["detail"]
        not_json = http.post("/score", content=b"source=a", headers={"Content-Type": "text/plain"})
        assert not_json.status_code == 422 and "Content-Type: application/json" in not_json.json()["hint"]
        big = http.post("/score", json={"source": ["a"] * (MAX_ITEMS + 1), "hypothesis": ["b"] * (MAX_ITEMS + 1)})
        assert big.status_code == 413 and f"at most {MAX_ITEMS}" in big.json()["detail"]
        no_label = http.post("/get_reward", json={"query": ["p h"], "prompts": ["p "], "labels": [""]})
        assert no_label.status_code == 422 and "label_key" in no_label.json()["detail"]
    start = time.perf_counter()
    with pytest.raises(RemoteJudgeError) as caught:  # a 4xx is the request's fault: no retry
        post_json(pool_url + "/score", {"source": ["a"], "hypothesis": ["b", "c"]}, retries=3, backoff=2.0)
    assert caught.value.status == 422 and caught.value.detail and time.perf_counter() - start < 2.0


@pytest.mark.slow
@pytest.mark.serial
def test_a_replica_killed_under_load_loses_no_request(pool_url, reference, monkeypatch):
    """A replica killed (ray.kill) while it scores a request, during a bounded load, loses nothing.

    Two long requests (``LONG_ITEMS`` items: ``LONG_SECONDS`` in a replica) go first: each replica takes
    one (1 request at a time). Then 6 trainer-like clients x 10 calls of 8 completions (60 requests,
    each bounded by its timeout) queue in Ray's proxy, and one replica is killed 1 s later, before
    anything can have been answered. Every call is answered, with the reference scores: the long
    request of the dead replica comes back as 500 from Ray's proxy and the client retries it
    (common/http.py; the spy counts it), the queued ones Ray routes to the live replica. Ray then starts
    a replica in its place."""
    import ray
    from ray import serve

    from pluie_reward.serving import client as client_module
    from pluie_reward.serving.client import RemotePluieReward

    retried = [0]

    class CountingClient(client_module.AsyncHTTPClient):  # RemotePluieReward's HTTP client, counting retries
        async def aclose(self) -> None:
            retried[0] += self.stats["retries"]
            await super().aclose()

    monkeypatch.setattr(client_module, "AsyncHTTPClient", CountingClient)
    clients, calls, items = 6, 10, 8
    work = {(k, j): sentences(f"{k}.{j}", items) for k in range(clients) for j in range(calls)}
    work.update({("long", j): sentences(f"long{j}", LONG_ITEMS) for j in range(2)})
    reward = RemotePluieReward(pool_url, fields={"source": "source"}, timeout=30, retries=3, backoff=0.2)
    answered: dict = {}
    victim = replica_names()[0]
    killed: list[str] = []

    async def call(key: tuple) -> None:
        sources, hypotheses = work[key]
        answered[key] = await reward(prompts=["p"] * len(sources), completions=hypotheses, source=sources)

    async def client(k: int) -> None:
        for j in range(calls):
            await call((k, j))

    async def load() -> None:
        long = [asyncio.ensure_future(call(("long", j))) for j in range(2)]
        await asyncio.sleep(0.5)  # each replica has taken one long request
        trainers = [asyncio.ensure_future(client(k)) for k in range(clients)]
        await asyncio.sleep(1.0)
        killed.append(f"{len(answered)} answered, long ones answered: {[('long', j) in answered for j in range(2)]}")
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        await asyncio.wait_for(asyncio.gather(*long, *trainers), timeout=120)

    start = time.perf_counter()
    asyncio.run(load())
    seconds = time.perf_counter() - start
    assert killed == ["0 answered, long ones answered: [False, False]"], killed  # the victim held a long request
    assert len(answered) == clients * calls + 2
    assert retried[0] >= 1, "no request was retried: the killed replica held none (see the docstring)"
    for key, got in answered.items():
        assert got == pytest.approx(reference(*work[key]), abs=1e-4), key
    print(f"\n{len(answered)} requests in {seconds:.1f} s; replica {victim} killed ({killed[0]}); {retried[0]} retried")
    deadline = time.monotonic() + 60  # Ray starts a replica in its place (which then loads its judge)
    while time.monotonic() < deadline and (victim in replica_names() or len(replica_names()) < 2):
        time.sleep(0.5)
    states = serve.status().applications["pluie"].deployments["PluieJudge"].replica_states
    assert victim not in replica_names() and len(replica_names()) == 2, (states, replica_names())


@pytest.mark.slow
@pytest.mark.serial
def test_an_autoscaled_pool_grows_under_load_and_shrinks_after(pool_url, reference):
    """A second application (one route beside the first pool): 1 to 2 replicas of half a CPU, target 1
    request per replica, Ray's delays cut to 1 s up and 5 s down, its load window to 12 s. Six long requests (8 s each in a
    replica, at most 2 at a time per replica) keep the queue above the target: Ray adds the second
    replica while they run, every answer equals the reference, and once idle the pool is back to one."""
    from ray import serve

    from pluie_reward.serving.client import RemotePluieReward
    from pluie_reward.tools.pool import PoolOptions, deploy

    def replicas() -> int:
        return sum(name.startswith("SERVE_REPLICA::auto#") for name in replica_names())

    options = PoolOptions(min_replicas=1, max_replicas=2, target_ongoing_requests=1, max_ongoing_requests=2,
                          num_cpus=0.5, upscale_delay_s=1, downscale_delay_s=5, look_back_period_s=12, health_check_period_s=2)
    port = int(pool_url.rsplit(":", 1)[1])
    url = deploy(SLOW_JUDGE, TEMPLATE, options, port=port,
                 app_name="auto", route_prefix="/auto", log_level="warning", max_wait_ms=10)
    try:
        assert url == pool_url + "/auto" and replicas() == 1
        work = [sentences(f"auto{j}", LONG_ITEMS) for j in range(6)]
        reward = RemotePluieReward(url, fields={"source": "source"}, timeout=60, retries=3, backoff=0.2)
        seen: list[int] = []

        async def load() -> list:
            calls = [asyncio.ensure_future(reward(prompts=["p"] * LONG_ITEMS, completions=h, source=s)) for s, h in work]
            while not all(c.done() for c in calls):
                seen.append(replicas())
                await asyncio.sleep(0.5)
            return [c.result() for c in calls]

        start = time.perf_counter()
        answers = asyncio.run(load())
        busy = time.perf_counter() - start
        assert max(seen) == 2, seen  # grew while the load ran
        for (sources, hypotheses), got in zip(work, answers):
            assert got == pytest.approx(reference(sources, hypotheses), abs=1e-4)
        deadline = time.monotonic() + 120  # Ray averages the load over 12 s (look_back_period_s) before it sees the pool idle
        while time.monotonic() < deadline and replicas() > 1:
            time.sleep(0.5)
        idle = time.perf_counter() - start - busy
        assert replicas() == 1, serve.status().applications["auto"].deployments
        print(f"\nautoscaled 1 -> 2 replicas {seen.index(2) * 0.5:.1f} s into the load; 6 long requests in {busy:.1f} s; "
              f"back to 1 replica {idle:.1f} s after")
    finally:
        serve.delete("auto")
