"""TRL 1.16's ``AsyncGRPOTrainer`` computes rewards in a spawned child process: ``AsyncRolloutWorker`` pickles the
``reward_funcs``, spawns ``_child_main``, which sets ``CUDA_VISIBLE_DEVICES=""`` and runs ``_AsyncRolloutLoop``, whose
``_score_group`` calls each reward (trl==1.16.0 (wheel): trl/experimental/async_grpo/async_rollout_worker.py:247-306,
1026-1040, 1141-1245). That path runs here for real on the CPU, only the generation replaced (it needs a vLLM server):
:class:`ScoreFixedCompletions` hands TRL's own ``_score_group`` fixed completions. The recipes of docs/rewards.md ("TRL's
async trainer") score there as ``Judge.score`` does in this process; a judge factory that asks for CUDA fails at once,
naming them."""

from __future__ import annotations

import functools
import os
import queue
import time

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
worker = pytest.importorskip("trl.experimental.async_grpo.async_rollout_worker")
pytest.importorskip("aiohttp")
pytest.importorskip("fastapi")

from pluie_reward import Judge, ParaphraseReward, PluieReward  # noqa: E402
from pluie_reward.serving import background, create_app  # noqa: E402
from pluie_reward.serving.client import RemotePluieReward  # noqa: E402

SOURCE = "The cat sleeps on the mat."
COMPLETIONS = ["A cat is sleeping on the mat.", "The cat sleeps on the mat.", "Dogs bark at night."]


class ScoreFixedCompletions(worker._AsyncRolloutLoop):
    """TRL's rollout loop with one group of :data:`COMPLETIONS` in place of its generation: ``_score_group`` scores them
    with the pickled rewards, and each completion's metrics (``rewards/<name>``) go back through TRL's queue."""

    async def _run_loops(self, stop_event):
        n = len(COMPLETIONS)
        group = worker.RolloutGroup(
            prompts=[[{"role": "user", "content": f"Paraphrase: {SOURCE}"}]] * n, reward_kwargs={"source": [SOURCE] * n},
            completions=[[{"role": "assistant", "content": c}] for c in COMPLETIONS], completions_ids=[[1]] * n,
            completions_sequences=[[worker.TrainingSequence([0, 1], [0, 1], [0.0, 0.0], str(i))] for i in range(n)],
            tool_call_counts=[0] * n, tool_failure_counts=[0] * n, model_version=0, group_id=0, env_rewards=[None] * n,
            rollout_rewards=[None] * n)
        for sample in await self._score_group(group):
            self.rollout_buffer.put({**sample.metrics, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")})
        await stop_event.wait()


def spawned(reward_funcs, tokenizer, expect: int | None):
    """Run :class:`ScoreFixedCompletions` through TRL's ``AsyncRolloutWorker`` (pickle, spawn, CUDA hidden); the metrics
    of ``expect`` completions, or (``expect=None``) the failure TRL reports for the child."""
    from accelerate.state import PartialState
    from datasets import Dataset

    PartialState()  # as the trainer has made it (TRL's worker logs through accelerate)
    if not worker.is_vllm_available():  # only AsyncRolloutWorker's constructor asks; the child never imports vLLM here
        worker.is_vllm_available = lambda *a, **k: True
    rollouts = worker.AsyncRolloutWorker(
        model_name="policy", dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": SOURCE}]], "source": [SOURCE]}),
        reward_funcs=reward_funcs, processing_class=tokenizer, eos_token_ids=[tokenizer.eos_token_id],
        num_generations=len(COMPLETIONS), child_ready_timeout=600)
    rollouts._loop_cls = ScoreFixedCompletions
    rollouts.start()
    try:
        deadline = time.monotonic() + 600
        got = []
        while time.monotonic() < deadline:
            if expect is None:
                try:
                    rollouts.check_health(stale_after_s=10**6)
                except RuntimeError as err:
                    return err
                time.sleep(1)
                continue
            try:
                got.append(rollouts.rollout_buffer.get(timeout=5))
            except queue.Empty:
                rollouts.check_health(stale_after_s=10**6)
            if len(got) == expect:
                return got
        raise AssertionError(f"the child gave {len(got)} of {expect} rollouts in 10 minutes")
    finally:
        # TRL's stop() sets an event the child's watcher thread sleeps on, and waits for that thread to wake: a child
        # that failed or ended never does, and stop() would wait forever (as a CI run did): only a working child is stopped
        if rollouts._process is not None and (expect is None or rollouts._failed_event.is_set() or not rollouts._process.is_alive()):
            rollouts._process.join(timeout=120)
            rollouts._process = None
        rollouts.stop()


def policy_tokenizer():
    tokenizer = Judge.load().tokenizer
    # TRL's loop wants a response template to parse generations: SmolLM2's chat template is not one TRL knows, and
    # nothing is generated here
    tokenizer.response_template = "{{ content }}"
    return tokenizer


@pytest.mark.slow
def test_rewards_score_in_trls_spawned_cuda_free_child():
    judge = Judge.load()
    expected = judge.score("para-fs", source=[SOURCE] * 3, hypothesis=COMPLETIONS)
    assert max(expected) - min(expected) > 1  # the completions' scores differ: a reward scoring the wrong one shows
    with background(create_app(judge, "para-fs"), host="127.0.0.1", port=0) as server:
        rewards = [PluieReward(functools.partial(Judge.load, device="cpu"), fields={"source": "source"}),  # in the child
                   ParaphraseReward(functools.partial(Judge.load)),
                   RemotePluieReward(server.url, fields={"source": "source"}, name="remote")]   # the judge served here
        got = spawned(rewards, policy_tokenizer(), expect=3)
    assert {g["cuda"] for g in got} == {""}  # scored where TRL hides CUDA
    index = {min(range(3), key=lambda i: abs(expected[i] - g["rewards/pluie"])): g for g in got}
    assert sorted(index) == [0, 1, 2]
    for i, g in index.items():  # PLUIE in the child, and on the judge server, is Judge.score's in this process
        assert g["rewards/pluie"] == pytest.approx(expected[i], abs=1e-4) and g["rewards/remote"] == pytest.approx(expected[i], abs=1e-4)
    assert COMPLETIONS[1] == SOURCE and index[1]["rewards/paraphrase"] == 0.0  # the copy earns nothing
    assert index[0]["rewards/paraphrase"] > 0.5  # the paraphrase does


@pytest.mark.slow
def test_a_judge_factory_asking_for_cuda_fails_at_once_naming_the_recipe():
    err = spawned([PluieReward(functools.partial(Judge.load, device="cuda"), fields={"source": "source"})],
                  policy_tokenizer(), expect=None)
    message = str(err.__cause__)
    assert "CUDA is hidden in this process" in message and "AsyncGRPOTrainer" in message, message
    assert "RemotePluieReward" in message and "device='cpu'" in message and "docs/rewards.md" in message, message
