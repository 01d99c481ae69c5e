"""PLUIE inside two RL frameworks' own released classes (installed as CI installs them: .ci/run, leg b; each test skips
where its framework is missing):

- verifiers 0.4.0: ``Task.score`` builds every judge of its ``TaskConfig.judges`` through verifiers' plugin loader (the
  id ``pluie-reward-verifiers`` imports the top-level module ``pluie_reward_verifiers``) and records their rewards on the
  trace (verifiers==0.4.0 (wheel): verifiers/v1/task.py:200-263, utils/loaders.py:76-122, configs/judge.py:36-50).
- skyrl-gym 0.4.0: ``skyrl_gym.make`` builds a registered ``BaseTextEnv`` with the run's ``env_config`` and the row's
  ``extras``; ``step`` returns the reward (skyrl_gym==0.4.0 (wheel): skyrl_gym/envs/registration.py:280-330).

References are ``Judge.score`` calls on another instance of the default judge, in this process and through a judge
server; a copy of the source scores 0 on the copy-proof path."""

from __future__ import annotations

import asyncio
import math

import pytest

from pluie_reward import Judge

SOURCE = "The cat sleeps on the mat."
REPLIES = ["A cat is sleeping on the mat.", SOURCE, "Dogs bark at night."]  # a paraphrase, a copy, another sentence


@pytest.fixture(scope="module")
def expected():
    scores = Judge.load().score("para-fs", source=[SOURCE] * 3, hypothesis=REPLIES)
    assert max(scores) - min(scores) > 1  # the replies differ: a reward reading the wrong text shows
    return scores


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("fastapi")
    from pluie_reward.serving import background, create_app

    with background(create_app(Judge.load(), "para-fs"), host="127.0.0.1", port=0) as srv:
        yield srv.url


def check(got: dict[str, list[float]], expected: list[float]) -> None:
    """PLUIE within 1e-4 of Judge.score; the copy-proof reward 0 for the copy, at most p_yes for the others."""
    assert got["pluie"] == pytest.approx(expected, abs=1e-4)
    assert got["paraphrase"][1] == 0.0
    assert got["paraphrase"][0] > 0.5 and all(r <= 1 / (1 + math.exp(-x)) + 1e-4 for r, x in zip(got["paraphrase"], expected))


@pytest.mark.slow
@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "judge-server"])
def test_verifiers_task_scores_with_the_pluie_judge_plugin(remote, expected, request):
    pytest.importorskip("verifiers.v1")
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.configs.task import TaskConfig
    from verifiers.v1.task import Task, WireTaskData
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    where = {"url": request.getfixturevalue("server")} if remote else {}
    config = TaskConfig(judges=[{"id": "pluie-reward-verifiers", "name": "pluie", "fields": {"source": "sentence"}, **where},
                                {"id": "pluie-reward-verifiers", "name": "paraphrase", "task": "paraphrase",
                                 "fields": {"source": "sentence"}, "weight": 2.0, **where}])
    assert [type(j).__name__ for j in config.judges] == ["PluieJudgeConfig"] * 2  # resolved by verifiers' plugin loader
    data = WireTaskData(prompt=f"Paraphrase: {SOURCE}", sentence=SOURCE)
    got: dict[str, list[float]] = {"pluie": [], "paraphrase": []}
    for reply in REPLIES:
        trace = Trace(task=TraceTask(type="Task", data=data), agent=AgentInfo(config=AgentConfig()), root_reply=reply)
        asyncio.run(Task(data, config).score(trace))
        for name in got:
            got[name].append(trace.rewards[name].score)
        assert trace.rewards["paraphrase"].weight == 2.0
    check(got, expected)


@pytest.mark.slow
@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "judge-server"])
def test_skyrl_environment_rewards_the_reply(remote, expected, request):
    skyrl_gym = pytest.importorskip("skyrl_gym")
    from skyrl_gym.envs import deregister, register

    where = {"url": request.getfixturevalue("server")} if remote else {}
    register(id="pluie-test", entry_point="pluie_reward.serving.skyrl_env:PluieTextEnv")
    try:
        row = {"reward_spec": {"method": "rule", "ground_truth": SOURCE}, "extra_info": {"split": "train"}}
        got: dict[str, list[float]] = {"pluie": [], "paraphrase": []}
        for name, settings in (("pluie", {}), ("paraphrase", {"task": "paraphrase"})):
            for reply in REPLIES:
                env = skyrl_gym.make("pluie-test", env_config={**settings, **where}, extras=row)
                env.init([{"role": "user", "content": f"Paraphrase: {SOURCE}"}])
                out = env.step(reply)
                assert out["done"] and out["observations"] == [] and out["metadata"]["pluie_reward"] == out["reward"]
                got[name].append(out["reward"])
        check(got, expected)
        with pytest.raises(ValueError, match="unknown setting"):
            skyrl_gym.make("pluie-test", env_config={"taks": "paraphrase"}, extras=row)
    finally:
        deregister("pluie-test")
