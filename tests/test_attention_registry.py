"""The shared-prefix attention reaches a model through transformers' public attention interfaces,
under its own name, selected on the judge's model only while it scores; the private PyTorch op it
uses on CPU is checked against the public SDPA here, so that a move breaks this test."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AttentionInterface, AttentionMaskInterface

from pluie_reward.engines.transformers.attention import _FUSED_CPU_OP, PREFIX, partial_attention, register, selected
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_judge, make_tiny_tokenizer


def test_registration_adds_a_name_and_replaces_nothing():
    before = AttentionInterface()["sdpa"]
    assert register("sdpa") == PREFIX + "sdpa"
    assert AttentionInterface()["sdpa"] is before  # the process's sdpa is untouched
    assert not getattr(AttentionInterface()["sdpa"], "pluie_dispatch", False)
    assert AttentionMaskInterface()[PREFIX + "sdpa"] is AttentionMaskInterface()["sdpa"]
    assert register("eager") is None


def test_the_judge_selects_it_only_while_scoring_and_other_models_never_see_it():
    judge = make_tiny_judge()
    other = make_tiny_causal_lm(make_tiny_tokenizer(), seed=5)
    own = judge.model.config._attn_implementation
    seen = []
    original = AttentionInterface()[PREFIX + own]

    def spy(module, *args, **kwargs):
        seen.append(module.config._attn_implementation)
        return original(module, *args, **kwargs)

    AttentionInterface.register(PREFIX + own, spy)
    try:
        judge.score("para-fs", source=["a b c", "a b c"], hypothesis=["c b a", "b a c"])
    finally:
        AttentionInterface.register(PREFIX + own, original)
    assert seen and set(seen) == {PREFIX + own}  # the judge's forwards ran through it
    assert judge.model.config._attn_implementation == own  # and the model got its own back
    assert other.config._attn_implementation == own


def test_selected_restores_after_an_error():
    model = make_tiny_causal_lm(make_tiny_tokenizer())
    own = model.config._attn_implementation
    with pytest.raises(RuntimeError):
        with selected(model, register(own)) as took:
            assert took and model.config._attn_implementation == PREFIX + own
            raise RuntimeError("boom")
    assert model.config._attn_implementation == own


def test_the_private_cpu_flash_op_still_exists_and_gives_sdpa_and_its_log_sum_exp():
    op = getattr(torch.ops.aten, _FUSED_CPU_OP)  # breaks here if PyTorch moves or renames it
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    out, lse = partial_attention(q, k, v, 1 / math.sqrt(8), causal=True)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(out, reference, atol=1e-5)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8) + torch.triu(torch.full((5, 5), float("-inf")), 1)
    assert torch.allclose(lse, torch.logsumexp(scores, dim=-1), atol=1e-5)
    assert op is not None
