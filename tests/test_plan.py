"""A scoring call is a plan: checked when planned, run by score/ascore/the batchers alike, joined and split
by the server's batcher without mixing up requests. Values are compared with an independent eq. 3
computed in the test (``reference_pluie``), not with the judge's own output."""

from __future__ import annotations

import asyncio

import pytest

from pluie_reward import Judge
from pluie_reward.core.plan import ScoreOptions, ScoringPlan
from pluie_reward.engines.base import Engine
from pluie_reward.serving.batcher import Batcher
from pluie_reward.testing import make_tiny_judge

from test_reference import reference_pluie

SOURCES = ["The cat sleeps on the mat.", "Heavy rain delayed the flights.", "The team won again."]
HYPOTHESES = ["A cat is sleeping on the mat.", "Flights were late because of rain.", "Prices went up."]


@pytest.fixture(scope="module")
def judge() -> Judge:
    return make_tiny_judge(seed=3)


def test_run_of_a_plan_follows_eq3(judge):
    plan = judge.plan("para-fs", source=SOURCES, hypothesis=HYPOTHESES, use_cache=False)
    want = [reference_pluie(judge.model, judge.tokenizer, s, h) for s, h in zip(SOURCES, HYPOTHESES)]
    got = judge.run(plan)
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3


def test_bad_input_fails_when_planned_before_the_engine_runs(judge):
    calls = []
    original = judge.engine.answer_logprobs
    judge.engine.answer_logprobs = lambda *a, **k: calls.append(a) or original(*a, **k)
    try:
        with pytest.raises((TypeError, ValueError, KeyError)):
            judge.plan("para-fs", source=SOURCES, hypothesis=HYPOTHESES[:2])  # lengths differ
        with pytest.raises((TypeError, ValueError, KeyError)):
            judge.plan("para-fs", source=SOURCES)  # hypothesis missing
        with pytest.raises(ValueError, match="max_new_tokens"):
            judge.plan("para-fs", source=SOURCES, hypothesis=HYPOTHESES, max_new_tokens=0)
    finally:
        del judge.engine.answer_logprobs
    assert calls == []


def test_a_plan_runs_only_on_its_own_judge(judge):
    other = make_tiny_judge(seed=3)
    plan = other.plan("para-fs", source=SOURCES[:1], hypothesis=HYPOTHESES[:1])
    with pytest.raises(ValueError, match="another judge"):
        judge.run(plan)


def test_concat_and_split_keep_each_request_its_own_results(judge):
    plans = [
        judge.plan("para-fs", details=True, source=SOURCES[:2], hypothesis=HYPOTHESES[:2]),
        judge.plan("para-fs", details=True, source=SOURCES[2], hypothesis=[HYPOTHESES[2], HYPOTHESES[0]]),
    ]
    joined = ScoringPlan.concat(plans)
    assert joined.n == 4 and joined.sizes == (2, 2)
    parts = joined.split(judge.run(joined))
    pairs = [(SOURCES[0], HYPOTHESES[0]), (SOURCES[1], HYPOTHESES[1]), (SOURCES[2], HYPOTHESES[2]), (SOURCES[2], HYPOTHESES[0])]
    want = [reference_pluie(judge.model, judge.tokenizer, s, h) for s, h in pairs]
    got = [record["logratio"] for part in parts for record in part]
    assert [len(p) for p in parts] == [2, 2]
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3
    with pytest.raises(ValueError, match="same options"):
        ScoringPlan.concat([plans[0], judge.plan("para-fs", source="s", hypothesis="h")])


def test_the_batcher_joins_requests_into_one_call_and_answers_each(judge):
    calls = []
    run = judge.run
    judge.run = lambda plan: calls.append(plan.sizes) or run(plan)
    batcher = Batcher(judge, "para-fs", max_wait_ms=200).start()
    try:
        futures = [batcher.submit({"source": [s], "hypothesis": [h]}) for s, h in zip(SOURCES, HYPOTHESES)]
        got = [f.result(timeout=120)[0]["logratio"] for f in futures]
    finally:
        batcher.close()
        del judge.run
    want = [reference_pluie(judge.model, judge.tokenizer, s, h) for s, h in zip(SOURCES, HYPOTHESES)]
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3
    assert sum(len(sizes) for sizes in calls) == 3 and len(calls) < 3  # joined, not one call each


class Concurrent(Engine):
    """Wraps the tiny judge's engine; awaited side by side (as vLLM and remote engines are)."""

    concurrent = True

    def __init__(self, inner):
        self.inner, self.name, self.tokenizer, self.max_length = inner, "concurrent", inner.tokenizer, inner.max_length
        self.awaited = 0

    def session(self):
        return self.inner.session()

    def answer_logprobs(self, requests, answers, *, prefix=()):
        raise AssertionError("the async path must await aanswer_logprobs")

    async def aanswer_logprobs(self, requests, answers, *, prefix=()):
        self.awaited += 1
        return self.inner.answer_logprobs(requests, answers, prefix=prefix)

    def generate(self, prompts, *, max_new_tokens, stop_ids=()):
        return self.inner.generate(prompts, max_new_tokens=max_new_tokens, stop_ids=stop_ids)


def test_arun_awaits_a_concurrent_engine_with_the_same_results(judge):
    engine = Concurrent(judge.engine)
    async_judge = Judge(engine)
    plan = async_judge.plan("para-fs", source=SOURCES, hypothesis=HYPOTHESES, use_cache=False)
    got = asyncio.run(async_judge.arun(plan))
    want = [reference_pluie(judge.model, judge.tokenizer, s, h) for s, h in zip(SOURCES, HYPOTHESES)]
    assert engine.awaited == 1
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3


def test_options_are_checked_once():
    assert ScoreOptions().use_cache and ScoreOptions().truncate
    with pytest.raises(ValueError, match="positive integer"):
        ScoreOptions(max_new_tokens=True)
