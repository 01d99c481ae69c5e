"""Each framework's current call, replayed against our functions and server (keys, keyword arguments,
return types), written from the frameworks' sources (cited) rather than by installing them:

- TRL 1.14.0, the lowest version pyproject allows (``trl>=1.14``): ``GRPOTrainer._calculate_rewards``.
- verl 0.9.1 (verl-project/verl@1dda039b): the reward loop's naive manager calling ``compute_score``.
- OpenRLHF 0.10.2 .. 0.11.0 (OpenRLHF/OpenRLHF@3c3be623): ``SingleTurnAgentExecutor`` posting to
  ``--reward.remote_url`` or calling a ``reward_func`` file.

References are independent ``Judge.score`` calls on another instance of the same tiny judge.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
import logging
import math
import pickle
import re
from pathlib import Path

import pytest
import torch

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from pluie_reward import AsyncPluieReward, NoveltyReward, PluieReward  # noqa: E402
from pluie_reward.integrations.novelty import novelty_score  # noqa: E402
from pluie_reward.serving import background, create_app  # noqa: E402
from pluie_reward.serving import client as client_module  # noqa: E402
from pluie_reward.serving.client import RemotePluieReward, compute_score, compute_score_sync  # noqa: E402
from pluie_reward.testing import make_tiny_judge  # noqa: E402

TOKEN = "frameworks-token-3"
TOL = 1e-3
SOURCES = ["The cat sleeps on the mat.", "The dog barks at night.", "Rain fell over the city all day."]
HYPOTHESES = ["A cat is asleep on the mat.", "At night the dog barks.", "It rained in the city the whole day.", "The cat sleeps on the mat."]


@pytest.fixture(scope="module")
def server():
    app = create_app(make_tiny_judge(), "para-fs", token=TOKEN, max_wait_ms=20)
    with background(app, host="127.0.0.1", port=0) as srv:
        srv.app = app
        yield srv


def score_requests(server) -> int:
    snapshot = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).json()
    return snapshot["requests"]["by_path"].get("/score", 0)


# TRL ------------------------------------------------------------------------------------------------
def trl_1_14_is_async_callable(func) -> bool:
    """trl==1.14.0 (wheel):trl/trainer/utils.py:238-249."""
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(func.__call__)


def trl_1_14_callable_name(func) -> str:
    """trl==1.14.0 (wheel):trl/trainer/utils.py:227-235."""
    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__name__", type(func).__name__)


class Trl114Rewards:
    """``GRPOTrainer._calculate_rewards`` of trl==1.14.0 (wheel):trl/trainer/grpo_trainer.py:1664-1755,
    for reward functions that are not models: the dataset columns (all keys of the inputs but prompt,
    completion, completion_ids) as lists, plus trainer_state, log_extra, log_metric, environments (when
    set); async callables gathered on an event loop, sync ones called inline; None -> NaN; one reward per
    completion or ValueError."""

    def __init__(self, reward_funcs, environments=None):
        self.reward_funcs = reward_funcs
        self.names = [trl_1_14_callable_name(f) for f in reward_funcs]
        self.state = object()  # the TrainerState
        self.environments = environments
        self.extra: dict[str, list] = {}
        self.metrics: dict[str, list] = {}

    def _log_completion_extra(self, column: str, values: list) -> None:  # grpo_trainer.py:1638-1648
        self.extra.setdefault(column, []).extend(values)

    def _log_metric(self, name: str, value: float) -> None:  # grpo_trainer.py:1650-1661
        self.metrics.setdefault(name, []).append(value)

    def __call__(self, inputs, prompts, completions, completion_ids_list):
        rewards = torch.zeros(len(prompts), len(self.reward_funcs))
        keys = [key for key in inputs[0] if key not in ["prompt", "completion", "completion_ids"]]
        reward_kwargs = {key: [example[key] for example in inputs] for key in keys}
        reward_kwargs["trainer_state"] = self.state
        reward_kwargs["log_extra"] = self._log_completion_extra
        reward_kwargs["log_metric"] = self._log_metric
        if self.environments is not None:
            reward_kwargs["environments"] = self.environments
        async_funcs = []
        for i, (func, name) in enumerate(zip(self.reward_funcs, self.names)):
            if trl_1_14_is_async_callable(func):
                async_funcs.append((i, func, name))
            else:
                out = func(prompts=prompts, completions=completions, completion_ids=completion_ids_list, **reward_kwargs)
                out = [r if r is not None else torch.nan for r in out]
                if len(out) != len(prompts):
                    raise ValueError(f"The reward function '{name}' returned {len(out)} rewards")
                rewards[:, i] = torch.tensor(out, dtype=torch.float32)
        if async_funcs:

            async def invoke(i, func, name):
                out = await func(prompts=prompts, completions=completions, completion_ids=completion_ids_list, **reward_kwargs)
                out = [r if r is not None else torch.nan for r in out]
                if len(out) != len(prompts):
                    raise ValueError(f"The reward function '{name}' returned {len(out)} rewards")
                return i, out

            async def run_all():
                return await asyncio.gather(*(invoke(i, f, n) for i, f, n in async_funcs))

            # TRL runs them on a daemon thread's loop (run_coroutine_threadsafe(...).result()); the
            # functions see a running loop either way
            for i, out in asyncio.run(run_all()):
                rewards[:, i] = torch.tensor(out, dtype=torch.float32)
        return rewards


def trl_batch(conversational: bool):
    """GRPO inputs: 2 prompts x G=2 completions; the dataset has prompt, source and an extra column."""
    prompts = [f"Paraphrase: {SOURCES[i // 2]}" for i in range(4)]
    completions = [HYPOTHESES[i] for i in range(4)]
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in prompts]
        completions = [[{"role": "assistant", "content": c}] for c in completions]
    inputs = [{"prompt": prompts[i], "source": SOURCES[i // 2], "topic": "news"} for i in range(4)]
    return inputs, prompts, completions, [[1, 2, 3]] * 4


def test_trl_floor_is_1_14_where_async_callable_classes_are_awaited():
    """trl==1.13.0 (wheel):grpo_trainer.py:717,1678 checks inspect.iscoroutinefunction(func), False for an
    instance with an async __call__ (which then runs as a sync reward and fails); 1.14 checks __call__."""
    remote = RemotePluieReward("http://127.0.0.1:1")
    local_async = AsyncPluieReward(make_tiny_judge())
    for reward in (remote, local_async):
        assert not inspect.iscoroutinefunction(reward)  # what TRL 1.13 looked at
        assert trl_1_14_is_async_callable(reward)
    assert not trl_1_14_is_async_callable(PluieReward(make_tiny_judge()))
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    floors = re.findall(r'"trl>=([0-9.]+)[,"]', pyproject)
    assert floors and all(tuple(map(int, f.split("."))) >= (1, 14) for f in floors), floors


@pytest.mark.parametrize("conversational", [False, True])
def test_trl_1_14_calculate_rewards_replay(server, tiny_judge, conversational):
    judge = make_tiny_judge()
    funcs = [
        PluieReward(judge, fields={"source": "source"}, name="pluie"),
        AsyncPluieReward(make_tiny_judge(), fields={"source": "source"}, name="pluie_async"),
        RemotePluieReward(server.url, token=TOKEN, fields={"source": "source"}, name="pluie_remote"),
        NoveltyReward("source"),
    ]
    trainer = Trl114Rewards(funcs, environments=[None] * 4)  # GRPO passes environments when it has them
    inputs, prompts, completions, ids = trl_batch(conversational)
    rewards = trainer(inputs, prompts, completions, ids)

    sources = [SOURCES[i // 2] for i in range(4)]
    want = tiny_judge.score("para-fs", source=sources, hypothesis=HYPOTHESES, use_cache=False)
    for column in range(3):
        assert rewards[:, column].tolist() == pytest.approx(want, abs=TOL)
    assert rewards[:, 3].tolist() == pytest.approx([novelty_score(s, h) for s, h in zip(sources, HYPOTHESES)], abs=1e-6)
    assert trainer.names == ["pluie", "pluie_async", "pluie_remote", "novelty"]
    # per-completion columns of the completions table, and one accept rate per reward and batch
    for name in ("pluie", "pluie_async", "pluie_remote"):
        assert trainer.extra[f"{name}/logratio"] == pytest.approx(want, abs=TOL)
        assert trainer.metrics[f"{name}/accept_rate"] == [pytest.approx(sum(w > 0 for w in want) / 4)]


def test_trl_rewards_work_without_trainer_kwargs_and_pickle(server, tiny_judge):
    """TRL's experimental AsyncGRPO passes only completions, prompts, completion_ids and the columns,
    and pickles the reward functions into a spawned process (trl==1.16.0:
    trl/experimental/async_grpo/async_rollout_worker.py:613-617,1148-1214)."""
    remote = pickle.loads(pickle.dumps(RemotePluieReward(server.url, token=TOKEN)))
    got = asyncio.run(remote(prompts=["p"], completions=HYPOTHESES[:1], completion_ids=[[1]], source=SOURCES[:1]))
    assert got == pytest.approx(tiny_judge.score("para-fs", source=SOURCES[:1], hypothesis=HYPOTHESES[:1], use_cache=False), abs=TOL)
    local = pickle.loads(pickle.dumps(PluieReward(functools.partial(make_tiny_judge), fields={"source": "source"})))
    assert local(prompts=["p"], completions=HYPOTHESES[:1], completion_ids=[[1]], source=SOURCES[:1]) == pytest.approx(got, abs=TOL)


# verl -----------------------------------------------------------------------------------------------
def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):  # verl@1dda039b:verl/trainer/ppo/reward.py:32-38
    return raw_fn(*args, **{**kwargs, **extra_kwargs})


async def _call_with_kwargs_async(raw_fn, extra_kwargs, *args, **kwargs):  # reward.py:41-47
    return await raw_fn(*args, **{**kwargs, **extra_kwargs})


def verl_custom_reward_fn(raw_fn, reward_kwargs):
    """verl@1dda039b:verl/trainer/ppo/reward.py:82-86."""
    if not inspect.iscoroutinefunction(raw_fn):
        return functools.partial(_call_with_kwargs, raw_fn, reward_kwargs)
    return functools.partial(_call_with_kwargs_async, raw_fn, reward_kwargs)


async def verl_naive_run_single(compute, loop, item, reward_router_address=None):
    """verl@1dda039b:verl/experimental/reward_loop/reward_manager/naive.py:34-99 for one sample."""
    data_source, response, ground_truth, extra_info = item
    extra_info = dict(extra_info)
    extra_info["num_turns"] = None  # naive.py:49-52
    extra_info["rollout_reward_scores"] = {}
    response_str = await loop.run_in_executor(None, lambda: response)  # the decode, naive.py:54-56
    extra = {"reward_router_address": reward_router_address, "reward_model_tokenizer": object()} if reward_router_address else {}
    if inspect.iscoroutinefunction(compute):  # naive.py:30 (on the partial)
        result = await compute(data_source=data_source, solution_str=response_str, ground_truth=ground_truth, extra_info=extra_info, **extra)
    else:
        result = await loop.run_in_executor(
            None, lambda: compute(data_source=data_source, solution_str=response_str, ground_truth=ground_truth, extra_info=extra_info, **extra)
        )
    if isinstance(result, dict):  # naive.py:88-95
        return {"reward_score": result["score"], "reward_extra_info": dict(result)}
    return {"reward_score": result, "reward_extra_info": {"acc": result}}


def verl_compute_score_batch(compute, items, reward_router_address=None):
    """RewardLoopWorker.compute_score_batch: one task per sample (verl@1dda039b:
    verl/experimental/reward_loop/reward_loop.py:138-143)."""

    async def run():
        loop = asyncio.get_running_loop()
        tasks = [asyncio.create_task(verl_naive_run_single(compute, loop, item, reward_router_address)) for item in items]
        return await asyncio.gather(*tasks)

    return asyncio.run(run())


@pytest.mark.parametrize("reward_model_enabled", [False, True])
def test_verl_reward_loop_replay_batches_async_calls(server, tiny_judge, reward_model_enabled):
    items = [("paraphrase", h, None, {"src": SOURCES[i % 3], "split": "train"}) for i, h in enumerate(HYPOTHESES * 2)]
    reward_kwargs = {"url": server.url, "token": TOKEN, "fields": {"source": "extra_info.src"}, "max_wait_ms": 200}
    compute = verl_custom_reward_fn(compute_score, reward_kwargs)
    assert inspect.iscoroutinefunction(compute)  # verl awaits it on its own loop
    before = score_requests(server)
    results = verl_compute_score_batch(compute, items, reward_router_address="10.0.0.1:9000" if reward_model_enabled else None)
    requests = score_requests(server) - before

    want = tiny_judge.score("para-fs", source=[s[3]["src"] for s in items], hypothesis=[s[1] for s in items], use_cache=False)
    assert [r["reward_score"] for r in results] == pytest.approx(want, abs=TOL)
    keys = {tuple(r["reward_extra_info"]) for r in results}
    assert keys == {("score", "acc", "logratio", "p_yes")}  # the same keys for every sample (reward_loop.py:366)
    for r, w in zip(results, want):
        info = r["reward_extra_info"]
        assert info["acc"] == float(w > 0) and info["p_yes"] == pytest.approx(1 / (1 + math.exp(-w)), abs=TOL)
    assert 1 <= requests < len(items)  # concurrent calls went out together


def test_verl_sync_compute_score_for_the_remote_manager(server, tiny_judge):
    """The sync variant runs in verl's thread pool (naive.py:75-84, and the remote manager, which
    asserts the function is not async: reward_manager/remote.py:53-54)."""
    compute = verl_custom_reward_fn(compute_score_sync, {"url": server.url, "token": TOKEN})
    assert not inspect.iscoroutinefunction(compute)
    results = verl_compute_score_batch(compute, [("d", HYPOTHESES[0], SOURCES[0], {})], reward_router_address="x:1")
    want = tiny_judge.score("para-fs", source=SOURCES[:1], hypothesis=HYPOTHESES[:1], use_cache=False)
    assert results[0]["reward_score"] == pytest.approx(want[0], abs=TOL)
    # a float result is logged as "acc" by verl: return_dict=False gives the bare score
    plain = verl_compute_score_batch(verl_custom_reward_fn(compute_score, {"url": server.url, "token": TOKEN, "return_dict": False}),
                                     [("d", HYPOTHESES[0], SOURCES[0], {})])
    assert plain[0]["reward_extra_info"] == {"acc": pytest.approx(want[0], abs=TOL)}


def test_verl_bad_item_fails_alone_and_unknown_kwargs_are_ignored(caplog):
    strict = create_app(make_tiny_judge(), "para-fs", max_wait_ms=20, truncate=False)  # over-long items get 422
    huge = " ".join(["paraphrase"] * 6000)
    with background(strict) as srv:
        compute = verl_custom_reward_fn(compute_score, {"url": srv.url, "max_wait_ms": 300, "future_verl_kwarg": 1})

        async def run():
            calls = [
                compute(data_source="d", solution_str=HYPOTHESES[0], ground_truth=SOURCES[0], extra_info={}),
                compute(data_source="d", solution_str=huge, ground_truth=SOURCES[1], extra_info={}),  # the server refuses it
                compute(data_source="d", solution_str=HYPOTHESES[2], ground_truth=12, extra_info={}),  # not text
                compute(data_source="d", solution_str=HYPOTHESES[1], ground_truth=SOURCES[1], extra_info={}),
            ]
            return await asyncio.gather(*(asyncio.create_task(c) for c in calls), return_exceptions=True)

        with caplog.at_level(logging.WARNING):
            good, too_long, not_text, other = asyncio.run(run())
    want = make_tiny_judge().score("para-fs", source=[SOURCES[0], SOURCES[1]], hypothesis=[HYPOTHESES[0], HYPOTHESES[1]], use_cache=False)
    assert [good["score"], other["score"]] == pytest.approx(want, abs=TOL)
    assert isinstance(too_long, client_module.RemoteJudgeError) and too_long.status == 422
    assert isinstance(not_text, TypeError) and "'source'" in str(not_text)
    assert any("future_verl_kwarg" in r.getMessage() for r in caplog.records)


# OpenRLHF -------------------------------------------------------------------------------------------
def openrlhf_apply(rewards_info):
    """agent.py:288-297: rewards, scores (falls back to rewards), extra_logs."""
    score_value = rewards_info.get("scores")
    if score_value is None:
        score_value = rewards_info.get("rewards")
    return {"reward": rewards_info.get("rewards"), "scores": score_value, "extra_logs": rewards_info.get("extra_logs") or {}}


async def openrlhf_fetch_via_http(endpoints, queries, prompts, labels):
    """OpenRLHF@3c3be623:openrlhf/utils/agent.py:322-357 (one try instead of five): aiohttp, no headers,
    the sample to the first server, empty lists to the others."""
    aiohttp = pytest.importorskip("aiohttp")
    batch_size = (len(queries) + len(endpoints) - 1) // len(endpoints)
    timeout = aiohttp.ClientTimeout(total=180)

    async def post(url, data):
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.post(url, json=data) as response:
                response.raise_for_status()
                return await response.json()

    tasks = []
    for i, url in enumerate(endpoints):
        s, e = i * batch_size, min((i + 1) * batch_size, len(queries))
        tasks.append(asyncio.create_task(post(url, {"query": queries[s:e], "prompts": prompts[s:e], "labels": labels[s:e]})))
    return await asyncio.gather(*tasks)


def openrlhf_sample(tokenizer, source, response):
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": f"Paraphrase: {source}"}], tokenize=False, add_generation_prompt=True)
    return prompt + response + "<|im_end|>", prompt  # decoded with special tokens kept (agent.py:283)


def test_openrlhf_http_replay_with_token_in_the_url(server, tiny_judge):
    query, prompt = openrlhf_sample(tiny_judge.tokenizer, SOURCES[0], HYPOTHESES[0])
    # OpenRLHF cannot send headers; aiohttp turns the URL's user:password into Basic auth
    with_token = server.url.replace("http://", f"http://pluie:{TOKEN}@") + "/get_reward"
    answers = asyncio.run(openrlhf_fetch_via_http([with_token, with_token], [query], [prompt], [SOURCES[0]]))
    first = openrlhf_apply(answers[0])
    want = tiny_judge.score("para-fs", source=SOURCES[:1], hypothesis=HYPOTHESES[:1], use_cache=False)
    assert first["reward"] == pytest.approx(want, abs=TOL)
    assert first["scores"] == pytest.approx([1 / (1 + math.exp(-want[0]))], abs=TOL)
    assert set(first["extra_logs"]) == {"pluie_logratio", "pluie_p_yes", "pluie_verdict"}
    assert all(len(v) == 1 for v in first["extra_logs"].values())  # OpenRLHF makes tensor([value]) of each
    assert answers[1] == {"rewards": [], "scores": [], "extra_logs": {"pluie_logratio": [], "pluie_p_yes": [], "pluie_verdict": []}}


def test_openrlhf_left_truncated_prompt(server, tiny_judge):
    """OpenRLHF keeps the last max_len - max_tokens prompt tokens (agent.py:221-234) but sends the full
    prompt string with the query decoded from the kept tokens + the response (agent.py:283-287)."""
    tok = tiny_judge.tokenizer
    query, prompt = openrlhf_sample(tok, SOURCES[2], HYPOTHESES[2])
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    response_ids = tok(HYPOTHESES[2] + "<|im_end|>", add_special_tokens=False)["input_ids"]
    truncated = tok.decode(prompt_ids[len(prompt_ids) // 2 :] + response_ids, skip_special_tokens=False)
    assert prompt not in truncated
    with_token = server.url.replace("http://", f"http://pluie:{TOKEN}@") + "/get_reward"
    answer = openrlhf_apply(asyncio.run(openrlhf_fetch_via_http([with_token], [truncated], [prompt], [SOURCES[2]]))[0])
    want = tiny_judge.score("para-fs", source=SOURCES[2:3], hypothesis=HYPOTHESES[2:3], use_cache=False)
    assert answer["reward"] == pytest.approx(want, abs=TOL)


def test_openrlhf_failures_are_loud_on_the_server(server, tiny_judge, caplog):
    aiohttp = pytest.importorskip("aiohttp")
    query, prompt = openrlhf_sample(tiny_judge.tokenizer, SOURCES[0], HYPOTHESES[0])
    with_token = server.url.replace("http://", f"http://pluie:{TOKEN}@") + "/get_reward"
    with caplog.at_level(logging.WARNING, logger="pluie_reward.server"):
        # no --data.label_key: OpenRLHF sends "" (openrlhf/datasets/prompts_dataset.py:44)
        with pytest.raises(aiohttp.ClientResponseError, match="422"):
            asyncio.run(openrlhf_fetch_via_http([with_token], [query], [prompt], [""]))
        with pytest.raises(aiohttp.ClientResponseError, match="401"):
            asyncio.run(openrlhf_fetch_via_http([server.url + "/get_reward"], [query], [prompt], [SOURCES[0]]))
    messages = [r.getMessage() for r in caplog.records if r.name == "pluie_reward.server"]
    assert any("POST /get_reward -> 422" in m and "labels[0] is empty" in m and "--data.label_key" in m for m in messages)
    assert any("POST /get_reward -> 401" in m and "token" in m for m in messages)


def load_like_openrlhf(path: Path):
    """agent.py:193-200: a '.py' reward URL is exec'd as module 'reward_func'."""
    spec = importlib.util.spec_from_file_location("reward_func", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func


def openrlhf_fetch_via_func(reward_func, queries, prompts, labels):
    """agent.py:303-320: positional (queries, prompts, labels), one sample per call, in a thread."""

    async def run():
        return await asyncio.gather(*(asyncio.to_thread(reward_func, queries[i : i + 1], prompts[i : i + 1], labels[i : i + 1]) for i in range(len(queries))))

    return asyncio.run(run())


def test_openrlhf_reward_func_file_forwards_to_the_server(server, tiny_judge, monkeypatch):
    import pluie_reward.serving.openrlhf as openrlhf

    monkeypatch.setenv("PLUIE_REWARD_URL", server.url)
    monkeypatch.setenv("PLUIE_REWARD_TOKEN", TOKEN)
    reward_func = load_like_openrlhf(Path(openrlhf.__file__))
    samples = [openrlhf_sample(tiny_judge.tokenizer, s, h) for s, h in zip(SOURCES, HYPOTHESES)]
    answers = openrlhf_fetch_via_func(reward_func, [q for q, _ in samples], [p for _, p in samples], SOURCES)
    want = tiny_judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES[:3], use_cache=False)
    assert [openrlhf_apply(a)["reward"][0] for a in answers] == pytest.approx(want, abs=TOL)


