"""PLUIE as verl's GenRM (pluie_reward/serving/genrm.py): compute_score called as verl's reward loop calls it, with
``reward_router_address`` (verl's router, tests/verl_router.py) and ``reward_model_tokenizer``, scoring on a fake
vLLM OpenAI server whose answers are a plain forward of the tiny judge's model (written here, no vLLM); the
refusals of a server that cannot give what PLUIE needs. The same path on a real vLLM CPU server of the embedded
judge: tests/test_engines.py::test_verl_genrm_on_the_reward_router.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import torch

from pluie_reward.serving import background, client, create_app, genrm
from pluie_reward.serving.client import compute_score, compute_score_batch, compute_score_sync
from pluie_reward.serving.genrm import GenRMError
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_judge, make_tiny_tokenizer

from verl_router import NaiveRouter, verl_reward_calls

SOURCES = ["The cat sleeps on the mat.", "The dog barks at night.", "A man plays the guitar.", "The museum is closed today."]
HYPOTHESES = ["A cat is sleeping on the mat.", "At night the dog barks.", "Someone plays a guitar.", "Today the museum is shut."]


class _Handler(BaseHTTPRequestHandler):
    server: "FakeVLLM"

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        fake = self.server
        fake.counts[self.path] = fake.counts.get(self.path, 0) + 1
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": fake.owner, "max_model_len": 4096}]})
        elif self.path == "/version" and fake.owner == "vllm":
            self._send(200, {"version": fake.version})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        fake = self.server
        fake.counts[self.path] = fake.counts.get(self.path, 0) + 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            self._send(200, {"tokens": fake.tokenizer(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))["input_ids"]})
        elif self.path == "/v1/completions":
            if fake.refuse:
                self._send(400, {"error": {"message": "logprob_token_ids: extra inputs are not permitted", "code": 400}})
                return
            fake.prompts += [list(p) for p in body["prompt"]]
            self._send(200, {"choices": [dict(index=i, text="", logprobs=fake.logprobs(p, body)) for i, p in enumerate(body["prompt"])]})
        else:
            self._send(404, {"detail": "Not Found"})

    def log_message(self, *args: Any) -> None:
        pass


class FakeVLLM(ThreadingHTTPServer):
    """vLLM's OpenAI server as PLUIE reads it: ``/v1/models``, ``/version``, ``/tokenize`` and one-token
    ``/v1/completions`` whose log-probabilities are a plain forward of ``model`` (``ignores_ids``: an older vLLM
    answering with its top ``logprobs`` tokens only; ``refuse``: one answering 400)."""

    daemon_threads = True

    def __init__(self, model: Any, tokenizer: Any, owner: str = "vllm", version: str = "0.31.0", ignores_ids: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model, self.tokenizer, self.owner, self.version, self.ignores_ids = model, tokenizer, owner, version, ignores_ids
        self.refuse = False
        self.counts: dict[str, int] = {}
        self.prompts: list[list[int]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.lock = threading.Lock()

    def logprobs(self, prompt: list[int], body: dict) -> dict:
        with self.lock, torch.no_grad():
            values = torch.log_softmax(self.model(torch.tensor([prompt])).logits[0, -1].float(), dim=-1)
        asked = body.get("logprob_token_ids") if not self.ignores_ids else None
        tokens = asked or values.topk(int(body["logprobs"])).indices.tolist()
        top = {f"token_id:{t}": float(values[t]) for t in [int(values.argmax())] + list(tokens)}
        return {"tokens": [f"token_id:{int(values.argmax())}"], "top_logprobs": [top]}

    def __enter__(self) -> "FakeVLLM":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def fresh_genrm():
    """Each test's judges are its own (genrm keeps one per address and process), and its routes are logged anew."""
    genrm._judges.clear()
    client._routes.clear()
    yield
    for judge in genrm._judges.values():
        if not isinstance(judge, Exception):
            judge.close()
    genrm._judges.clear()


