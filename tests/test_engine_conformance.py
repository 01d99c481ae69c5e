"""Every engine passes one conformance suite (``pluie_reward.testing.check_engine``) against an
independent plain-forward reference. Here: the transformers engine (embedded judge, a tiny random
model, a PEFT policy shared with adapters off); the vLLM, shared vLLM and remote engines run it in
their own modules (``test_engines.py``, ``test_vllm_shared.py``), beside the engine they already start.
"""

from __future__ import annotations

import contextlib

import pytest

from pluie_reward import Judge
from pluie_reward.engines.base import Engine
from pluie_reward.testing import check_engine, make_tiny_judge


def test_the_transformers_engine_conforms(embedded_judge):
    check_engine(embedded_judge.engine, embedded_judge.model)


def test_a_tiny_random_model_conforms():
    judge = make_tiny_judge()
    check_engine(judge.engine, judge.model)


def test_a_shared_peft_policy_conforms(embedded_base_judge):
    peft = pytest.importorskip("peft")
    from pluie_reward import load_trainable_embedded

    policy, tokenizer = load_trainable_embedded()
    base_reference = embedded_base_judge.model
    policy = peft.get_peft_model(policy, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    check_engine(Judge.from_peft(policy, tokenizer).engine, base_reference)


class Broken(Engine):
    """An engine that swaps the answers: the suite must catch it."""

    def __init__(self, inner: Engine) -> None:
        self.inner, self.name, self.tokenizer, self.max_length = inner, "broken", inner.tokenizer, inner.max_length

    def session(self):
        return self.inner.session()

    def answer_logprobs(self, requests, answers, *, prefix=()):
        return [row[::-1] for row in self.inner.answer_logprobs(requests, answers, prefix=prefix)]

    def generate(self, prompts, *, max_new_tokens, stop_ids=()):
        return self.inner.generate(prompts, max_new_tokens=max_new_tokens, stop_ids=stop_ids)


def test_the_suite_catches_a_broken_engine():
    judge = make_tiny_judge()
    with pytest.raises(AssertionError, match="one-token answers"):
        check_engine(Broken(judge.engine), judge.model)


def test_placement_and_sharing_are_declared_errors_where_an_engine_cannot():
    class Elsewhere(Engine):
        name, tokenizer, max_length = "elsewhere", None, None

        def session(self):
            return contextlib.nullcontext(0)

        def answer_logprobs(self, requests, answers, *, prefix=()):
            return [[0.0] * len(answers) for _ in requests]

        def generate(self, prompts, *, max_new_tokens, stop_ids=()):
            return [[] for _ in prompts]

    judge = Judge(Elsewhere())
    with pytest.raises(NotImplementedError, match="places its model itself"):
        judge.to("cpu")
    with pytest.raises(NotImplementedError, match="nothing to attach"):
        judge.attach(object())
    assert judge.model is None and judge.engine.device is None