def test_openrlhf_reward_func_file_scores_in_process(tiny_judge, local_openrlhf_judge, caplog):
    """No URL: the judge is loaded in the worker (here a tiny model saved to disk) and concurrent
    calls share Judge.score calls."""
    import pluie_reward.serving.openrlhf as openrlhf

    tokenizer = local_openrlhf_judge
    reward_func = load_like_openrlhf(Path(openrlhf.__file__))
    samples = [openrlhf_sample(tokenizer, s, h) for s, h in zip(SOURCES, HYPOTHESES)]
    answers = openrlhf_fetch_via_func(reward_func, [q for q, _ in samples], [p for _, p in samples], SOURCES)
    want = tiny_judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES[:3], use_cache=False)
    assert [a["rewards"][0] for a in answers] == pytest.approx(want, abs=TOL)
    assert all(set(a) == {"rewards", "scores", "extra_logs"} for a in answers)
    with caplog.at_level(logging.ERROR, logger="pluie_reward.openrlhf"), pytest.raises(ValueError, match="--data.label_key"):
        reward_func([samples[0][0]], [samples[0][1]], [""])
    assert any("labels[0] is empty" in r.getMessage() for r in caplog.records)


def test_client_module_has_no_hidden_state_between_loops(server):
    """Each event loop gets its own micro-batcher (verl's workers each run one loop)."""
    for _ in range(2):
        got = asyncio.run(compute_score("d", HYPOTHESES[0], SOURCES[0], url=server.url, token=TOKEN))
        assert set(got) == {"score", "acc", "logratio", "p_yes"}
    import gc

    gc.collect()
    assert len(client_module._coalescers) == 0  # finished loops are dropped with their batchers