def samples(sources, hypotheses):
    return [{"data_source": "mrpc", "solution_str": h, "ground_truth": s, "extra_info": {"index": i}}
            for i, (s, h) in enumerate(zip(sources, hypotheses))]


def test_compute_score_on_verls_reward_model_as_verl_calls_it(tiny_judge, fresh_genrm, caplog, monkeypatch):
    """64 concurrent samples through verl's router: the local judge's PLUIE (≤ 1e-4), in one /v1/completions
    request after the checks; the copy scores 0; the template prefix went first, alone."""
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    sources = [SOURCES[i % 4] for i in range(64)]
    hypotheses = [f"{HYPOTHESES[i % 4]} ({i})" for i in range(64)]
    want = tiny_judge.score("para-fs", source=sources, hypothesis=hypotheses, details=True)
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer) as server, NaiveRouter([server.url]) as router:
        with caplog.at_level(logging.INFO, logger="pluie_reward.serving.client"):
            got = verl_reward_calls(compute_score, samples(sources, hypotheses), reward_router_address=router.address,
                                    reward_model_tokenizer=tiny_judge.tokenizer, reward_kwargs={"output": "logratio"})
            before = server.counts["/v1/completions"]
            copies = verl_reward_calls(compute_score, samples(SOURCES, SOURCES[:3] + [HYPOTHESES[3]]),
                                       reward_router_address=router.address, reward_model_tokenizer=tiny_judge.tokenizer,
                                       reward_kwargs={"output": "paraphrase"})
    assert [g["reward_score"] for g in got] == pytest.approx([w["logratio"] for w in want], abs=1e-4)
    assert [g["reward_extra_info"]["acc"] for g in got] == [float(w["logratio"] > 0) for w in want]
    assert [g["reward_extra_info"]["p_yes"] for g in got] == pytest.approx([w["p_yes"] for w in want], abs=1e-4)
    # the checks' probe, then the 64 samples in one request; 4 more samples, one more request
    assert before == 2 and server.counts["/v1/completions"] == router.counts["/v1/completions"] == 3, server.counts
    assert [c["reward_score"] for c in copies][:3] == [0.0, 0.0, 0.0] and copies[3]["reward_score"] > 0
    assert sorted(copies[0]["reward_extra_info"]) == ["acc", "logratio", "novelty", "p_yes", "score"]
    prefix = list(tiny_judge.bind("para-fs").prefix_ids)
    assert server.prompts[0] == prefix  # the probe is the template prefix alone: vLLM caches it before any batch
    assert all(p[: len(prefix)] == prefix for p in server.prompts)
    routes = [r.getMessage() for r in caplog.records if "scoring on" in r.getMessage()]
    assert routes == [f"pluie_reward compute_score: scoring on verl's reward model (reward_router_address) at http://{router.address}."]


def test_a_configured_judge_server_wins_over_the_router(tiny_judge, fresh_genrm, caplog, monkeypatch):
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer) as vllm, background(create_app(tiny_judge, "para-fs")) as judge_server:
        with caplog.at_level(logging.INFO, logger="pluie_reward.serving.client"):
            got = verl_reward_calls(compute_score, samples(SOURCES, HYPOTHESES), reward_router_address=vllm.url[len("http://"):],
                                    reward_model_tokenizer=tiny_judge.tokenizer, reward_kwargs={"url": judge_server.url})
        with pytest.raises(ValueError, match="template= and threshold= are settings of scoring on verl's reward model"):
            verl_reward_calls(compute_score, samples(SOURCES, HYPOTHESES), reward_router_address=vllm.url[len("http://"):],
                              reward_model_tokenizer=tiny_judge.tokenizer, reward_kwargs={"url": judge_server.url, "template": "net"})
    assert vllm.counts == {}
    assert [g["reward_score"] for g in got] == pytest.approx(tiny_judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES), abs=1e-4)
    warned = [r for r in caplog.records if "wins over verl's reward_router_address" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING


def test_template_and_threshold_settings(tiny_judge, fresh_genrm, monkeypatch):
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    want = tiny_judge.score("para-direct", source=SOURCES, hypothesis=HYPOTHESES)
    threshold = (sorted(want)[1] + sorted(want)[2]) / 2  # two items above, two below
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer) as server:
        got = verl_reward_calls(compute_score, samples(SOURCES, HYPOTHESES), reward_router_address=server.url,
                                reward_model_tokenizer=tiny_judge.tokenizer,
                                reward_kwargs={"template": "para-direct", "threshold": threshold})
        with pytest.raises(ValueError, match="template 'net-likert' does not answer Yes/No"):
            verl_reward_calls(compute_score, samples(SOURCES[:1], HYPOTHESES[:1]), reward_router_address=server.url,
                              reward_model_tokenizer=tiny_judge.tokenizer, reward_kwargs={"template": "net-likert"})
    assert [g["reward_score"] for g in got] == pytest.approx(want, abs=1e-4)
    assert [g["reward_extra_info"]["acc"] for g in got] == [float(w > threshold) for w in want]


