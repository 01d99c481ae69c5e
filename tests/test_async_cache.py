"""Concurrent ``Judge.ascore`` calls sharing a small result cache: a call whose planned cache hits are
evicted by another call while it awaits the engine still returns the right values (issue 19 §4)."""

from __future__ import annotations

import asyncio
import contextlib

from pluie_reward import Judge
from pluie_reward.engines.base import Engine
from pluie_reward.testing import make_tiny_tokenizer


class SlowEngine(Engine):
    """A deterministic engine: log p(answer k) is a known function of the prompt ids; the request
    whose ids end with the token of ``slow`` awaits 0.2 s, the others 0.01 s."""

    name, max_length = "slow-fake", None
    concurrent = True  # its async calls are awaited side by side

    def __init__(self, slow_token: int) -> None:
        self.tokenizer = make_tiny_tokenizer()
        self.slow_token = slow_token
        self.calls = 0

    def session(self):
        return contextlib.nullcontext(0)

    @staticmethod
    def values(ids, answers):
        return [float((sum(ids) * (k + 3)) % 97) / 10.0 for k in range(len(answers))]

    def answer_logprobs(self, requests, answers, *, prefix=()):
        return [self.values(r.ids, answers) for r in requests]

    async def aanswer_logprobs(self, requests, answers, *, prefix=()):
        self.calls += 1
        slow = any(self.slow_token in r.ids[-12:] for r in requests)
        await asyncio.sleep(0.2 if slow else 0.01)
        return self.answer_logprobs(requests, answers)

    def generate(self, prompts, *, max_new_tokens, stop_ids=()):
        return [[] for _ in prompts]

    async def agenerate(self, prompts, *, max_new_tokens, stop_ids=()):
        return self.generate(prompts, max_new_tokens=max_new_tokens)


def expected(judge, hypotheses):
    """Sequential reference: the engine's function of each prompt's ids, without any cache."""
    bound = judge.bind("para-direct")
    items = bound.encode_items({"source": ["s"] * len(hypotheses), "hypothesis": hypotheses}, len(hypotheses))
    return [v[0] - v[1] for v in (SlowEngine.values(item.ids, bound.answer_ids) for item in items)]


def test_evicted_planned_hits_do_not_break_a_waiting_call():
    tokenizer = make_tiny_tokenizer()
    slow = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("h9"))[-1]
    judge = Judge(SlowEngine(slow), cache_size=4)

    async def run():
        await judge.ascore("para-direct", source="s", hypothesis=["h1", "h2"])     # cached: h1, h2
        return await asyncio.gather(
            judge.ascore("para-direct", source="s", hypothesis=["h1", "h2", "h9"]),   # hits h1, h2; h9 is slow
            judge.ascore("para-direct", source="s", hypothesis=[f"x{i}" for i in range(1, 6)]),  # evicts h1, h2
        )

    first, second = asyncio.run(run())
    assert first == expected(judge, ["h1", "h2", "h9"])
    assert second == expected(judge, [f"x{i}" for i in range(1, 6)])