def test_the_synchronous_functions_score_on_verls_reward_model_too(tiny_judge, fresh_genrm, caplog, monkeypatch):
    """compute_score_batch (one Judge.score: one /v1/completions request of the batch) and compute_score_sync, given
    verl's reward_router_address and no judge server URL, score as the async compute_score does; a URL still wins."""
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    want = tiny_judge.score("para-direct", source=SOURCES, hypothesis=HYPOTHESES, details=True)
    threshold = (sorted(w["logratio"] for w in want)[1] + sorted(w["logratio"] for w in want)[2]) / 2
    verl = {"template": "para-direct", "threshold": threshold}
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer) as server, NaiveRouter([server.url]) as router:
        routed = {"reward_router_address": router.address, "reward_model_tokenizer": tiny_judge.tokenizer}
        with caplog.at_level(logging.INFO, logger="pluie_reward.serving.client"):
            got = compute_score_batch(["mrpc"] * 4, HYPOTHESES, SOURCES, [{}] * 4, return_dict=True, **verl, **routed)
        batched = server.counts["/v1/completions"]
        one = compute_score_sync("mrpc", HYPOTHESES[0], SOURCES[0], {}, **verl, **routed)
        copies = compute_score_batch(["mrpc"] * 2, SOURCES[:2], SOURCES[:2], output="paraphrase", **routed)
        with background(create_app(tiny_judge, "para-fs")) as judge_server:
            served = compute_score_batch(["mrpc"], HYPOTHESES[:1], SOURCES[:1], url=judge_server.url, **routed)
    assert [g["logratio"] for g in got] == pytest.approx([w["logratio"] for w in want], abs=1e-4)
    assert [g["acc"] for g in got] == [float(w["logratio"] > threshold) for w in want] and sum(g["acc"] for g in got) == 2
    assert batched == 2  # the checks' probe, then the 4 items in one request
    assert one["logratio"] == pytest.approx(want[0]["logratio"], abs=1e-4) and one["acc"] == float(want[0]["logratio"] > threshold)
    assert copies == [0.0, 0.0]  # the task's copy-proof reward
    assert served == pytest.approx(tiny_judge.score("para-fs", source=SOURCES[:1], hypothesis=HYPOTHESES[:1]), abs=1e-4)
    routes = [r.getMessage() for r in caplog.records if "scoring on" in r.getMessage()]  # once per place
    assert routes == [f"pluie_reward compute_score: scoring on verl's reward model (reward_router_address) at http://{router.address}.",
                      "pluie_reward compute_score: scoring on the judge server (a configured URL wins over verl's "
                      f"reward_router_address) at {judge_server.url}/score."]


def run_one(address: str, tokenizer: Any) -> list[dict[str, Any]]:
    return verl_reward_calls(compute_score, samples(SOURCES[:2], HYPOTHESES[:2]), reward_router_address=address,
                             reward_model_tokenizer=tokenizer, reward_kwargs={"retries": 0})


def test_sglang_and_other_servers_are_refused_by_name(tiny_judge, fresh_genrm, monkeypatch):
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer, owner="sglang") as server, NaiveRouter([server.url]) as router:
        with pytest.raises(GenRMError, match=r"at http://127\.0\.0\.1:\d+ is SGLang .*rollout\.name=vllm.*reward_kwargs\.url"):
            run_one(router.address, tiny_judge.tokenizer)
        with pytest.raises(GenRMError, match="is SGLang"):  # kept: the second call fails at once
            run_one(router.address, tiny_judge.tokenizer)
        assert server.counts == {"/v1/models": 1}
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer, owner="llamacpp") as server:
        with pytest.raises(GenRMError, match="is not vLLM .*owned_by='llamacpp'"):
            run_one(server.url, tiny_judge.tokenizer)


def test_a_tokenizer_other_than_the_served_models_is_refused(tiny_judge, fresh_genrm, monkeypatch):
    """verl's reward_model_tokenizer and the served model must tokenize alike: else every prompt's ids mean other words."""
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    other = make_tiny_tokenizer(corpus=["Le chat dort sur le tapis. Le chien aboie. You will receive two sentences."] * 300)  # other merges
    with FakeVLLM(make_tiny_causal_lm(other), other) as server, NaiveRouter([server.url]) as router:
        with pytest.raises(GenRMError, match=r"serves 'tiny', whose tokenizer differs from reward_model_tokenizer .*first different "
                                             r"at token \d+ .*reward\.reward_model\.model_path"):
            run_one(router.address, tiny_judge.tokenizer)
        assert "/v1/completions" not in server.counts
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer) as server:
        with pytest.raises(ValueError, match="needs verl's reward_model_tokenizer"):
            run_one(server.url, None)


def test_a_vllm_without_logprob_token_ids_is_refused_with_its_version(tiny_judge, fresh_genrm, monkeypatch):
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer, version="0.10.1", ignores_ids=True) as server, NaiveRouter([server.url]) as router:
        with pytest.raises(GenRMError, match=r"runs vLLM 0\.10\.1, whose OpenAI server ignores logprob_token_ids .*upgrade verl's vLLM"):
            run_one(router.address, tiny_judge.tokenizer)
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer, version="0.11.0") as server, NaiveRouter([server.url]) as router:
        server.refuse = True  # a 400, which verl's router turns into a 500
        with pytest.raises(GenRMError, match=r"\(vLLM 0\.11\.0\) refused /v1/completions with logprob_token_ids .*HTTP 500"):
            run_one(router.address, tiny_judge.tokenizer)


def test_verls_reward_model_reads_completions_as_the_local_reward(tiny_judge, fresh_genrm, monkeypatch):
    """On verl's GenRM path too, disguised copies get 0 and an answer with a label, emphasis or no final stop the bare
    answer's copy-proof reward: the reward model reads the bare answer (the reference reads it literally here)."""
    import math

    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)
    source, honest = SOURCES[0], "A cat is asleep on the mat."
    completions = ["The_cat sleeps on_the mat.", "Tʜᴇ cat sleeps on the mᴀt.", "Paraphrase: " + honest, "**" + honest + "**",
                   honest[:-1]]
    bare = 1 / (1 + math.exp(-tiny_judge.score("para-fs", source=source, hypothesis=[honest], use_cache=False)[0]))
    want = [0.0, 0.0] + [bare] * 3  # "a cat is asleep on the mat": 3 edits of 7 words, above the 0.3 target
    with FakeVLLM(tiny_judge.model, tiny_judge.tokenizer) as server, NaiveRouter([server.url]) as router:
        got = verl_reward_calls(compute_score, samples([source] * 5, completions), reward_router_address=router.address,
                                reward_model_tokenizer=tiny_judge.tokenizer, reward_kwargs={"output": "paraphrase"})
        batch = compute_score_batch(["mrpc"] * 5, completions, [source] * 5, output="paraphrase",
                                    reward_router_address=router.address, reward_model_tokenizer=tiny_judge.tokenizer)
    assert [g["reward_score"] for g in got] == pytest.approx(want, abs=1e-4)
    assert batch == pytest.approx(want, abs=1e-4)
